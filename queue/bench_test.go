package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stepwell/stepwell/internal/testenv"
)

// BenchmarkCommit measures durable commit throughput with 1, 16 and 256
// concurrent committers, each commit one 100-byte Put. It reports
// commits/s and commits per WAL object (the group-commit factor, which is
// what keeps the object-store bill low).
func BenchmarkCommit(b *testing.B) {
	stores := map[string]func(b *testing.B) string{
		"mem":  func(b *testing.B) string { return testenv.MemURL(b.Name()) },
		"file": func(b *testing.B) string { return "file://" + b.TempDir() },
	}
	for _, store := range []string{"mem", "file"} {
		for _, conc := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("%s/committers=%d", store, conc), func(b *testing.B) {
				benchCommit(b, stores[store](b), conc)
			})
		}
	}
}

func benchCommit(b *testing.B, url string, conc int) {
	ctx := context.Background()
	q, err := Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close(ctx)
	val := make([]byte, 100)
	before := q.StorageStats()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("g%03d/00000000000", g))
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				copy(key[5:], fmt.Sprintf("%011d", n))
				if err := q.Put(ctx, key, val); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := q.StorageStats()
	batches := after.WALBatches - before.WALBatches
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	if batches > 0 {
		b.ReportMetric(float64(after.Transactions-before.Transactions)/float64(batches), "commits/walobj")
	}
}

// BenchmarkReadOnlyRefresh measures a reader keeping up with a writer on
// file://: each iteration the writer commits one 100-byte Put and the
// reader (WithReadOnly) refreshes. It reports the bytes and reads a
// Refresh takes: the new WAL record and a piece past it, however large
// the segment has grown.
func BenchmarkReadOnlyRefresh(b *testing.B) {
	ctx := context.Background()
	url := "file://" + b.TempDir()
	w, err := Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(ctx)
	val := make([]byte, 100)
	for i := range 1000 { // a segment with some history
		if err := w.Put(ctx, []byte(fmt.Sprint("h", i)), val); err != nil {
			b.Fatal(err)
		}
	}
	r, err := Open(ctx, url, WithReadOnly())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	before := r.StorageStats()
	b.ResetTimer()
	for i := range b.N {
		if err := w.Put(ctx, []byte(fmt.Sprint("k", i)), val); err != nil {
			b.Fatal(err)
		}
		if err := r.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := r.StorageStats()
	b.ReportMetric(float64(after.BytesRead-before.BytesRead)/float64(b.N), "B_read/refresh")
	b.ReportMetric(float64(after.Gets-before.Gets)/float64(b.N), "reads/refresh")
}
