package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// A run with a deadline waits for an approval that does not come in time:
// at the deadline it ends Failed with an error wrapping
// runtime.ErrRunDeadline, wherever it is (a step running then sees that
// cause on its ctx). Wait returns the failure.
func ExampleRunSpec_deadline() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-deadline")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Signal != nil {
			return steprunner.Succeed([]byte("approved")), nil
		}
		return steprunner.AwaitSignal("approval", 0), nil
	})
	rt, err := runtime.New(q, runner, nil, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	defer func() { stop(); <-stopped }()

	deadline := time.Now().Add(200 * time.Millisecond)
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "expense-7", Deadline: deadline}); err != nil {
		panic(err)
	}
	st, err := rt.Wait(ctx, "expense-7")
	if err != nil {
		panic(err)
	}
	fmt.Println(st.State, strings.Contains(st.Error, "deadline"), st.Deadline.Equal(deadline))

	// A deadline that has passed is refused, and nothing is written.
	_, err = rt.Submit(ctx, runtime.RunSpec{RunID: "expense-8", Deadline: time.Now().Add(-time.Minute)})
	fmt.Println(errors.Is(err, runtime.ErrInvalidRunSpec))
	// Output:
	// failed true true
	// true
}
