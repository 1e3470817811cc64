package runtime_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// BenchmarkQueueLimit: batches of 1,000 runs of 3 steps (32 submitters,
// 32 step slots, steps that return at once) on a step queue with a
// limit: none; one that never binds (PerSecond 1e6, Burst 1,000,
// MaxRunning 1,000: what checking a limit costs); MaxRunning 8; and a
// rate of 2,000 steps/s (Burst 32), which binds. Per op: one batch.
// transitions/s is steps over the time from the first Submit to the last
// run's end; cpu-µs/transition is the process's CPU time per step
// (work held back by a limit waits without spinning). STORE=mem (default)
// or file.
func BenchmarkQueueLimit(b *testing.B) {
	for _, c := range []struct {
		name  string
		limit runtime.QueueLimit
	}{
		{"none", runtime.QueueLimit{}},
		{"unbound", runtime.QueueLimit{PerSecond: 1e6, Burst: 1000, MaxRunning: 1000}},
		{"maxrunning-8", runtime.QueueLimit{MaxRunning: 8}},
		{"rate-2000", runtime.QueueLimit{PerSecond: 2000, Burst: 32}},
	} {
		b.Run(c.name, func(b *testing.B) { benchQueueLimit(b, c.limit) })
	}
}

func benchQueueLimit(b *testing.B, limit runtime.QueueLimit) {
	const runs, steps, submitters = 1000, 3, 32
	ctx := context.Background()
	url := fmt.Sprintf("mem://bench-qlimit-%d", time.Now().UnixNano())
	if os.Getenv("STORE") == "file" {
		url = "file://" + b.TempDir()
	}
	q, err := queue.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close(ctx)
	var wg sync.WaitGroup
	hook := terminal.HookFunc(func(context.Context, terminal.Outcome) error { wg.Done(); return nil })
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == steps-1 {
			return steprunner.Succeed(nil), nil
		}
		return steprunner.Continue(s.Payload), nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithMaxConcurrentSteps(32), runtime.WithNotifyConcurrency(32),
		runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.SetQueueLimit(ctx, stepsQueue, limit); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() { stop(); <-done }()
	payload := make([]byte, 64)
	var elapsed, cpu time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		wg.Add(runs)
		cpu0, start := cpuTime(), time.Now()
		var sw sync.WaitGroup
		for s := range submitters {
			sw.Add(1)
			go func() {
				defer sw.Done()
				for r := s; r < runs; r += submitters {
					if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: fmt.Sprintf("b%d-%d", i, r), Input: payload}); err != nil {
						b.Error(err)
						wg.Done()
					}
				}
			}()
		}
		sw.Wait()
		wg.Wait()
		elapsed += time.Since(start)
		cpu += cpuTime() - cpu0
	}
	b.ReportMetric(float64(runs*steps*b.N)/elapsed.Seconds(), "transitions/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(runs*steps*b.N), "cpu-µs/transition")
}
