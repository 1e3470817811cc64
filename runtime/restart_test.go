package runtime_test

import (
	"bytes"
	"context"
	"errors"
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

func TestRestartResumesAtNextStep(t *testing.T) {
	t.Parallel()
	url := fileURL(t)
	ctx := context.Background()

	// First process: steps 0 and 1 run; step 1 schedules step 2 a little
	// later, and the runtime stops before it is due.
	q1, err := openStore(t, url)
	if err != nil {
		t.Fatal(err)
	}
	var log1 stepLog
	rt1 := newRuntime(t, q1, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log1.add(s)
		p := fmt.Appendf(bytes.Clone(s.Payload), "|%d", s.Number)
		if s.Number == 1 {
			return steprunner.ContinueAfter(p, 800*time.Millisecond), nil
		}
		if s.Number >= 2 {
			return steprunner.Outcome{}, errors.New("the first process must not run step 2")
		}
		return steprunner.Continue(p), nil
	}), terminal.Noop)
	mustSubmit(t, rt1, runtime.RunSpec{RunID: "resume", Input: []byte("in"), Headers: map[string]string{"h": "1"}})
	r1 := startRun(t, rt1)
	waitStatus(t, rt1, "resume", "step 2 scheduled", func(s runtime.RunStatus) bool { return s.CurrentStep == 2 && s.Scheduled })
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if err := q1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(log1.of("resume")); n != 2 {
		t.Fatalf("first process ran %d steps, want 2", n)
	}

	// Second process: only step 2 runs.
	q2 := openQueue(t, url)
	var log2 stepLog
	hook := &hookRecorder{}
	rt2 := newRuntime(t, q2, chainRunner(&log2, 2), hook)
	st, err := rt2.Status(ctx, "resume")
	if err != nil || st.State != runtime.StatePending || st.CurrentStep != 2 || !st.Scheduled {
		t.Errorf("Status after reopening = %+v, %v; want pending, scheduled, at step 2", st, err)
	}
	startRun(t, rt2)
	o := hook.wait(t, "resume")
	if o.Status != terminal.Succeeded || string(o.Result) != "in|0|1|2" || o.FinalStep != 2 || o.Headers["h"] != "1" {
		t.Errorf("outcome = %+v, want succeeded in|0|1|2 at step 2", o)
	}
	steps := log2.of("resume")
	if len(steps) != 1 || steps[0].Number != 2 || string(steps[0].Payload) != "in|0|1" || steps[0].Attempt != 1 {
		t.Errorf("second process ran %+v, want only step 2 (attempt 1) with payload in|0|1", steps)
	}
}

func TestRestartMidStepRedeliversIt(t *testing.T) {
	t.Parallel()
	// A step interrupted by the end of its process (here: a drain timeout,
	// then the store is closed) is delivered again after the restart, with
	// the same payload and the next attempt number; earlier steps are not.
	url := fileURL(t)
	ctx := context.Background()
	q1, err := openStore(t, url)
	if err != nil {
		t.Fatal(err)
	}
	var log1 stepLog
	rt1 := newRuntime(t, q1, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log1.add(s)
		if s.Number == 1 {
			<-ctx.Done()
			return steprunner.Outcome{}, ctx.Err()
		}
		return steprunner.Continue(fmt.Appendf(bytes.Clone(s.Payload), "|%d", s.Number)), nil
	}), terminal.Noop, runtime.WithDrainTimeout(20*time.Millisecond))
	mustSubmit(t, rt1, runtime.RunSpec{RunID: "mid", Input: []byte("in"), MaxAttemptsPerStep: 5})
	r1 := startRun(t, rt1)
	testenv.Eventually(t, waitTimeout, "step 1 to start", func() bool { return len(log1.of("mid")) == 2 })
	r1.stop()
	if err := q1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	q2 := openQueue(t, url)
	var log2 stepLog
	hook := &hookRecorder{}
	rt2 := newRuntime(t, q2, chainRunner(&log2, 1), hook)
	startRun(t, rt2)
	o := hook.wait(t, "mid")
	if o.Status != terminal.Succeeded || string(o.Result) != "in|0|1" {
		t.Errorf("outcome = %+v", o)
	}
	steps := log2.of("mid")
	// The drain released step 1: its attempt did not count.
	if len(steps) != 1 || steps[0].Number != 1 || steps[0].Attempt != 1 || string(steps[0].Payload) != "in|0" {
		t.Errorf("second process ran %+v, want step 1 again (attempt 1: released by the drain) with payload in|0", steps)
	}
}

