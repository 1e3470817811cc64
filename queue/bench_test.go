package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkCommit measures durable commit throughput with 1, 16 and 256
// concurrent committers, each commit one 100-byte Put. It reports
// commits/s and commits per WAL object (the group-commit factor, which is
// what keeps the object-store bill low).
func BenchmarkCommit(b *testing.B) {
	stores := map[string]func(b *testing.B) string{
		"mem":  func(b *testing.B) string { return memURL(b) },
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
