package queue

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// Job queue benchmarks. No timing assertions: read the figures.
//
//	go test -run '^$' -bench 'Claim|EnqueueClaimAck' -benchtime 2s ./queue/
//
// Each iteration of the claim benchmarks is the same job cycle (enqueue one
// job, claim one, ack it), so ClaimDeep and ClaimShallow differ only in how
// many other jobs the queue holds; claim-ns/op isolates the Claim call.

const benchDepth = 100_000

// fillQueue enqueues n jobs in EnqueueBatch chunks.
func fillQueue(b testing.TB, q *Queue, queue string, n int, opts EnqueueOptions) {
	b.Helper()
	ctx := context.Background()
	payload := make([]byte, 100)
	const chunk = 2000
	reqs := make([]EnqueueRequest, 0, chunk)
	for done := 0; done < n; done += len(reqs) {
		reqs = reqs[:0]
		for i := 0; i < min(chunk, n-done); i++ {
			reqs = append(reqs, EnqueueRequest{Queue: queue, Payload: payload, Options: opts})
		}
		if _, err := q.EnqueueBatch(ctx, reqs); err != nil {
			b.Fatalf("filling the queue: %v", err)
		}
	}
}

// benchCycle runs b.N enqueue-claim-ack cycles on queue and reports the
// time spent in Claim per cycle.
func benchCycle(b *testing.B, q *Queue, queue string) {
	ctx := context.Background()
	payload := make([]byte, 100)
	var claimTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := q.Enqueue(ctx, queue, payload, EnqueueOptions{}); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		j, err := q.claimOne(ctx, queue)
		claimTime += time.Since(t0)
		if err != nil || j == nil {
			b.Fatalf("Claim = %v, %v", j, err)
		}
		if err := q.Ack(ctx, j); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(claimTime.Nanoseconds())/float64(b.N), "claim-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkClaimDeep: claim and ack with 100k other jobs in the queue (on
// mem). "pending": 100k claimable jobs ahead (each cycle claims the oldest
// and enqueues one at the tail, so the depth stays 100k). "scheduled": 100k
// jobs due in an hour, which a claim must not scan. "dead": 100k dead jobs.
func BenchmarkClaimDeep(b *testing.B) {
	for _, kind := range []string{"pending", "scheduled", "dead"} {
		b.Run(kind, func(b *testing.B) {
			q := openT(b, testenv.MemURL(b.Name()), WithMaxAttempts(1))
			switch kind {
			case "pending":
				fillQueue(b, q, "q", benchDepth, EnqueueOptions{})
			case "scheduled":
				fillQueue(b, q, "q", benchDepth, EnqueueOptions{Delay: time.Hour})
			case "dead":
				fillQueue(b, q, "q", benchDepth, EnqueueOptions{})
				killAll(b, q, "q")
			}
			if s, _ := q.Stats(context.Background(), "q"); s.Pending+s.Scheduled+s.Dead != benchDepth {
				b.Fatalf("setup: %+v", s)
			}
			benchCycle(b, q, "q")
		})
	}
}

// killAll claims and dead-letters every pending job of queue, in batches.
func killAll(b *testing.B, q *Queue, queue string) {
	ctx := context.Background()
	for {
		jobs, err := q.claimBatch(ctx, queue, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) == 0 {
			return
		}
		t := new(Txn)
		for _, j := range jobs {
			t.DeadLetter(j, "bench")
		}
		if _, err := q.Commit(ctx, t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimShallow: the queue is kept near empty (enqueue one, claim
// it, ack it), after a history of many jobs: a claim that scanned settled
// jobs or stale index entries would show here.
func BenchmarkClaimShallow(b *testing.B) {
	for _, history := range []int{0, benchDepth} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			q := openT(b, testenv.MemURL(b.Name()))
			if history > 0 {
				// Enqueue, claim and ack many jobs first.
				fillQueue(b, q, "q", history, EnqueueOptions{})
				ctx := context.Background()
				for {
					jobs, err := q.claimBatch(ctx, "q", 1000)
					if err != nil {
						b.Fatal(err)
					}
					if len(jobs) == 0 {
						break
					}
					t := new(Txn)
					for _, j := range jobs {
						t.Ack(j)
					}
					if _, err := q.Commit(ctx, t); err != nil {
						b.Fatal(err)
					}
				}
			}
			benchCycle(b, q, "q")
		})
	}
}

// BenchmarkEnqueueClaimAck: job throughput, on mem and file, with 1 and 32
// concurrent workers, each running enqueue-claim-ack cycles on one queue.
func BenchmarkEnqueueClaimAck(b *testing.B) {
	stores := []struct {
		name string
		url  func(b *testing.B) string
	}{
		{"mem", func(b *testing.B) string { return testenv.MemURL(b.Name()) }},
		{"file", func(b *testing.B) string { return "file://" + b.TempDir() }},
	}
	for _, st := range stores {
		for _, workers := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/workers=%d", st.name, workers), func(b *testing.B) {
				benchEnqueueClaimAck(b, st.url(b), workers)
			})
		}
	}
}

func benchEnqueueClaimAck(b *testing.B, url string, workers int) {
	ctx := context.Background()
	q := openT(b, url)
	payload := make([]byte, 100)
	var next, emptyClaims atomic.Int64
	var wg sync.WaitGroup
	before := q.StorageStats()
	b.ReportAllocs()
	b.ResetTimer()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := q.Enqueue(ctx, "q", payload, EnqueueOptions{}); err != nil {
					b.Error(err)
					return
				}
				var j *Job
				for j == nil {
					var err error
					if j, err = q.claimOne(ctx, "q"); err != nil {
						b.Error(err)
						return
					}
					if j == nil { // cannot happen: every claim follows its own enqueue
						emptyClaims.Add(1)
						runtime.Gosched()
					}
				}
				if err := q.Ack(ctx, j); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := q.StorageStats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if n := after.WALBatches - before.WALBatches; n > 0 {
		b.ReportMetric(float64(after.Transactions-before.Transactions)/float64(n), "txns/walobj")
	}
	if n := emptyClaims.Load(); n > 0 {
		b.ReportMetric(float64(n)/float64(b.N), "empty-claims/op")
	}
	if s, err := q.Stats(ctx, "q"); err != nil || s.Pending+s.Claimed != 0 {
		b.Fatalf("after the run: %+v, %v", s, err)
	}
}
