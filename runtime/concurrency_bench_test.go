package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// BenchmarkConcurrencyHotKey: 10,000 one-step runs submitted by 8
// goroutines on a file:// store and run by one Runtime with 32 slots:
// "key" gives them all one concurrency key with Limit 10 (a hot key:
// every submit and every end compare-and-puts its state), "none" no
// key, side by side, and "none-10" no key with 10 slots instead of 32 (the
// same concurrency as the key's, by another means: what the key's
// records cost beyond the limit itself). Per op: all 10,000 runs, from the first Submit to
// the last run's end. runs/s; txns/run, the transactions committed per
// run. The runs' steps return at once: this measures what the key costs
// (with the key, a key's state goes through one compare-and-put per
// submit and per end, each against the last durable value, so a hot key
// is bounded by about one such write per commit; see docs/BENCHMARKS.md).
func BenchmarkConcurrencyHotKey(b *testing.B) {
	for _, mode := range []string{"key", "none", "none-10"} {
		slots := 32
		if mode == "none-10" {
			slots = 10
		}
		b.Run(mode, func(b *testing.B) { benchHotKey(b, mode == "key", 10000, 10, slots) })
	}
}

func benchHotKey(b *testing.B, withKey bool, n, limit, slots int) {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close(ctx)
	var ended sync.WaitGroup
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Succeed(nil), nil
	})
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error { ended.Done(); return nil })
	rt, err := runtime.New(q, runner, hook, runtime.WithMaxConcurrentSteps(slots), runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() { stop(); <-done }()
	var total time.Duration
	var txns uint64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ended.Add(n)
		before := q.StorageStats().Transactions
		start := time.Now()
		var next atomic.Int64
		var sub sync.WaitGroup
		for range 8 {
			sub.Go(func() {
				for j := next.Add(1) - 1; j < int64(n); j = next.Add(1) - 1 {
					spec := runtime.RunSpec{RunID: fmt.Sprintf("r%d-%d", i, j), Input: []byte("0123456789abcdef")}
					if withKey {
						spec.Concurrency = runtime.Concurrency{Key: "hot", Limit: limit}
					}
					if _, err := rt.Submit(ctx, spec); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		sub.Wait()
		ended.Wait()
		total += time.Since(start)
		txns += q.StorageStats().Transactions - before
	}
	b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "runs/s")
	b.ReportMetric(float64(txns)/float64(n*b.N), "txns/run")
}
