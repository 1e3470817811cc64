package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// BenchmarkSpawnJoin: a parent fans out 1,000 children that succeed at
// once, and joins them. Per op: one parent; children/s is 1,000 over the
// time from Submit to the join step's start; wake-µs is the time from the
// last child's step returning (its settlement, which wakes the parent,
// follows) to the parent's join step starting. STORE=mem or file (default).
func BenchmarkSpawnJoin(b *testing.B) {
	for _, store := range []string{"file", "mem"} {
		b.Run(store, func(b *testing.B) { benchSpawnJoin(b, store, 1000) })
	}
}

func benchSpawnJoin(b *testing.B, store string, n int) {
	ctx := context.Background()
	url := "file://" + b.TempDir()
	if store == "mem" {
		url = fmt.Sprintf("mem://bench-spawn-%d", time.Now().UnixNano())
	}
	q, err := queue.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close(ctx)
	var mu sync.Mutex
	var lastChild time.Time
	joined := make(chan time.Time, 1)
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.Children != nil:
			joined <- time.Now()
			return steprunner.Succeed(nil), nil
		case s.Headers["child"] == "1":
			mu.Lock()
			lastChild = time.Now()
			mu.Unlock()
			return steprunner.Succeed(s.Payload), nil
		}
		cs := make([]steprunner.Child, n)
		for i := range cs {
			cs[i] = steprunner.Child{Input: []byte("0123456789abcdef"), Headers: map[string]string{"child": "1"}}
		}
		return steprunner.Spawn(cs), nil
	})
	rt, err := runtime.New(q, runner, terminal.Noop, runtime.WithMaxConcurrentSteps(32),
		runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() { stop(); <-done }()
	var total, wake time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: fmt.Sprintf("p%d", i)}); err != nil {
			b.Fatal(err)
		}
		at := <-joined
		total += at.Sub(start)
		mu.Lock()
		wake += at.Sub(lastChild)
		mu.Unlock()
	}
	b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "children/s")
	b.ReportMetric(float64(wake.Microseconds())/float64(b.N), "wake-µs")
}
