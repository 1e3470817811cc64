package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

const timersQueue = stepsQueue + ".timers"

// deadlineIn is a deadline far enough ahead that a run reaches the state a
// test puts it in (a step's settlement or two) before it passes, on a
// loaded machine too. Waits for the deadline are bounded by waitTimeout.
func deadlineIn() time.Time { return time.Now().Add(testenv.Scale(1500 * time.Millisecond)) }

// checkDeadlineEnd checks that runID ended Failed by its deadline at step
// final, notified once with that error, and that its deadline job is gone:
// the whole store idle (so no second end can come).
func checkDeadlineEnd(t *testing.T, q *queue.Queue, rt *runtime.Runtime, hook *hookRecorder, runID string, deadline time.Time, final uint32) {
	t.Helper()
	o := hook.wait(t, runID)
	if o.Status != terminal.Failed || !strings.Contains(o.Error, "deadline") || o.FinalStep != final {
		t.Fatalf("outcome %+v, want failed by its deadline at step %d", o, final)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := rt.Wait(ctx, runID)
	if err != nil || st.State != runtime.StateFailed || st.Error != o.Error || st.CurrentStep != final || !st.Deadline.Equal(deadline) {
		t.Fatalf("Wait = %+v, %v; want failed at step %d with %q, Deadline %v", st, err, final, o.Error, deadline)
	}
	if !strings.Contains(st.Error, runtime.ErrRunDeadline.Error()) {
		t.Fatalf("Error %q does not carry ErrRunDeadline's text %q", st.Error, runtime.ErrRunDeadline)
	}
	whenIdle(t, q, "a run ended by its deadline was notified again", func() bool { return len(hook.outcomes(runID)) == 1 })
	if err := rt.Signal(context.Background(), runID, "go", nil); !errors.Is(err, runtime.ErrRunEnded) {
		t.Fatalf("Signal after the deadline = %v, want ErrRunEnded", err)
	}
}

// A run waiting for a signal (without a timeout) fails at its deadline:
// nothing else would end it.
func TestDeadlineWaitingRun(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.AwaitSignal("go", 0), nil
	}), hook)
	startRun(t, rt)
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "waits", Deadline: d})
	st := waitStatus(t, rt, "waits", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if !st.Deadline.Equal(d) {
		t.Fatalf("Status.Deadline = %v, want %v", st.Deadline, d)
	}
	checkDeadlineEnd(t, q, rt, hook, "waits", d, 1)
}

// A run whose step is delayed (ContinueAfter) or whose start is (StartAt,
// here after its deadline) fails at its deadline: the scheduled step is
// removed and never runs.
func TestDeadlineDelayedRun(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	var log stepLog
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		return steprunner.ContinueAfter([]byte("later"), time.Hour), nil
	}), hook)
	startRun(t, rt)
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "delayed", Deadline: d})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "starts-late", Deadline: d, StartAt: time.Now().Add(time.Hour)})
	waitStatus(t, rt, "delayed", "step 1 scheduled", func(s runtime.RunStatus) bool { return s.Scheduled && s.CurrentStep == 1 })
	checkDeadlineEnd(t, q, rt, hook, "delayed", d, 1)
	checkDeadlineEnd(t, q, rt, hook, "starts-late", d, 0)
	if n, m := len(log.of("delayed")), len(log.of("starts-late")); n != 1 || m != 0 {
		t.Fatalf("steps run: %d and %d, want 1 and 0", n, m)
	}
	// The run failed at step 1 keeps its payload: Retry runs it.
	if err := rt.Retry(context.Background(), "delayed"); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, rt, "delayed", "step 2 scheduled", func(s runtime.RunStatus) bool { return s.Scheduled && s.CurrentStep == 2 })
	if !st.Deadline.IsZero() {
		t.Fatalf("a retried run past its deadline has Deadline %v, want none", st.Deadline)
	}
	if steps := log.of("delayed"); string(steps[1].Payload) != "later" {
		t.Fatalf("the retried step's payload %q, want %q", steps[1].Payload, "later")
	}
}

