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

// At most one run of tenant-7 at a time, whatever the number of processes:
// the first run submitted takes the key's slot, the others wait in line,
// pending, and start in submit order as the slot is passed on.
func ExampleConcurrency() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-concurrency")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		fmt.Println("running", s.RunID)
		return steprunner.Succeed(nil), nil
	})
	ended := make(chan terminal.Outcome, 3)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		ended <- o
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"report-a", "report-b", "report-c"} {
		_, err := rt.Submit(ctx, runtime.RunSpec{RunID: id,
			Concurrency: runtime.Concurrency{Key: "tenant-7", Limit: 1}})
		if err != nil {
			panic(err)
		}
		st, _ := rt.Status(ctx, id)
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s: %s %s", id, st.State, st.WaitingFor)))
	}

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	for range 3 {
		<-ended
	}
	stop()
	<-stopped
	// Output:
	// report-a: pending
	// report-b: pending waiting for concurrency key tenant-7: 1 of 1
	// report-c: pending waiting for concurrency key tenant-7: 1 of 1
	// running report-a
	// running report-b
	// running report-c
}