// The queue dead-letters a claimed job on its own when a worker stops
// without settling it on its last attempt: at reopen after a crash
// (requeueClaimed) and when its lease expires (the reaper). The runtime
// must still end the run (Failed, with a hook call); a run whose current
// step is dead must not stay "pending" forever. A drain timeout releases
// the step instead (the attempt does not count): it runs again.
func TestStepLostOnLastAttemptEndsRun(t *testing.T) {
	t.Parallel()
	t.Run("crash then reopen", func(t *testing.T) {
		writerOnly(t, "the reopen of the store dead-letters the claimed step; a member's close leaves its claim to lease expiry, the \"lease expiry\" case")
		t.Parallel()
		url := fileURL(t)
		ctx := context.Background()
		q1, err := openStore(t, url)
		if err != nil {
			t.Fatal(err)
		}
		rt1 := newRuntime(t, q1, succeedRunner(nil), terminal.Noop)
		mustSubmit(t, rt1, runtime.RunSpec{RunID: "lost", MaxAttemptsPerStep: 1})
		// A worker claims the step and its process dies before settling.
		if j, err := claimOne(ctx, q1, stepsQueue); err != nil || j == nil {
			t.Fatalf("Claim = %v, %v", j, err)
		}
		if err := q1.Close(ctx); err != nil {
			t.Fatal(err)
		}
		q2 := openQueue(t, url)
		checkRunEnds(t, q2, "lost")
	})
	t.Run("lease expiry", func(t *testing.T) {
		t.Parallel()
		q := openQueue(t, memURL(), queue.WithLease(30*time.Millisecond))
		rt := newRuntime(t, q, succeedRunner(nil), terminal.Noop)
		mustSubmit(t, rt, runtime.RunSpec{RunID: "lost", MaxAttemptsPerStep: 1})
		// A worker claims the step and hangs without renewing its lease.
		if j, err := claimOne(context.Background(), q, stepsQueue); err != nil || j == nil {
			t.Fatalf("Claim = %v, %v", j, err)
		}
		testenv.Eventually(t, waitTimeout, "the reaper to dead-letter the step", func() bool { return mustStats(t, q, stepsQueue).Dead == 1 })
		checkRunEnds(t, q, "lost")
	})
	t.Run("drain timeout", func(t *testing.T) {
		t.Parallel()
		q := openQueue(t, memURL())
		started := make(chan struct{}, 1)
		rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
			started <- struct{}{}
			<-ctx.Done()
			return steprunner.Outcome{}, ctx.Err()
		}), terminal.Noop, runtime.WithDrainTimeout(20*time.Millisecond))
		mustSubmit(t, rt, runtime.RunSpec{RunID: "lost", MaxAttemptsPerStep: 1})
		r := startRun(t, rt)
		recv(t, started, "the step to start")
		r.stop()
		checkRunEnds(t, q, "lost")
	})
}

// checkRunEnds starts a fresh Runtime with a hook on q and checks that the
// run reaches a final state and its hook fires, or its step is delivered
// again, within stuckTimeout.
func checkRunEnds(t *testing.T, q *queue.Queue, runID string) {
	t.Helper()
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, succeedRunner(&log), hook)
	startRun(t, rt)
	ended := false
	defer func() {
		if ended {
			return
		}
		st, err := rt.Status(context.Background(), runID)
		dead := deadJobs(t, q, stepsQueue)
		var hist []string
		for _, j := range dead {
			hist = append(hist, fmt.Sprintf("%s attempt %d/%d", j.ID, j.Attempt, j.MaxAttempts))
		}
		t.Logf("run %s is stuck: Status = %+v (err %v); dead step jobs: %v", runID, st, err, hist)
	}()
	testenv.Eventually(t, stuckTimeout, "run "+runID+" to end: its hook to fire or its step to be delivered again", func() bool {
		return len(hook.outcomes(runID)) > 0 || len(log.of(runID)) > 0
	})
	ended = true
	st := waitTerminal(t, rt, runID)
	t.Logf("run %s ended: hook %+v, redelivered steps %d, status %+v", runID, hook.outcomes(runID), len(log.of(runID)), st)
	if o := hook.wait(t, runID); len(log.of(runID)) == 0 && (o.Status != terminal.Failed || st.State != runtime.StateFailed || o.Error == "") {
		t.Errorf("run %s: the lost step ended it as %v (%q), status %v; want failed with a reason", runID, o.Status, o.Error, st.State)
	}
}

// WithTerminalRetention accepts any positive duration, and the janitor
// ticks every retention/2: a retention of 1ns made Run panic (NewTicker
// with a zero interval), killing the process. Run in a child process so a
// panic fails this test instead of the whole test binary.
func TestTinyTerminalRetentionDoesNotPanic(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTinyTerminalRetentionDoesNotPanic$")
	cmd.Env = append(os.Environ(), tinyRetentionChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("Run with WithTerminalRetention(time.Nanosecond) crashed: %v\n%s", err, firstLines(out, 12))
	}
}

const tinyRetentionChildEnv = "STEPWELL_RUNTIME_TINY_RETENTION_CHILD"

// tinyRetentionChild runs a Runtime with a 1ns retention for a moment and
// exits 0 if it survives, 1 if something else went wrong.
func tinyRetentionChild() int {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://tiny-retention", fastQueueOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rt, err := runtime.New(q, succeedRunner(nil), terminal.Noop, runtime.WithTerminalRetention(time.Nanosecond),
		runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "New:", err)
		return 0 // rejecting the option is fine too
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "x"}); err != nil {
		fmt.Fprintln(os.Stderr, "Submit:", err)
		return 1
	}
	runCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := rt.Run(runCtx); err != nil {
		fmt.Fprintln(os.Stderr, "Run:", err)
		return 1
	}
	return 0
}

func firstLines(b []byte, n int) []byte {
	lines := bytes.SplitN(b, []byte("\n"), n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return bytes.Join(lines, []byte("\n"))
}
