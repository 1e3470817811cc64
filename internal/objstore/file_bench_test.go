//go:build linux || darwin

package objstore_test

import (
	"fmt"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
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

// BenchmarkFileSegmentRecord measures one durable segment record, the WAL
// write of a file store: WriteAt then Sync (pwrite, fdatasync) against
// WriteAtSync (one pwritev2 with RWF_DSYNC), records of 4 KiB and 16 KiB
// (a batch of a few and of a few dozen transactions) appended in an 8 MiB
// segment.
func BenchmarkFileSegmentRecord(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10} {
		for _, mode := range []string{"write+sync", "writesync"} {
			b.Run(fmt.Sprintf("%s/size=%d", mode, size), func(b *testing.B) {
				sg, _ := objstore.AsSegmenter(objstoretest.Open(b, objstoretest.FileURL(b)))
				seg, err := sg.NewSegment(b.Context(), 8<<20)
				if err != nil {
					b.Fatal(err)
				}
				defer seg.Close()
				data := make([]byte, size)
				b.SetBytes(int64(size))
				var off int64
				for b.Loop() {
					if off+int64(size) > seg.Size() {
						off = 0
					}
					if mode == "writesync" {
						err = seg.WriteAtSync(data, off)
					} else if err = seg.WriteAt(data, off); err == nil {
						err = seg.Sync()
					}
					if err != nil {
						b.Fatal(err)
					}
					off += int64(size)
				}
			})
		}
	}
}
