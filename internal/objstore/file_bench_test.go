//go:build linux || darwin

package objstore_test

import (
	"fmt"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

// BenchmarkFilePut measures one durable Put on the file driver, the cost
// that bounds the engine's serial WAL writer: create-only (a WAL batch) and
// overwrite (a snapshot-sized write is rare; the owner object on bucket
// stores is the overwrite case elsewhere), for a small and a larger object.
// Every key is new, in one directory, as WAL keys are.
func BenchmarkFilePut(b *testing.B) {
	for _, ifNotExist := range []bool{true, false} {
		for _, size := range []int{512, 64 << 10} {
			name := fmt.Sprintf("createonly=%v/size=%d", ifNotExist, size)
			b.Run(name, func(b *testing.B) {
				bkt := objstoretest.Open(b, objstoretest.FileURL(b))
				data := make([]byte, size)
				ctx := b.Context()
				b.SetBytes(int64(size))
				for i := 0; b.Loop(); i++ {
					if err := bkt.Put(ctx, fmt.Sprintf("wal/%020d", i), data, ifNotExist); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "objects/s")
			})
		}
	}
}
