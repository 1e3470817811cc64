package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// The history crash test: a child process (this test binary, re-executed)
// runs step 0 of a run, which returns, and is SIGKILLed after that and
// before its settlement commits (WithBeforeSettle blocks it there, once it
// said so on stderr). The next process runs the step again: the history
// must hold no entry of the killed attempt's outcome, only the lease_lost
// that the next committed attempt recorded for it, then that attempt's.

const (
	historyCrashEnv  = "STEPWELL_RUNTIME_HISTORY_CRASH" // store dir
	historySettling  = "child: settling step 0 attempt 1"
	historyCrashRun  = "hc"
	historyCrashWant = "submitted@0/0 lease_lost@0/1 continue@0/2 succeed@1/1"
)

// historyRunner continues at step 0 and succeeds at step 1.
func historyRunner() steprunner.RunnerFunc {
	return func(_ context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			return steprunner.Continue([]byte(fmt.Sprint("from attempt ", s.Attempt))), nil
		}
		return steprunner.Succeed(s.Payload), nil
	}
}

// historyCrashChild submits the run and runs its step 0, whose first
// attempt blocks before its settlement until the process is killed.
func historyCrashChild(dir string) int {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir, fastQueueOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	rt, err := runtime.New(q, historyRunner(), nil, runtime.WithPollInterval(10*time.Millisecond),
		runtime.WithBeforeSettle(func(_ context.Context, job *queue.Job) {
			if job.Headers[runtime.HeaderStep] == "0" && job.Attempt == 1 {
				fmt.Fprintln(os.Stderr, historySettling)
				select {} // until killed
			}
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child runtime:", err)
		return 3
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: historyCrashRun}); err != nil {
		fmt.Fprintln(os.Stderr, "child submit:", err)
		return 4
	}
	if err := rt.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child run:", err)
		return 5
	}
	return 0
}

// TestHistoryCrash: a crash between a step's attempt and its settlement
// leaves no entry for that attempt's outcome; the next attempt's entry is
// there, after the lease_lost it recorded. Fails if an entry were written
// outside the settlement's transaction (before it commits).
func TestHistoryCrash(t *testing.T) {
	writerOnly(t, "the child process opens the store as its writer")
	base := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHistoryCrash$")
	cmd.Env = append(os.Environ(), historyCrashEnv+"="+base)
	stderr := &testenv.Buffer{}
	settling := make(chan struct{}, 1)
	stderr.OnLine = func(line string) {
		if strings.Contains(line, historySettling) {
			select {
			case settling <- struct{}{}:
			default:
			}
		}
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settling:
	case <-time.After(waitTimeout):
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		t.Fatalf("the child never reached step 0's settlement\n%s", stderr.String())
	}
	// Killed with step 0's outcome in hand and its settlement not
	// committed: the work in flight that the kill interrupts.
	cmd.Process.Signal(syscall.SIGKILL)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, stderr.String())
	}

	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+base, fastQueueOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	rt := newRuntime(t, q, historyRunner(), nil)
	// Before anything runs again: the killed attempt left no entry.
	if h := history(t, rt, historyCrashRun); kinds(h) != "submitted@0/0" {
		t.Fatalf("history after the kill: %s, want the submission alone", kinds(h))
	}
	startRun(t, rt)
	h := waitKinds(t, rt, historyCrashRun, historyCrashWant)
	if h[1].Error != "worker stopped without settling" || h[2].Preview != "from attempt 2" {
		t.Fatalf("entries after the kill: %+v", h[1:])
	}
}