// A paused run fails at its deadline, whether its next step is parked or
// it pauses while waiting for a signal (nothing parked).
func TestDeadlinePausedRun(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if string(s.Payload) == "await" {
			return steprunner.AwaitSignal("go", 0), nil
		}
		return steprunner.ContinueAfter([]byte("parked"), time.Hour), nil
	}), hook)
	startRun(t, rt)
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "parked", Deadline: d})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "not-parked", Deadline: d, Input: []byte("await")})
	waitStatus(t, rt, "parked", "step 1 scheduled", func(s runtime.RunStatus) bool { return s.Scheduled && s.CurrentStep == 1 })
	waitStatus(t, rt, "not-parked", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	for _, id := range []string{"parked", "not-parked"} {
		if err := rt.Pause(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, rt, id, "paused", func(s runtime.RunStatus) bool { return s.State == runtime.StatePaused })
	}
	checkDeadlineEnd(t, q, rt, hook, "parked", d, 1)
	checkDeadlineEnd(t, q, rt, hook, "not-parked", d, 1)
	if err := rt.Resume(context.Background(), "parked"); !errors.Is(err, runtime.ErrRunEnded) {
		t.Fatalf("Resume after the deadline = %v, want ErrRunEnded", err)
	}
}

// A running step's ctx ends at the run's deadline with cause
// ErrRunDeadline; the run is Failed at once, the hook fires once, and what
// the step returns later changes nothing.
func TestDeadlineRunningStep(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	br := newBlockingRunner(func(*steprunner.Step, context.Context) (steprunner.Outcome, error) {
		return steprunner.Succeed([]byte("late")), nil
	})
	rt := newRuntime(t, q, br, hook)
	startRun(t, rt)
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "runs", Deadline: d})
	recv(t, br.started, "the step to start")
	if cause := recv(t, br.causes, "the step's ctx to end"); !errors.Is(cause, runtime.ErrRunDeadline) {
		t.Fatalf("the step's ctx cause = %v, want ErrRunDeadline", cause)
	}
	// Failed before the step returned.
	o := hook.wait(t, "runs")
	if o.Status != terminal.Failed || !strings.Contains(o.Error, "deadline") {
		t.Fatalf("outcome %+v, want failed by its deadline", o)
	}
	close(br.release) // the late Succeed
	checkDeadlineEnd(t, q, rt, hook, "runs", d, 0)
	st, _ := rt.Status(context.Background(), "runs")
	if st.Result != nil || br.calls.Load() != 1 {
		t.Fatalf("after the late return: %+v, %d calls; want no result, one call", st, br.calls.Load())
	}
}

// An external Cancel of a running step of a run with a deadline still
// gives the step's ctx the cause steprunner.ErrRunCancelled, and ends the
// run Cancelled: its deadline job is removed with the run's end.
func TestDeadlineCancelledRunningStep(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	br := newBlockingRunner(func(*steprunner.Step, context.Context) (steprunner.Outcome, error) {
		return steprunner.Succeed(nil), nil
	})
	close(br.release)
	rt := newRuntime(t, q, br, hook)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "c", Deadline: time.Now().Add(time.Hour)})
	recv(t, br.started, "the step to start")
	mustCancel(t, rt, "c", true)
	if cause := recv(t, br.causes, "the step's ctx to end"); !errors.Is(cause, steprunner.ErrRunCancelled) {
		t.Fatalf("the step's ctx cause = %v, want ErrRunCancelled", cause)
	}
	if o := hook.wait(t, "c"); o.Status != terminal.Cancelled {
		t.Fatalf("outcome %+v, want cancelled", o)
	}
	whenIdle(t, q, "a cancelled run's deadline job is still scheduled", func() bool { return true })
}

