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

// A schedule submits a run at each tick, named after it; a Cron schedule
// ticks in its Location. ListSchedules says where each stands.
func ExampleRuntime_SetSchedule() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-schedule")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Succeed([]byte("pinged with " + string(s.Payload))), nil
	})
	ended := make(chan terminal.Outcome, 10)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		ended <- o
		return nil
	})
	rt, err := runtime.New(q, runner, hook)
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go rt.Run(runCtx)

	// Every second, on the second; and at 3:00 every night in Paris.
	err = rt.SetSchedule(ctx, runtime.Schedule{Name: "heartbeat", Every: time.Second,
		Spec: runtime.RunSpec{Input: []byte("hello")}})
	if err != nil {
		panic(err)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	err = rt.SetSchedule(ctx, runtime.Schedule{Name: "nightly", Cron: "0 3 * * *", Location: paris})
	if err != nil {
		panic(err)
	}

	o := <-ended // the next second's run
	name, tick, _ := strings.Cut(o.RunID, "@")
	at, _ := time.Parse(runtime.TickLayout, tick)
	fmt.Printf("%s: %s, %q (tick on the second: %v)\n", name, o.Status, o.Result, at.Equal(at.Truncate(time.Second)))

	all, err := rt.ListSchedules(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range all {
		if s.Name == "nightly" {
			fmt.Printf("nightly: next at %s in Paris, last run %q\n", s.NextAt.In(paris).Format("15:04"), s.LastRunID)
		}
	}

	if err := rt.DeleteSchedule(ctx, "heartbeat"); err != nil {
		panic(err)
	}
	all, _ = rt.ListSchedules(ctx)
	fmt.Println("schedules left:", len(all))
	// Output:
	// heartbeat: succeeded, "pinged with hello" (tick on the second: true)
	// nightly: next at 03:00 in Paris, last run ""
	// schedules left: 1
}
