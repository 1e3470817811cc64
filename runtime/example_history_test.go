package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// A run's history: each step's attempts as their settlements committed
// them (here a first attempt that failed and was retried), read back from
// the store by any Runtime on it.
func ExampleRuntime_History() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-history", queue.WithRetryBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.Number == 0:
			return steprunner.Continue([]byte("charged")), nil
		case s.Attempt == 1:
			return steprunner.Outcome{}, errors.New("mail server busy")
		}
		return steprunner.Succeed([]byte("mailed")), nil
	})
	done := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		done <- o
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond), runtime.WithWorkerName("worker-a"))
	if err != nil {
		panic(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "order-7", Input: []byte("order")}); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	<-done
	stop()
	<-stopped

	h, err := rt.History(ctx, "order-7")
	if err != nil {
		panic(err)
	}
	for _, e := range h {
		if e.Kind == runtime.HistoryHookDelivered {
			continue // committed after the hook returned: maybe not yet
		}
		fmt.Printf("%d %-9s step %d attempt %d %-8s %q", e.Seq, e.Kind, e.Step, e.Attempt, e.Worker, e.Preview)
		if e.Error != "" {
			fmt.Printf(" error: %s", e.Error)
		}
		fmt.Println()
	}
	// Output:
	// 1 submitted step 0 attempt 0          ""
	// 2 continue  step 0 attempt 1 worker-a "charged"
	// 3 error     step 1 attempt 1 worker-a "" error: mail server busy
	// 4 succeed   step 1 attempt 2 worker-a "mailed"
}
