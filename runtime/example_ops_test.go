package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// A run whose step failed for good is retried once the cause is fixed: it
// starts again at that step, with that step's payload, and the hook hears
// of each termination.
func ExampleRuntime_Retry() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-retry")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	var paymentsUp atomic.Bool
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			return steprunner.Continue([]byte("charge 42")), nil
		}
		if !paymentsUp.Load() {
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("payments API disabled"))
		}
		return steprunner.Succeed([]byte("paid: " + string(s.Payload))), nil
	})
	ended := make(chan terminal.Outcome, 2)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		ended <- o
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	defer func() { stop(); <-stopped }()

	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "order-7"}); err != nil {
		panic(err)
	}
	o := <-ended
	fmt.Printf("%s %s at step %d: %s\n", o.RunID, o.Status, o.FinalStep, o.Error)

	paymentsUp.Store(true)
	if err := rt.Retry(ctx, "order-7"); err != nil {
		panic(err)
	}
	o = <-ended
	fmt.Printf("%s %s after %d retry: %s\n", o.RunID, o.Status, o.Retries, o.Result)

	err = rt.Retry(ctx, "order-7")
	fmt.Println(errors.Is(err, runtime.ErrRunNotRetryable))
	// Output:
	// order-7 failed at step 1: payments API disabled
	// order-7 succeeded after 1 retry: paid: charge 42
	// true
}

// Listing the runs of a store, newest first, a page at a time. A client
// Runtime (no runner) is enough to list, inspect, cancel and retry runs.
func ExampleRuntime_ListRuns() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-list")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)
	rt, err := runtime.New(q, nil, nil) // a client Runtime
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: id}); err != nil {
			panic(err)
		}
		time.Sleep(time.Millisecond) // distinct submit times, for the example
	}
	if _, err := rt.Cancel(ctx, "c"); err != nil {
		panic(err)
	}

	opts := runtime.ListOptions{Limit: 2}
	for {
		page, err := rt.ListRuns(ctx, opts)
		if err != nil {
			panic(err)
		}
		for _, r := range page.Runs {
			fmt.Println(r.RunID, r.State)
		}
		if page.Next == "" {
			break
		}
		opts.Cursor = page.Next
	}
	pending, _ := rt.ListRuns(ctx, runtime.ListOptions{States: []runtime.State{runtime.StatePending}})
	fmt.Println("pending:", len(pending.Runs))
	// Output:
	// e pending
	// d pending
	// c cancelled
	// b pending
	// a pending
	// pending: 4
}
