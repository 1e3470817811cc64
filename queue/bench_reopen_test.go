package queue

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkReopen times Open of a file:// store holding pending jobs
// (100-byte payloads; $STEPWELL_REOPEN_JOBS of them, 100,000 by default),
// as a restarted service would find it, and reports the heap the reopened
// store holds per pending job. The store is built once, before the timer.
//
//	STEPWELL_REOPEN_JOBS=1000000 go test -run '^$' -bench Reopen -benchtime 3x ./queue/
func BenchmarkReopen(b *testing.B) {
	n := 100_000
	if s := os.Getenv("STEPWELL_REOPEN_JOBS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("STEPWELL_REOPEN_JOBS=%q: want a positive count", s)
		}
	}
	ctx := context.Background()
	url := "file://" + b.TempDir()
	q, err := Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	fillQueue(b, q, "q", n, EnqueueOptions{})
	st := q.StorageStats()
	if err := q.Close(ctx); err != nil {
		b.Fatal(err)
	}
	q = nil
	b.Logf("built %d jobs: %d keys, %d snapshots", n, st.Keys, st.Snapshots)

	var perJob float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		before := heapInUse()
		b.StartTimer()
		q, err := Open(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		perJob = float64(heapInUse()-before) / float64(n)
		s, err := q.Stats(ctx, "q")
		if err != nil || s.Pending != int64(n) {
			b.Fatalf("reopened with %+v, %v; want %d pending", s, err, n)
		}
		if err := q.Close(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(perJob, "heap-B/job")
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
