package steprunner_test

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

// A run fans out one child run per city, then joins them: its step 1
// gets every child's result, in the order given, and the step's own
// payload back. A child that fails does not fail the parent.
func ExampleSpawn() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-spawn")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.Headers["role"] == "forecast": // a child
			if string(s.Payload) == "Atlantis" {
				return steprunner.Fail("no such city"), nil
			}
			return steprunner.Succeed([]byte(string(s.Payload) + ": sunny")), nil
		case s.Number == 0: // the parent fans out
			var children []steprunner.Child
			for _, city := range strings.Split(string(s.Payload), ",") {
				children = append(children, steprunner.Child{
					Input: []byte(city), Headers: map[string]string{"role": "forecast"}})
			}
			return steprunner.Spawn(children), nil
		default: // the parent's join
			var lines []string
			for _, c := range s.Children {
				lines = append(lines, fmt.Sprintf("%s %s %s%s", c.RunID, c.Status, c.Result, c.Error))
			}
			return steprunner.Succeed([]byte(fmt.Sprintf("%s\n%s", s.Payload, strings.Join(lines, "\n")))), nil
		}
	})
	done := make(chan terminal.Outcome, 4)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		done <- o
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "weather", Input: []byte("Oslo,Atlantis,Lima")}); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- rt.Run(runCtx) }()
	for o := range done {
		if o.RunID == "weather" {
			fmt.Printf("%s %s:\n%s\n", o.RunID, o.Status, o.Result)
			break
		}
	}
	stop()
	<-stopped
	// Output:
	// weather succeeded:
	// Oslo,Atlantis,Lima
	// weather.s0.0 succeeded Oslo: sunny
	// weather.s0.1 failed no such city
	// weather.s0.2 succeeded Lima: sunny
}
