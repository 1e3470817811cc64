package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

// ender records what onClaimEnd tells it.
type ender struct{ told chan struct{} }

func newEnder() *ender { return &ender{told: make(chan struct{}, 4)} }

func (e *ender) ClaimEnded() { e.told <- struct{}{} }

func (e *ender) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-e.told:
	case <-time.After(10 * time.Second):
		t.Fatalf("not told: %s", what)
	}
}

// claimed claims a job of a new queue and returns its claim context, as
// a Work handler's (runJob's), stopped at the test's end (stop may be
// called before).
func claimed(t *testing.T) (*Queue, *Job, context.Context, func()) {
	q, _ := openJobs(t)
	mustEnqueue(t, q, "q", "a", EnqueueOptions{})
	j := mustClaim(t, q, "q")
	cc := q.watchClaim(t0ctx, j)
	cc.handler = true
	stop := func() { cc.stop(q) }
	t.Cleanup(stop)
	return q, j, cc, stop
}

// TestOnClaimEnd: what a claim context tells in place of an AfterFunc,
// for each way it ends while its handler runs, and not after stop.
func TestOnClaimEnd(t *testing.T) {
	if onClaimEnd(t0ctx, newEnder()) {
		t.Fatal("onClaimEnd took a context that is no claim's")
	}
	t.Run("refused", func(t *testing.T) {
		q, j, ctx, _ := claimed(t)
		for name, c := range map[string]context.Context{
			"derived":    context.WithValue(ctx, ender{}, 1),
			"detached":   context.WithoutCancel(ctx),
			"cancelable": func() context.Context { c, cancel := context.WithCancel(ctx); t.Cleanup(cancel); return c }(),
			"manual":     func() context.Context { c, stop := q.claimContext(t0ctx, j); t.Cleanup(stop); return c }(),
		} {
			if onClaimEnd(c, newEnder()) {
				t.Errorf("onClaimEnd took a %s context: its cancellations are not the claim's", name)
			}
		}
	})

	t.Run("settled elsewhere", func(t *testing.T) {
		q, j, ctx, _ := claimed(t)
		e := newEnder()
		if !onClaimEnd(ctx, e) {
			t.Fatal("onClaimEnd refused a handler's context")
		}
		if err := q.Ack(t0ctx, j); err != nil {
			t.Fatal(err)
		}
		e.wait(t, "the claim settled elsewhere")
		if !IsClaimLost(context.Cause(ctx)) {
			t.Fatalf("cause = %v, want a lost claim", context.Cause(ctx))
		}
	})

	t.Run("cancelled, set after", func(t *testing.T) {
		q, j, ctx, _ := claimed(t)
		if _, err := q.CancelJob(t0ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		e := newEnder()
		onClaimEnd(ctx, e) // cancelled already: told at once
		e.wait(t, "a claim cancelled before the set")
		if !errors.Is(context.Cause(ctx), ErrJobCancelled) {
			t.Fatalf("cause = %v, want ErrJobCancelled", context.Cause(ctx))
		}
	})

	t.Run("cleared", func(t *testing.T) {
		q, j, ctx, _ := claimed(t)
		first, second := newEnder(), newEnder()
		onClaimEnd(ctx, first)
		onClaimEnd(ctx, nil)
		onClaimEnd(ctx, second) // replaces: only second is told
		onClaimEnd(ctx, nil)
		onClaimEnd(ctx, second)
		if _, err := q.CancelJob(t0ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		second.wait(t, "the ender set last")
		if err := q.Ack(t0ctx, j); err != nil && !IsClaimLost(err) { // a loss after the cancel
			t.Fatal(err)
		}
		onClaimEnd(ctx, second) // set again after the end: told at once
		second.wait(t, "an ender set after the end")
		time.Sleep(20 * time.Millisecond) // a wrong tell would be on its way
		if len(first.told) != 0 || len(second.told) != 0 {
			t.Fatalf("told %d times a cleared ender, %d times more the last one", len(first.told), len(second.told))
		}
	})

	t.Run("drain timeout", func(t *testing.T) {
		q, _ := openJobs(t)
		mustEnqueue(t, q, "q", "a", EnqueueOptions{})
		ctx, cancel := context.WithCancel(t0ctx)
		e := newEnder()
		running := make(chan struct{})
		var cause error
		var told bool
		done := make(chan error, 1)
		go func() {
			done <- q.Work(ctx, "q", func(hctx context.Context, j *Job) error {
				if !onClaimEnd(hctx, e) {
					t.Error("a handler's context is no claim context")
				}
				close(running)
				// Told while the handler runs: a step's context ends
				// through its ender alone.
				select {
				case <-e.told:
					told = true
				case <-time.After(10 * time.Second):
				}
				cause = context.Cause(hctx)
				return nil
			}, WorkOptions{Concurrency: 1, DrainTimeout: time.Millisecond})
		}()
		<-running
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !told {
			t.Fatal("the drain's timeout did not tell the running handler's ender")
		}
		if !errors.Is(cause, ErrDrainTimeout) {
			t.Fatalf("cause = %v, want ErrDrainTimeout", cause)
		}
	})

	t.Run("not after stop", func(t *testing.T) {
		_, _, ctx, stop := claimed(t)
		e := newEnder()
		onClaimEnd(ctx, e)
		stop()
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		if len(e.told) != 0 {
			t.Fatal("stop told the ender")
		}
	})
}