// A pending run (its step queued, no slot free) fails at its deadline; the
// step never runs.
func TestDeadlinePendingRun(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	var ran atomic.Int32
	release, blocking := make(chan struct{}), make(chan struct{}, 1)
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.RunID == "blocker" {
			blocking <- struct{}{}
			<-release
		} else {
			ran.Add(1)
		}
		return steprunner.Succeed(nil), nil
	}), hook, runtime.WithMaxConcurrentSteps(1))
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "blocker"})
	// Its step runs, in the only slot. (Running in Status is not enough:
	// in a cluster member, a step the writer claimed for the member's
	// idle loop can be given back, unstarted, when the member dispatches
	// the next run's step into the slot meanwhile.)
	recv(t, blocking, "the blocker's step to start")
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "pending", Deadline: d})
	if st, err := rt.Status(context.Background(), "pending"); err != nil || st.State != runtime.StatePending {
		t.Fatalf("Status = %+v, %v; want pending", st, err)
	}
	o := hook.wait(t, "pending")
	if o.Status != terminal.Failed || !strings.Contains(o.Error, "deadline") || o.FinalStep != 0 {
		t.Fatalf("outcome %+v, want failed by its deadline at step 0", o)
	}
	close(release)
	checkDeadlineEnd(t, q, rt, hook, "pending", d, 0)
	if ran.Load() != 0 {
		t.Fatal("the step of a run past its deadline ran")
	}
}

// A parent waiting for its children fails at its deadline, and its
// children (waiting for a signal that never comes) are cancelled by the
// cascade: none outlives the parent's deadline.
func TestDeadlineWaitingForChildren(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, treeRunner(&stepLog{}), hook)
	startRun(t, rt)
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn 3*wait"), Deadline: d})
	st := waitStatus(t, rt, "p", "waiting for children", func(s runtime.RunStatus) bool {
		return s.State == runtime.StateWaiting && len(s.Children) == 3
	})
	for _, c := range st.Children {
		waitStatus(t, rt, c, "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	}
	checkDeadlineEnd(t, q, rt, hook, "p", d, 1)
	for _, c := range st.Children {
		if cs := waitTerminal(t, rt, c); cs.State != runtime.StateCancelled || !cs.Deadline.IsZero() {
			t.Fatalf("child %s: %+v, want cancelled by its parent's deadline, without a deadline of its own", c, cs)
		}
	}
}

// A run that ends before its deadline (succeeds, fails, is cancelled)
// removes its deadline job in the ending transaction: it never fires.
// Without that, the queues would not get idle (the job stays scheduled).
// Retry of the run that failed keeps its deadline, still ahead: a new
// deadline job, removed again when the retried run ends.
func TestDeadlineJobGoneWhenRunEnds(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	var failed atomic.Bool
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch string(s.Payload) {
		case "fail":
			if !failed.Swap(true) {
				return steprunner.Fail("no"), nil
			}
			return steprunner.AwaitSignal("go", 0), nil // once retried
		case "wait":
			return steprunner.AwaitSignal("go", 0), nil
		}
		return steprunner.Succeed(nil), nil
	}), hook)
	startRun(t, rt)
	d := time.Now().Add(time.Hour)
	for _, in := range []string{"ok", "fail", "wait"} {
		mustSubmit(t, rt, runtime.RunSpec{RunID: in, Input: []byte(in), Deadline: d})
	}
	waitStatus(t, rt, "wait", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	mustCancel(t, rt, "wait", true)
	for _, id := range []string{"ok", "fail", "wait"} {
		hook.wait(t, id)
	}
	whenIdle(t, q, "a run's end left its deadline job", func() bool { return hook.total() == 3 })
	if err := rt.Retry(context.Background(), "fail"); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, rt, "fail", "the retried run waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if !st.Deadline.Equal(d) {
		t.Fatalf("the retried run: %+v; want Deadline %v", st, d)
	}
	if s := mustStats(t, q, timersQueue); s.Scheduled != 1 {
		t.Fatalf("timers queue %+v, want the retried run's deadline job", s)
	}
	if err := rt.Signal(context.Background(), "fail", "go", nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the retried run to end", func() bool { return len(hook.outcomes("fail")) == 2 })
	whenIdle(t, q, "the retried run's end left its deadline job", func() bool { return hook.total() == 4 })
}

