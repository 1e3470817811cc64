// Command crash_resume shows that a run survives the death of its process:
// a five-step run on a file:// store in a fixed directory, which a later
// invocation of the same program picks up at the next step.
//
//	go run ./examples/crash_resume -kill-after-step 2   # dies after step 2 committed
//	go run ./examples/crash_resume                      # resumes at step 3, finishes
//	go run ./examples/crash_resume                      # the run already succeeded
//	go run ./examples/crash_resume -reset               # deletes the store
//
// The store lives in ./.stepwell/crash_resume under the current directory
// (change it with -dir), so every invocation from the same directory sees the
// same run. Steps are numbered from 0, as Stepwell numbers them.
//
// With -kill-after-step N the process kills itself (SIGKILL on Unix: no
// deferred calls, no clean shutdown) as soon as step N+1 starts, that is,
// after step N's settlement, which enqueues step N+1, has committed. The next
// invocation finds step N+1 in the store and runs it; its attempt number
// shows that the killed process had already claimed it once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// runID is fixed, so that every invocation talks about the same run.
const runID = "order-7"

// steps names the five steps of the run; step n does steps[n].
var steps = []string{"reserve stock", "charge card", "pack parcel", "hand to carrier", "email receipt"}

func main() {
	defaultDir := filepath.Join(".stepwell", "crash_resume")
	dir := flag.String("dir", defaultDir, "store directory")
	killAfter := flag.Int("kill-after-step", -1, "kill this process right after step `N` has committed (-1: never)")
	reset := flag.Bool("reset", false, "delete the store directory and exit")
	flag.Parse()

	if *reset {
		if err := os.RemoveAll(*dir); err != nil {
			log.Fatal(err)
		}
		if *dir == defaultDir {
			os.Remove(filepath.Dir(defaultDir)) // ./.stepwell, if now empty
		}
		fmt.Println("deleted", *dir)
		return
	}
	if err := run(*dir, *killAfter); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, killAfter int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A file:// URL needs an absolute path.
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	q, err := queue.Open(ctx, "file://"+filepath.ToSlash(abs))
	if errors.Is(err, queue.ErrStoreLocked) {
		return fmt.Errorf("another process is using %s: %w", abs, err)
	}
	if err != nil {
		return err
	}
	defer q.Close(context.Background())
	fmt.Println("store:", abs)

	// The runner. Each step appends its name to the payload and sleeps a
	// little, standing in for real work. Real steps should make their side
	// effects idempotent on (RunID, Number): step N+1 below runs twice.
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if killAfter >= 0 && int(s.Number) == killAfter+1 {
			// Step killAfter's settlement has committed (it enqueued this
			// step); die before this one does anything.
			fmt.Printf("killing the process: step %d has committed; step %d is claimed (attempt %d) but has done nothing\n", killAfter, s.Number, s.Attempt)
			kill()
		}
		fmt.Printf("step %d of run %s (attempt %d): %s\n", s.Number, s.RunID, s.Attempt, steps[s.Number])
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return steprunner.Outcome{}, context.Cause(ctx)
		}
		done := string(s.Payload) + "; " + steps[s.Number]
		if int(s.Number) == len(steps)-1 {
			return steprunner.Succeed([]byte(done)), nil
		}
		return steprunner.Continue([]byte(done)), nil
	})

	finished := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		fmt.Printf("run %s %s after step %d\n", o.RunID, o.Status, o.FinalStep)
		select {
		case finished <- o:
		default: // a repeated delivery (hooks are at-least-once)
		}
		return nil
	})

	rt, err := runtime.New(q, runner, hook)
	if err != nil {
		return err
	}

	// Submit is idempotent on (run ID, input): after the first invocation it
	// changes nothing and reports NewlySubmitted=false.
	sub, err := rt.Submit(ctx, runtime.RunSpec{RunID: runID, Input: []byte("order 7")})
	if err != nil {
		return err
	}
	st, err := rt.Status(ctx, runID)
	if err != nil {
		return err
	}
	switch {
	case sub.NewlySubmitted:
		fmt.Printf("submitted run %s (%d steps)\n", runID, len(steps))
	case st.State.Terminal():
		fmt.Printf("run %s was already submitted (new: %v) and has already %s: %q\n",
			runID, sub.NewlySubmitted, st.State, st.Result)
		fmt.Println("nothing to do; -reset starts over")
		return nil
	default:
		fmt.Printf("resuming run %s at step %d (state %s)\n", runID, st.CurrentStep, st.State)
	}

	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()
	select {
	case <-finished:
	case err := <-errc:
		stop()
		return fmt.Errorf("runtime stopped: %v", err)
	case <-ctx.Done():
		stop()
		return errors.New("timed out waiting for the run")
	}
	stop()
	if err := <-errc; err != nil {
		return err
	}
	st, err = rt.Status(ctx, runID)
	if err != nil {
		return err
	}
	fmt.Printf("status: %s at step %d, result %q\n", st.State, st.CurrentStep, st.Result)
	fmt.Println("run it again: the run is done, so nothing runs twice")
	return nil
}

// kill ends the process the hard way, as a crash or an OOM kill would:
// os.Process.Kill is SIGKILL on Unix, so no deferred call and no store
// Close runs.
func kill() {
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	if err == nil {
		time.Sleep(5 * time.Second) // the signal is on its way
	}
	// Not reached on Unix. Elsewhere, fall back to an abrupt exit.
	os.Exit(1)
}
