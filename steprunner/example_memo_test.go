package steprunner_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// A checkout keeps what its steps learned in the run's memory instead of
// threading it through every payload: step 0 remembers the reservation,
// step 1 charges (its first attempt fails: what it wrote is discarded), and
// step 2 reads both and clears the reservation. Each write commits with
// its step's settlement, or not at all.
func ExampleOutcome_WithMemo() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-memo", queue.WithRetryBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch s.Number {
		case 0:
			return steprunner.Continue(nil).WithMemo("reservation", []byte("R-17")), nil
		case 1:
			if s.Attempt == 1 {
				return steprunner.Continue(nil).WithMemo("charge", []byte("lost")), fmt.Errorf("gateway timeout")
			}
			_, seen := s.Memo("charge")
			fmt.Println("step 1, attempt 2: a charge in memory:", seen)
			return steprunner.Continue(nil).WithMemo("charge", []byte("C-99")), nil
		default:
			r, _ := s.Memo("reservation")
			c, _ := s.Memo("charge")
			fmt.Printf("step 2: reservation %s, charge %s\n", r, c)
			return steprunner.Succeed(c).WithMemo("reservation", nil), nil // nil deletes
		}
	})
	done := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		done <- o
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond),
		runtime.WithErrorHandler(func(context.Context, *runtime.StepError) {}),
		runtime.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "checkout-1", MaxAttemptsPerStep: 3}); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	o := <-done
	stop()
	<-stopped

	memo, err := rt.RunMemo(ctx, o.RunID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("run %s; memory: %q\n", o.Status, memo)
	// Output:
	// step 1, attempt 2: a charge in memory: false
	// step 2: reservation R-17, charge C-99
	// run succeeded; memory: map["charge":"C-99"]
}
