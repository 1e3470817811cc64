// Command step_queues routes one step of a run to another step queue,
// served by a second Runtime with a Runner of its own: the steps that need
// a GPU run on the "gpu" workers, the others on the main ones.
//
//	go run ./examples/step_queues
//
// Both Runtimes share one store (a fresh temporary file:// store) and run
// in this process; the gpu one could as well run in another process on the
// same store, on a machine with a GPU (each process opening the store in
// cluster mode, queue.WithCluster: see examples/cluster).
//
// Step 0 runs on the main queue ("workflow-steps", the default) and
// returns Continue(...).OnQueue("gpu"); step 1 runs on the gpu Runtime and
// sends step 2 back with OnQueue("workflow-steps"). Until a Runtime serves
// "gpu", step 1 waits there, pending: the example shows it
// (RunStatus.Queue) before starting the gpu Runtime, then waits for the
// run's end (rt.Wait).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

const (
	mainQueue = "workflow-steps" // the default step queue (runtime.WithQueueName)
	gpuQueue  = "gpu"
)

// cpuRunner runs the steps of the main queue: step 0 sends its work to the
// gpu queue; the step after the gpu step finishes the run.
func cpuRunner(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	fmt.Printf("step %d ran on %s: %q\n", s.Number, mainQueue, s.Payload)
	if s.Number == 0 {
		return steprunner.Continue(s.Payload).OnQueue(gpuQueue), nil
	}
	return steprunner.Succeed(append(s.Payload, ", thumbnail saved"...)), nil
}

// gpuRunner runs the steps of the gpu queue and sends the next one back.
func gpuRunner(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	fmt.Printf("step %d ran on %s: %q\n", s.Number, gpuQueue, s.Payload)
	return steprunner.Continue(append(s.Payload, " upscaled 4x"...)).OnQueue(mainQueue), nil
}

func main() {
	dir, err := os.MkdirTemp("", "stepwell-step-queues-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	q, err := queue.Open(ctx, "file://"+dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(context.Background())

	// Two Runtimes on one store, each serving its own step queue.
	rt, err := runtime.New(q, steprunner.RunnerFunc(cpuRunner), nil)
	if err != nil {
		log.Fatal(err)
	}
	gpu, err := runtime.New(q, steprunner.RunnerFunc(gpuRunner), nil, runtime.WithQueueName(gpuQueue))
	if err != nil {
		log.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 2)
	go func() { errc <- rt.Run(runCtx) }()

	const runID = "render-1"
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: runID, Input: []byte("cat.png")}); err != nil {
		log.Fatal(err)
	}

	// No Runtime serves "gpu" yet: once step 0 has settled, step 1 waits
	// there, pending. (Polling Status is for the demonstration; rt.Wait
	// below waits without polling.)
	for {
		st, err := rt.Status(ctx, runID)
		if err != nil {
			log.Fatal(err)
		}
		if st.CurrentStep == 1 {
			fmt.Printf("status of %s: %s, step %d on queue %q\n", runID, st.State, st.CurrentStep, st.Queue)
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			log.Fatal("timed out waiting for step 0")
		}
	}

	fmt.Println("starting the gpu Runtime")
	go func() { errc <- gpu.Run(runCtx) }()

	st, err := rt.Wait(ctx, runID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("run %s %s after step %d (on %s): %q\n", runID, st.State, st.CurrentStep, st.Queue, st.Result)

	stop()
	for range 2 {
		if err := <-errc; err != nil {
			log.Fatal(err)
		}
	}
}
