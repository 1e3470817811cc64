package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// concurrencyRunner runs each step for d, tracking how many run at once,
// and continues to step last.
type concurrencyRunner struct {
	d       time.Duration
	last    uint32
	running atomic.Int64
	peak    atomic.Int64
	mu      sync.Mutex
	starts  []time.Time
}

func (c *concurrencyRunner) RunStep(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	n := c.running.Add(1)
	defer c.running.Add(-1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	c.mu.Lock()
	c.starts = append(c.starts, time.Now())
	c.mu.Unlock()
	select {
	case <-time.After(c.d):
	case <-ctx.Done():
		return steprunner.Outcome{}, context.Cause(ctx)
	}
	if s.Number >= c.last {
		return steprunner.Succeed(nil), nil
	}
	return steprunner.Continue(s.Payload), nil
}

// TestQueueLimitMaxRunningChainAndDispatch: with MaxRunning 2 and 8 idle
// slots, no more than 2 steps run at once, whether they start by a claim,
// by dispatch at Submit (the slots are idle) or chained to the step
// before (3-step runs). Fails without the limit (8 would run).
func TestQueueLimitMaxRunningChainAndDispatch(t *testing.T) {
	q := openQueue(t, memURL())
	r := &concurrencyRunner{d: 20 * time.Millisecond, last: 2}
	rt := newRuntime(t, q, r, nil, runtime.WithMaxConcurrentSteps(8))
	ctx := context.Background()
	startRun(t, rt)
	warmUp(t, rt)
	if err := rt.SetQueueLimit(ctx, stepsQueue, runtime.QueueLimit{MaxRunning: 2}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 12 {
		id := fmt.Sprint("limited-", i)
		ids = append(ids, id)
		mustSubmit(t, rt, runtime.RunSpec{RunID: id})
	}
	for _, id := range ids {
		if st := waitTerminal(t, rt, id); st.State != runtime.StateSucceeded {
			t.Fatalf("run %s: %v", id, st.State)
		}
	}
	if p := r.peak.Load(); p > 2 {
		t.Fatalf("%d steps ran at once under MaxRunning 2", p)
	}
	t.Logf("peak %d steps at once", r.peak.Load())
}

// TestQueueLimitRate: PerSecond 10 with Burst 1: 50 steps (10 runs of 5
// steps: started by dispatch at Submit, by claims, and chained to the step
// before) take at least 4.5s (a lower bound: safe under load), and the
// k-th starts no earlier than k tenths of a second after the limit was
// set. Fails if any of those paths skips the limit.
func TestQueueLimitRate(t *testing.T) {
	q := openQueue(t, memURL())
	r := &concurrencyRunner{last: 4}
	rt := newRuntime(t, q, r, nil, runtime.WithMaxConcurrentSteps(8))
	ctx := context.Background()
	startRun(t, rt)
	warmUp(t, rt)
	r.mu.Lock()
	r.starts = nil
	r.mu.Unlock()
	t0 := time.Now()
	if err := rt.SetQueueLimit(ctx, stepsQueue, runtime.QueueLimit{PerSecond: 10, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 10 {
		id := fmt.Sprint("rated-", i)
		ids = append(ids, id)
		mustSubmit(t, rt, runtime.RunSpec{RunID: id})
	}
	for _, id := range ids {
		st, err := rt.Wait(testCtx(t, 2*time.Minute), id)
		if err != nil || st.State != runtime.StateSucceeded {
			t.Fatalf("run %s: %v, %v", id, st.State, err)
		}
	}
	took := time.Since(t0)
	if took < 4500*time.Millisecond {
		t.Fatalf("50 steps at 10/s took %v, want at least 4.5s", took)
	}
	r.mu.Lock()
	starts := slices.Clone(r.starts)
	r.mu.Unlock()
	if len(starts) != 50 {
		t.Fatalf("%d step starts, want 50", len(starts))
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for k, at := range starts {
		if min := t0.Add(time.Duration(k+1) * 100 * time.Millisecond); at.Before(min) {
			t.Fatalf("step %d started %v after the limit was set, before %v", k+1, at.Sub(t0), min.Sub(t0))
		}
	}
	t.Logf("50 steps at 10/s took %v", took)
}

// warmUp runs one run to its end: rt's Run is then working its queue, so
// that the next Submits can dispatch their steps to its idle slots.
func warmUp(t *testing.T, rt *runtime.Runtime) {
	t.Helper()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "warm-up"})
	if st, err := rt.Wait(testCtx(t, waitTimeout), "warm-up"); err != nil || st.State != runtime.StateSucceeded {
		t.Fatalf("warm-up run: %v, %v", st.State, err)
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestQueueLimitStatusAndRemoval: a run whose step the limit holds back
// is pending, says so in Status, and spends no attempt; removing the
// limit lets it run.
func TestQueueLimitStatusAndRemoval(t *testing.T) {
	q := openQueue(t, memURL())
	release := make(chan struct{})
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.RunID == "first" {
			select {
			case <-release:
			case <-ctx.Done():
				return steprunner.Outcome{}, ctx.Err()
			}
		}
		return steprunner.Succeed(nil), nil
	})
	rt := newRuntime(t, q, runner, nil, runtime.WithMaxConcurrentSteps(4))
	ctx := context.Background()
	if err := rt.SetQueueLimit(ctx, "llm", runtime.QueueLimit{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	rtLLM := newRuntime(t, q, runner, nil, runtime.WithQueueName("llm"), runtime.WithMaxConcurrentSteps(4))
	startRun(t, rtLLM)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "first", Queue: "llm"})
	waitStatus(t, rt, "first", "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
	mustSubmit(t, rt, runtime.RunSpec{RunID: "second", Queue: "llm"})
	st := waitStatus(t, rt, "second", "held", func(s runtime.RunStatus) bool {
		return s.WaitingFor == "held by the queue limit of llm"
	})
	if st.State != runtime.StatePending || st.Attempt != 0 {
		t.Fatalf("held run: %+v", st)
	}
	// Another queue is not held.
	rtOther := newRuntime(t, q, runner, nil)
	startRun(t, rtOther)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "elsewhere"})
	waitTerminal(t, rt, "elsewhere")

	if m, err := rt.QueueLimits(ctx); err != nil || m["llm"] != (runtime.QueueLimit{MaxRunning: 1}) || len(m) != 1 {
		t.Fatalf("QueueLimits = %v, %v", m, err)
	}
	if err := rt.SetQueueLimit(ctx, "llm", runtime.QueueLimit{}); err != nil {
		t.Fatal(err)
	}
	if st := waitTerminal(t, rt, "second"); st.State != runtime.StateSucceeded || st.Attempt != 1 {
		t.Fatalf("second after removal: %+v", st)
	}
	if m, err := rt.QueueLimits(ctx); err != nil || len(m) != 0 {
		t.Fatalf("QueueLimits after removal = %v, %v", m, err)
	}
	close(release)
	waitTerminal(t, rt, "first")
}

// TestQueueLimitBadInput: invalid names and limits are typed errors, and
// nothing is written.
func TestQueueLimitBadInput(t *testing.T) {
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil)
	ctx := context.Background()
	for _, name := range []string{"", " x", "q.dead", "q.timers", "a\x00b", string(make([]byte, 200))} {
		if err := rt.SetQueueLimit(ctx, name, runtime.QueueLimit{MaxRunning: 1}); !errors.Is(err, runtime.ErrInvalidQueueName) {
			t.Errorf("SetQueueLimit(%q) = %v, want ErrInvalidQueueName", name, err)
		}
	}
	for _, l := range []runtime.QueueLimit{
		{PerSecond: -1}, {PerSecond: math.NaN()}, {PerSecond: math.Inf(1)}, {Burst: -1, PerSecond: 1},
		{MaxRunning: -3}, {Burst: 2},
	} {
		err := rt.SetQueueLimit(ctx, "llm", l)
		if !errors.Is(err, runtime.ErrInvalidQueueLimit) || !errors.Is(err, queue.ErrInvalidLimit) {
			t.Errorf("SetQueueLimit(%+v) = %v, want ErrInvalidQueueLimit", l, err)
		}
	}
	if m, err := rt.QueueLimits(ctx); err != nil || len(m) != 0 {
		t.Fatalf("QueueLimits after bad input = %v, %v", m, err)
	}
	// Burst 0 with a rate is 1.
	if err := rt.SetQueueLimit(ctx, "llm", runtime.QueueLimit{PerSecond: 5}); err != nil {
		t.Fatal(err)
	}
	if m, _ := rt.QueueLimits(ctx); m["llm"] != (runtime.QueueLimit{PerSecond: 5, Burst: 1}) {
		t.Fatalf("QueueLimits = %v", m)
	}
}

// TestQueueLimitSurvivesRestart: a limit set before a restart holds after
// it.
func TestQueueLimitSurvivesRestart(t *testing.T) {
	url := fileURL(t)
	ctx := context.Background()
	q, err := queue.Open(ctx, url, fastQueueOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, q, nil, nil)
	if err := rt.SetQueueLimit(ctx, stepsQueue, runtime.QueueLimit{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	q2 := openQueue(t, url)
	r := &concurrencyRunner{d: 10 * time.Millisecond, last: 1}
	rt2 := newRuntime(t, q2, r, nil, runtime.WithMaxConcurrentSteps(8))
	if m, err := rt2.QueueLimits(ctx); err != nil || m[stepsQueue] != (runtime.QueueLimit{MaxRunning: 1}) {
		t.Fatalf("QueueLimits after restart = %v, %v", m, err)
	}
	startRun(t, rt2)
	for i := range 6 {
		mustSubmit(t, rt2, runtime.RunSpec{RunID: fmt.Sprint("r-", i)})
	}
	testenv.Eventually(t, waitTimeout, "every run to end", func() bool {
		for i := range 6 {
			st, err := rt2.Status(ctx, fmt.Sprint("r-", i))
			if err != nil || !st.State.Terminal() {
				return false
			}
		}
		return true
	})
	if p := r.peak.Load(); p > 1 {
		t.Fatalf("%d steps at once after a restart, under MaxRunning 1", p)
	}
}
