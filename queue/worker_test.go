package queue

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// A Work loop's running jobs start no goroutine each: their claims are
// watched by callbacks their leases hold, and one goroutine of the loop
// renews their leases (issue 28: a watcher goroutine per job, scheduled
// 2.7 times a transition, deepened the run queues the slots wait in).
func TestWorkStartsNoGoroutinePerJob(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	const n = 64
	for range n {
		if _, err := q.Enqueue(t0ctx, "q", nil, EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	base := runtime.NumGoroutine()
	var running atomic.Int64
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(t0ctx)
	done := make(chan error, 1)
	go func() {
		done <- q.Work(ctx, "q", func(context.Context, *Job) error {
			running.Add(1)
			<-release
			return nil
		}, WorkOptions{Concurrency: n})
	}()
	testenv.Eventually(t, 30*time.Second, "every job running", func() bool { return running.Load() == n })
	grew := runtime.NumGoroutine() - base
	close(release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A goroutine a slot, Work's, its renewer's, and a few to spare.
	if grew > n+n/4 {
		t.Errorf("%d jobs running in a Work loop took %d goroutines, want at most %d", n, grew, n+n/4)
	}
}
