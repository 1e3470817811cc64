package steprunner_test

import (
	"context"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Two Runtimes on one store, each serving a step queue of its own (here in
// one process; they may as well be in two): the run's step 1 needs a GPU,
// so step 0 sends it to the "gpu" queue, and step 1 sends step 2 back.
func ExampleOutcome_OnQueue() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-onqueue")
	if err != nil {
		panic(err)
	}
	defer q.Close(ctx)

	cpu := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			fmt.Println("step 0 on the CPU workers")
			return steprunner.Continue([]byte("image.png")).OnQueue("gpu"), nil
		}
		fmt.Printf("step %d on the CPU workers: %s\n", s.Number, s.Payload)
		return steprunner.Succeed(s.Payload), nil
	})
	gpu := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		fmt.Printf("step %d on the GPU workers: %s\n", s.Number, s.Payload)
		return steprunner.Continue(append(s.Payload, " (upscaled)"...)).OnQueue("workflow-steps"), nil
	})
	done := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		done <- o
		return nil
	})
	main, err := runtime.New(q, cpu, hook, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	gpus, err := runtime.New(q, gpu, nil, runtime.WithQueueName("gpu"), runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 2)
	go func() { stopped <- main.Run(runCtx) }()
	go func() { stopped <- gpus.Run(runCtx) }()
	if _, err := main.Submit(ctx, runtime.RunSpec{RunID: "render-1"}); err != nil {
		panic(err)
	}
	o := <-done
	stop()
	<-stopped
	<-stopped
	fmt.Printf("run %s: %s\n", o.Status, o.Result)
	// Output:
	// step 0 on the CPU workers
	// step 1 on the GPU workers: image.png
	// step 2 on the CPU workers: image.png (upscaled)
	// run succeeded: image.png (upscaled)
}
