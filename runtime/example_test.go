package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// A three-step run on an in-memory store: each step is a durable checkpoint
// whose Continue payload is the next step's input; the hook learns how the
// run ended.
func ExampleRuntime_Submit() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-submit")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		fmt.Printf("step %d: %s\n", s.Number, s.Payload)
		switch s.Number {
		case 0:
			return steprunner.Continue([]byte(strings.ToUpper(string(s.Payload)))), nil
		case 1:
			return steprunner.Continue(append(s.Payload, '!')), nil
		default:
			return steprunner.Succeed([]byte(fmt.Sprintf("%s (%s)", s.Payload, s.Headers["customer"]))), nil
		}
	})
	done := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		done <- o
		return nil
	})

	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	sub, err := rt.Submit(ctx, runtime.RunSpec{
		RunID:   "greeting-1",
		Input:   []byte("hello"),
		Headers: map[string]string{"customer": "acme"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("submitted", sub.RunID, sub.NewlySubmitted)

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	o := <-done
	stop()
	<-stopped
	fmt.Printf("run %s %s at step %d: %s\n", o.RunID, o.Status, o.FinalStep, o.Result)

	// Submitting the same run again is a no-op.
	again, _ := rt.Submit(ctx, runtime.RunSpec{RunID: "greeting-1", Input: []byte("hello")})
	fmt.Println("resubmitted:", again.NewlySubmitted)
	// Output:
	// submitted greeting-1 true
	// step 0: hello
	// step 1: HELLO
	// step 2: HELLO!
	// run greeting-1 succeeded at step 2: HELLO! (acme)
	// resubmitted: false
}

// Cancelling a run whose step is running cancels the step's ctx with
// steprunner.ErrRunCancelled; the run ends Cancelled when the step returns.
func ExampleRuntime_Cancel() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-cancel")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	started := make(chan struct{})
	cause := make(chan error, 1)
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		close(started)
		<-ctx.Done() // a long wait, ended by the cancel
		cause <- context.Cause(ctx)
		return steprunner.Outcome{}, ctx.Err()
	})
	done := make(chan terminal.Outcome, 1)
	rt, err := runtime.New(q, runner, terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		done <- o
		return nil
	}), runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "order-7"}); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()

	<-started
	ok, err := rt.Cancel(ctx, "order-7")
	fmt.Println("cancel:", ok, err)
	fmt.Println("step ctx:", <-cause)
	o := <-done
	fmt.Printf("run %s %s, error %q\n", o.RunID, o.Status, o.Error)
	st, _ := rt.Status(ctx, "order-7")
	fmt.Println("status:", st.State)
	ok, _ = rt.Cancel(ctx, "order-7")
	fmt.Println("cancel again:", ok)
	stop()
	<-stopped
	// Output:
	// cancel: true <nil>
	// step ctx: steprunner: run cancelled
	// run order-7 cancelled, error ""
	// status: cancelled
	// cancel again: false
}

// Status reads a run's state from the store, so any Runtime on the store
// can answer it, even one that does not Run.
func ExampleRuntime_Status() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-status")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.ContinueAfter(nil, time.Hour), nil
	})
	rt, err := runtime.New(q, runner, terminal.Noop)
	if err != nil {
		panic(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "nightly"}); err != nil {
		panic(err)
	}
	st, _ := rt.Status(ctx, "nightly")
	fmt.Println(st.State, st.CurrentStep)
	_, err = rt.Status(ctx, "unknown")
	fmt.Println(err)
	// Output:
	// pending 0
	// runtime: run not found: "unknown"
}
