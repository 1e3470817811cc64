package runtime_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// The run-control restart test: a child process (this test binary,
// re-executed) brings three runs to a standstill on a file:// store (one
// waiting for a signal, one waiting with a timeout, one paused with its
// next step parked) and is SIGKILLed; the test then reopens the store in
// this process and checks that each state survived and moves on: the
// signal sent after the restart wakes its run, the timeout fires, and
// Resume starts the parked step (which did not start before).

const (
	controlChildEnv   = "STEPWELL_RUNTIME_CONTROL_CHILD" // store dir
	controlReadyLine  = "child: runs at a standstill"
	controlTimeout    = 1500 * time.Millisecond
	controlPauseDelay = 100 * time.Millisecond
)

// controlRunner drives the three runs of the restart test.
func controlRunner(log *stepLog) steprunner.RunnerFunc {
	return func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if log != nil {
			log.add(s)
		}
		switch {
		case s.RunID == "ctl-wait" && s.Number == 0:
			return steprunner.AwaitSignal("go", 0), nil
		case s.RunID == "ctl-wait":
			return steprunner.Succeed(fmt.Appendf(nil, "%s:%s", s.Signal.Name, s.Payload)), nil
		case s.RunID == "ctl-timeout" && s.Number == 0:
			return steprunner.AwaitSignal("never", controlTimeout), nil
		case s.RunID == "ctl-timeout" && s.Signal != nil && s.Signal.TimedOut:
			return steprunner.Succeed([]byte("timed out")), nil
		case s.RunID == "ctl-paused" && s.Number == 0:
			return steprunner.ContinueAfter([]byte("kept"), controlPauseDelay), nil
		case s.RunID == "ctl-paused":
			return steprunner.Succeed(s.Payload), nil
		}
		return steprunner.Fail(fmt.Sprintf("unexpected step %d %+v", s.Number, s.Signal)), nil
	}
}

// controlChild brings the runs to a standstill, says so on stderr, and
// waits to be killed.
func controlChild(dir string) int {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir, fastQueueOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	rt, err := runtime.New(q, controlRunner(nil), terminal.Noop, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child New:", err)
		return 3
	}
	go rt.Run(ctx)
	for _, id := range []string{"ctl-wait", "ctl-timeout", "ctl-paused"} {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: id}); err != nil {
			fmt.Fprintln(os.Stderr, "child submit:", err)
			return 4
		}
	}
	wait := func(id string, pred func(runtime.RunStatus) bool) bool {
		for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if st, err := rt.Status(ctx, id); err == nil && pred(st) {
				return true
			}
		}
		fmt.Fprintln(os.Stderr, "child: timed out waiting on", id)
		return false
	}
	if !wait("ctl-paused", func(s runtime.RunStatus) bool { return s.CurrentStep == 1 && s.Scheduled }) {
		return 5
	}
	if err := rt.Pause(ctx, "ctl-paused"); err != nil {
		fmt.Fprintln(os.Stderr, "child pause:", err)
		return 6
	}
	for _, id := range []string{"ctl-wait", "ctl-timeout"} {
		if !wait(id, func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting }) {
			return 7
		}
	}
	fmt.Fprintln(os.Stderr, controlReadyLine)
	return <-make(chan int) // until killed
}

func TestRunControlSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("restart test skipped in -short mode")
	}
	t.Parallel()
	dir := t.TempDir()
	ready := make(chan struct{})
	stderr := &testenv.Buffer{OnLine: func(l string) {
		if l == controlReadyLine {
			close(ready)
		}
	}}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunControlSurvivesSIGKILL$")
	cmd.Env = append(os.Environ(), controlChildEnv+"="+dir)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killWhenReady(t, cmd, stderr, ready, "its runs stood still", "get its runs to a standstill")

	ctx := context.Background()
	q := openQueue(t, "file://"+dir)
	log := &stepLog{}
	hook := &hookRecorder{}
	rt := newRuntime(t, q, controlRunner(log), hook)
	for id, want := range map[string]runtime.State{
		"ctl-wait": runtime.StateWaiting, "ctl-timeout": runtime.StateWaiting, "ctl-paused": runtime.StatePaused,
	} {
		if st, err := rt.Status(ctx, id); err != nil || st.State != want {
			t.Fatalf("after the kill, %s: %+v, %v; want %s", id, st, err, want)
		}
	}
	startRun(t, rt)
	if err := rt.Signal(ctx, "ctl-wait", "go", []byte("after restart")); err != nil {
		t.Fatal(err)
	}
	if o := hook.wait(t, "ctl-wait"); string(o.Result) != "go:after restart" {
		t.Errorf("ctl-wait: %+v", o)
	}
	if o := hook.wait(t, "ctl-timeout"); o.Status != terminal.Succeeded || string(o.Result) != "timed out" {
		t.Errorf("ctl-timeout: %+v (%q)", o, o.Result)
	}
	// The parked step's delay has run out: still it must not start.
	waitParkedDue(t, q, "ctl-paused")
	whenIdle(t, q, "the parked step started before Resume", func() bool { return len(log.of("ctl-paused")) == 0 })
	if err := rt.Resume(ctx, "ctl-paused"); err != nil {
		t.Fatal(err)
	}
	if o := hook.wait(t, "ctl-paused"); string(o.Result) != "kept" {
		t.Errorf("ctl-paused: %+v", o)
	}
}
