package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// Wait blocks until a run ends and returns its final status with its
// result: the synchronous answer a request handler gives its client. It
// is woken by the run's end, not by polling, and works from any process
// of the store (here the one that runs the steps).
func ExampleRuntime_Wait() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-wait")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	// Two steps: double the number, then add one.
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		n, err := strconv.Atoi(string(s.Payload))
		if err != nil {
			return steprunner.Outcome{}, steprunner.Permanent(err)
		}
		if s.Number == 0 {
			return steprunner.Continue([]byte(strconv.Itoa(2 * n))), nil
		}
		return steprunner.Succeed([]byte(strconv.Itoa(n + 1))), nil
	})
	rt, err := runtime.New(q, runner, nil, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	defer func() { stop(); <-stopped }()

	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "order-21", Input: []byte("21")}); err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second) // a handler's deadline
	defer cancel()
	st, err := rt.Wait(waitCtx, "order-21")
	if err != nil {
		panic(err) // context.DeadlineExceeded: the run has not ended yet
	}
	fmt.Printf("run %s %s at step %d: %s\n", st.RunID, st.State, st.CurrentStep, st.Result)

	// A run that does not exist is an error, not a wait.
	_, err = rt.Wait(waitCtx, "order-404")
	fmt.Println(errors.Is(err, runtime.ErrRunNotFound))
	// Output:
	// run order-21 succeeded at step 1: 43
	// true
}