// A run being cancelled, whose step ignores its ctx, ends Failed at its
// deadline without waiting for the step: its step saw the cause of the
// Cancel that came first; what it returns later changes nothing.
func TestDeadlineCancellingRun(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	br := newBlockingRunner(func(*steprunner.Step, context.Context) (steprunner.Outcome, error) {
		return steprunner.Succeed(nil), nil
	})
	rt := newRuntime(t, q, br, hook)
	startRun(t, rt)
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "c", Deadline: d})
	recv(t, br.started, "the step to start")
	mustCancel(t, rt, "c", true)
	if cause := recv(t, br.causes, "the step's ctx to end"); !errors.Is(cause, steprunner.ErrRunCancelled) {
		t.Fatalf("the step's ctx cause = %v, want ErrRunCancelled", cause)
	}
	if o := hook.wait(t, "c"); o.Status != terminal.Failed || !strings.Contains(o.Error, "deadline") {
		t.Fatalf("outcome %+v, want failed by its deadline", o)
	}
	close(br.release)
	checkDeadlineEnd(t, q, rt, hook, "c", d, 0)
}

// Bad input: a deadline that has passed, or another deadline for a run
// that exists, is a typed error and writes nothing.
func TestDeadlineBadInput(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil)
	ctx := context.Background()
	for _, d := range []time.Time{time.Now().Add(-time.Second), time.Unix(1, 0)} {
		_, err := rt.Submit(ctx, runtime.RunSpec{RunID: "past", Deadline: d})
		if !errors.Is(err, runtime.ErrInvalidRunSpec) || !strings.Contains(err.Error(), "Deadline") {
			t.Fatalf("Submit with a past deadline = %v, want ErrInvalidRunSpec naming Deadline", err)
		}
	}
	if _, err := rt.Status(ctx, "past"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("Status after a refused Submit = %v, want ErrRunNotFound", err)
	}
	d := time.Now().Add(time.Hour)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "r", Deadline: d})
	for _, other := range []time.Time{{}, d.Add(time.Second)} {
		_, err := rt.Submit(ctx, runtime.RunSpec{RunID: "r", Deadline: other})
		if !errors.Is(err, runtime.ErrSpecMismatch) || !strings.Contains(err.Error(), "Deadline") {
			t.Fatalf("re-Submit with Deadline %v = %v, want ErrSpecMismatch naming Deadline", other, err)
		}
	}
	_, err := rt.Submit(ctx, runtime.RunSpec{RunID: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "plain", Deadline: d}); !errors.Is(err, runtime.ErrSpecMismatch) {
		t.Fatalf("re-Submit adding a Deadline = %v, want ErrSpecMismatch", err)
	}
	if out := mustSubmit(t, rt, runtime.RunSpec{RunID: "r", Deadline: d}); out.NewlySubmitted {
		t.Fatal("the same spec again was submitted anew")
	}
	if s := mustStats(t, q, timersQueue); s.Scheduled != 1 || s.Pending+s.Claimed+s.Dead != 0 {
		t.Fatalf("timers queue %+v, want the one deadline job", s)
	}
	if s := mustStats(t, q, stepsQueue); s.Pending != 2 {
		t.Fatalf("step queue %+v, want the two runs' steps", s)
	}
}

// The deadline restart test: a child process (this test binary,
// re-executed) submits a run with a deadline that waits for a signal on a
// file:// store, says so on stderr once it waits, and is SIGKILLed; the
// deadline job survives in the store, and the Runtime of the reopened
// store fails the run at its deadline.
const (
	deadlineChildEnv   = "STEPWELL_RUNTIME_DEADLINE_CHILD" // store dir
	deadlineReadyLine  = "child: the run waits"
	deadlineAfterReady = 3 * time.Second // scaled
)

// deadlineRunner awaits a signal that never comes.
var deadlineRunner = steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	return steprunner.AwaitSignal("go", 0), nil
})

// deadlineChild submits the run "restart" with a deadline, waits until it
// waits for its signal, says so on stderr (with the deadline, in unix ns)
// and waits to be killed.
func deadlineChild(dir string) int {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir, fastQueueOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	rt, err := runtime.New(q, deadlineRunner, terminal.Noop, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child New:", err)
		return 3
	}
	go rt.Run(ctx)
	d := time.Now().Add(testenv.Scale(deadlineAfterReady))
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "restart", Deadline: d}); err != nil {
		fmt.Fprintln(os.Stderr, "child submit:", err)
		return 4
	}
	for {
		st, err := rt.Status(ctx, "restart")
		if err == nil && st.State == runtime.StateWaiting {
			break
		}
		if time.Now().After(d) {
			fmt.Fprintln(os.Stderr, "child: the run did not wait before its deadline:", st, err)
			return 5
		}
		time.Sleep(2 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "%s %d\n", deadlineReadyLine, d.UnixNano())
	return <-make(chan int) // until killed
}

func TestDeadlineSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready := make(chan int64, 1)
	stderr := &testenv.Buffer{OnLine: func(l string) {
		if rest, ok := strings.CutPrefix(l, deadlineReadyLine+" "); ok {
			ns, _ := strconv.ParseInt(rest, 10, 64)
			ready <- ns
		}
	}}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), deadlineChildEnv+"="+dir)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := time.Unix(0, killWhenReady(t, cmd, stderr, ready, "its run waited", "get its run waiting"))

	q := openQueue(t, "file://"+dir)
	hook := &hookRecorder{}
	rt := newRuntime(t, q, deadlineRunner, hook)
	if st, err := rt.Status(context.Background(), "restart"); err != nil || st.State != runtime.StateWaiting || !st.Deadline.Equal(d) {
		t.Fatalf("after the kill: %+v, %v; want still waiting, with Deadline %v (did it come too soon?)", st, err, d)
	}
	if s := mustStats(t, q, timersQueue); s.Scheduled+s.Pending != 1 {
		t.Fatalf("after the kill, timers queue %+v: want the deadline job", s)
	}
	startRun(t, rt)
	checkDeadlineEnd(t, q, rt, hook, "restart", d, 1)
}

// Cluster mode: the step runs in a member (this process), beside a writer
// process; the deadline's transaction commits in the writer, and the
// cancel of the claimed step reaches the member, whose step sees cause
// ErrRunDeadline. The late return changes nothing.
func TestDeadlineRunningStepInMember(t *testing.T) {
	var blocking atomic.Bool
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	release := make(chan struct{})
	m, rt, hook := memberRuntime(t, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if !blocking.Load() {
			return steprunner.Succeed(nil), nil
		}
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-release
		return steprunner.Succeed([]byte("late")), nil
	}))
	blocking.Store(true)
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "member-runs", Deadline: d})
	recv(t, started, "the step to start in the member")
	if cause := recv(t, causes, "the step's ctx to end"); !errors.Is(cause, runtime.ErrRunDeadline) {
		t.Fatalf("the member's step ctx cause = %v, want ErrRunDeadline", cause)
	}
	close(release)
	checkDeadlineEnd(t, m, rt, hook, "member-runs", d, 0)
}

// The deadline row is redone after a crash between its job's claim and
// its commit: here the job is claimed by hand and never settled (its
// claimer "died"), so it runs again once its lease has passed, and the
// run ends once, by its deadline.
func TestDeadlineJobClaimedAndLost(t *testing.T) {
	t.Parallel()
	const lease = 100 * time.Millisecond
	ctx := context.Background()
	q, err := openStore(t, shortLeaseURL(t, lease), queue.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(ctx) }) // after Run stopped
	hook := &hookRecorder{}
	rt := newRuntime(t, q, deadlineRunner, hook)
	d := time.Now().Add(300 * time.Millisecond)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "lost", Deadline: d, StartAt: time.Now().Add(time.Hour)})
	var lost *queue.Job
	testenv.Eventually(t, waitTimeout, "the deadline job to come due and be claimed", func() bool {
		lost, err = claimOne(ctx, q, timersQueue)
		if err != nil {
			t.Fatal(err)
		}
		return lost != nil
	})
	if st, err := rt.Status(ctx, "lost"); err != nil || st.State.Terminal() {
		t.Fatalf("with its deadline job claimed and not settled: %+v, %v; want the run not ended", st, err)
	}
	startRun(t, rt)
	checkDeadlineEnd(t, q, rt, hook, "lost", d, 0)
	if err := q.Ack(ctx, lost); !queue.IsClaimLost(err) {
		t.Fatalf("the lost claim's Ack = %v, want its claim lost", err)
	}
}
