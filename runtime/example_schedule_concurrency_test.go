package runtime_test

import (
	"context"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// A schedule whose runs take longer than a tick, at most one at a time:
// a report per tenant, each schedule with the tenant's concurrency key,
// Limit 1, and AllowOverlap. A tick whose previous run still runs is not
// skipped: its run waits in the key's line and starts when that one ends.
func ExampleSchedule_concurrency() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-schedule-concurrency")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	started := make(chan string, 100)
	release := make(chan struct{})
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		started <- s.RunID
		select { // the report takes longer than a tick
		case <-release:
		case <-ctx.Done():
			return steprunner.Outcome{}, ctx.Err()
		}
		return steprunner.Succeed(nil), nil
	})
	rt, err := runtime.New(q, runner, nil)
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go rt.Run(runCtx)

	err = rt.SetSchedule(ctx, runtime.Schedule{Name: "report-acme", Every: time.Second, AllowOverlap: true,
		Spec: runtime.RunSpec{Input: []byte("acme"), Concurrency: runtime.Concurrency{Key: "report-acme", Limit: 1}}})
	if err != nil {
		panic(err)
	}
	first := <-started
	var next string
	for next == "" { // the next tick's run
		all, err := rt.ListSchedules(ctx)
		if err != nil {
			panic(err)
		}
		if last := all[0].LastRunID; last != first {
			next = last
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	st, err := rt.Status(ctx, next)
	if err != nil {
		panic(err)
	}
	fmt.Printf("next tick's run: %s (%s)\n", st.State, st.WaitingFor)

	close(release)
	if err := rt.DeleteSchedule(ctx, "report-acme"); err != nil {
		panic(err)
	}
	st, err = rt.Wait(ctx, next)
	if err != nil {
		panic(err)
	}
	fmt.Println("after the first run ended:", st.State)
	// Output:
	// next tick's run: pending (waiting for concurrency key report-acme: 1 of 1)
	// after the first run ended: succeeded
}
