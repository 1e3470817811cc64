package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// TestPauseParksScheduledStep: Pause of a run whose next step waits on a
// delay removes the step from the queue (parked with its payload); the
// delay runs out while paused and the step does not start; Resume starts
// it at once. Pause of a paused run and Resume of a running one are
// no-ops.
func TestPauseParksScheduledStep(t *testing.T) {
	log := &stepLog{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.Number == 0 {
			return steprunner.ContinueAfter([]byte("kept"), 200*time.Millisecond), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	startRun(t, rt)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p1"})
	waitStatus(t, rt, "p1", "step 1 scheduled", func(s runtime.RunStatus) bool { return s.CurrentStep == 1 && s.Scheduled })
	for range 2 { // the second Pause is a no-op
		if err := rt.Pause(ctx, "p1"); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := rt.Status(ctx, "p1")
	if st.State != runtime.StatePaused || !st.Paused || st.CurrentStep != 1 {
		t.Fatalf("status after Pause %+v", st)
	}
	if s := mustStats(t, q, stepsQueue); s.Pending+s.Scheduled+s.Claimed != 0 {
		t.Fatalf("a paused run's step is still queued: %+v", s)
	}
	waitParkedDue(t, q, "p1") // the delay runs out while paused
	whenIdle(t, q, "step 1 of a paused run started", func() bool { return len(log.of("p1")) == 1 })
	if err := rt.Resume(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if o := hook.wait(t, "p1"); string(o.Result) != "kept" {
		t.Fatalf("result %q, want the parked payload", o.Result)
	}
	if err := rt.Resume(ctx, "p1"); !errors.Is(err, runtime.ErrRunEnded) {
		t.Fatalf("Resume of an ended run = %v", err)
	}
}

// TestPauseRunningStepParksSuccessor: a step running when Pause commits
// finishes and settles; its successor is parked, not run; Resume runs it.
func TestPauseRunningStepParksSuccessor(t *testing.T) {
	release := make(chan struct{})
	log := &stepLog{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.Number == 0 {
			<-release
			return steprunner.Continue([]byte("next")), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	startRun(t, rt)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p2"})
	waitStatus(t, rt, "p2", "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
	if err := rt.Pause(ctx, "p2"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Resume(ctx, "nope"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("Resume(unknown) = %v", err)
	}
	if st, _ := rt.Status(ctx, "p2"); st.State != runtime.StateRunning || !st.Paused {
		t.Fatalf("status of a paused run's running step %+v", st)
	}
	close(release)
	waitStatus(t, rt, "p2", "paused at step 1", func(s runtime.RunStatus) bool {
		return s.State == runtime.StatePaused && s.CurrentStep == 1
	})
	whenIdle(t, q, "the successor of a paused run's step started", func() bool { return len(log.of("p2")) == 1 })
	if err := rt.Resume(ctx, "p2"); err != nil {
		t.Fatal(err)
	}
	if o := hook.wait(t, "p2"); string(o.Result) != "next" {
		t.Fatalf("result %q", o.Result)
	}
}

// TestPauseRacesSettlement: runs of many chained steps paused at random
// moments. Once Pause returns, at most the step then in flight starts
// (it may have been claimed, not yet called); after Resume every run ends
// with its whole chain, each step once and in order. Fails if a Pause
// lost to a concurrent settlement lets the run go on, or if parking
// loses or repeats a step.
func TestPauseRacesSettlement(t *testing.T) {
	const runs, last = 12, 40
	q, log, hook, rt := chainSetup(t, last, runtime.WithMaxConcurrentSteps(4))
	startRun(t, rt)
	ctx := context.Background()
	for i := range runs {
		mustSubmit(t, rt, runtime.RunSpec{RunID: fmt.Sprintf("pr-%d", i)})
	}
	atPause := make([]int, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			id := fmt.Sprintf("pr-%d", i)
			if err := rt.Pause(ctx, id); err != nil && !errors.Is(err, runtime.ErrRunEnded) {
				t.Errorf("Pause(%s): %v", id, err)
			}
			atPause[i] = len(log.of(id))
		})
	}
	wg.Wait()
	for i := range runs {
		id := fmt.Sprintf("pr-%d", i)
		waitStatus(t, rt, id, "paused or ended", func(s runtime.RunStatus) bool {
			return s.State == runtime.StatePaused || s.State.Terminal()
		})
	}
	// Nothing more may start. Wait until no step job is queued or claimed
	// (a paused run's next step is parked, not queued): a step that a lost
	// Pause let through has then run, and is in the log.
	testenv.Eventually(t, waitTimeout, "no step queued or claimed", func() bool {
		s := mustStats(t, q, stepsQueue)
		return s.Pending+s.Scheduled+s.Claimed == 0
	})
	for i := range runs {
		id := fmt.Sprintf("pr-%d", i)
		if n := len(log.of(id)); n > atPause[i]+1 {
			t.Errorf("run %s: %d steps had started when Pause returned, %d later", id, atPause[i], n)
		}
		if err := rt.Resume(ctx, id); err != nil && !errors.Is(err, runtime.ErrRunEnded) {
			t.Errorf("Resume(%s): %v", id, err)
		}
	}
	var want strings.Builder
	for n := range last + 1 {
		fmt.Fprintf(&want, "|%d", n)
	}
	for i := range runs {
		id := fmt.Sprintf("pr-%d", i)
		if o := hook.wait(t, id); o.Status != terminal.Succeeded || string(o.Result) != want.String() {
			t.Errorf("run %s: %s %q", id, o.Status, o.Result)
		}
	}
	if s := mustStats(t, q, stepsQueue); s.Dead != 0 {
		t.Errorf("dead steps: %+v", s)
	}
}

// TestPauseWaitingRun: a paused run keeps waiting; a signal that arrives
// while it is paused is parked (the state stays paused, the step does not
// start) and starts on Resume; a timeout that passes while paused is
// parked the same way; a run resumed while still waiting waits on.
func TestPauseWaitingRun(t *testing.T) {
	log := &stepLog{}
	q, hook, rt, client := signalSetup(t, wakeRunner(log, []string{"go"}, []time.Duration{0}))
	startRun(t, rt)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "pw"})
	waitStatus(t, rt, "pw", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if err := client.Pause(ctx, "pw"); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status(ctx, "pw"); st.State != runtime.StatePaused || st.WaitingFor != "go" {
		t.Fatalf("paused waiting run %+v", st)
	}
	// Resume while still waiting: waiting again. Then pause again.
	if err := client.Resume(ctx, "pw"); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status(ctx, "pw"); st.State != runtime.StateWaiting {
		t.Fatalf("resumed waiting run %+v", st)
	}
	if err := client.Pause(ctx, "pw"); err != nil {
		t.Fatal(err)
	}
	if err := client.Signal(ctx, "pw", "go", []byte("while paused")); err != nil {
		t.Fatal(err)
	}
	st, _ := rt.Status(ctx, "pw")
	if st.State != runtime.StatePaused || st.WaitingFor != "" || len(mailbox(t, q, "pw")) != 0 {
		t.Fatalf("signalled paused run %+v (mailbox %q)", st, mailbox(t, q, "pw"))
	}
	whenIdle(t, q, "a paused run's woken step started", func() bool { return len(log.of("pw")) == 1 })
	if err := client.Resume(ctx, "pw"); err != nil {
		t.Fatal(err)
	}
	if o := hook.wait(t, "pw"); string(o.Result) != "go=while paused" {
		t.Fatalf("result %q", o.Result)
	}

	// The timeout passes while the run is paused.
	log2 := &stepLog{}
	_, hook2, rt2, _ := signalSetup(t, wakeRunner(log2, []string{"go"}, []time.Duration{100 * time.Millisecond}))
	mustSubmit(t, rt2, runtime.RunSpec{RunID: "pt"})
	startRun(t, rt2)
	waitStatus(t, rt2, "pt", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if err := rt2.Pause(ctx, "pt"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, rt2, "pt", "the timeout parked", func(s runtime.RunStatus) bool {
		return s.State == runtime.StatePaused && s.WaitingFor == ""
	})
	if n := len(log2.of("pt")); n != 1 {
		t.Fatalf("%d steps ran while paused", n)
	}
	if err := rt2.Signal(ctx, "pt", "go", []byte("too late")); err != nil { // loses: kept in the mailbox
		t.Fatal(err)
	}
	if err := rt2.Resume(ctx, "pt"); err != nil {
		t.Fatal(err)
	}
	if o := hook2.wait(t, "pt"); string(o.Result) != "go=timeout" {
		t.Fatalf("result %q", o.Result)
	}
}

// TestCancelPausedRun: Cancel of a paused run with a parked step ends it
// at once (Cancelled, hook called), deletes the parked step, and keeps
// its payload for Retry, which runs it.
func TestCancelPausedRun(t *testing.T) {
	log := &stepLog{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.Number == 0 {
			return steprunner.ContinueAfter([]byte("parked"), time.Hour), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	startRun(t, rt)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "cp"})
	waitStatus(t, rt, "cp", "step 1 scheduled", func(s runtime.RunStatus) bool { return s.CurrentStep == 1 && s.Scheduled })
	if err := rt.Pause(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	if ok, err := rt.Cancel(ctx, "cp"); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	if o := hook.wait(t, "cp"); o.Status != terminal.Cancelled || o.FinalStep != 1 {
		t.Fatalf("hook %+v", o)
	}
	if _, err := q.Get(ctx, runrec.ParkedKey("cp")); !errors.Is(err, queue.ErrKeyNotFound) {
		t.Fatalf("parked step after cancel: %v", err)
	}
	if err := rt.Retry(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the retried run to end", func() bool { return len(hook.outcomes("cp")) == 2 })
	if o := hook.outcomes("cp")[1]; o.Status != terminal.Succeeded || string(o.Result) != "parked" {
		t.Fatalf("retried run %+v", o)
	}
}

// TestExpiryDeletesMailbox: signals left in an ended run's mailbox are
// deleted with its record when the retention passes.
func TestExpiryDeletesMailbox(t *testing.T) {
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), nil, runtime.WithTerminalRetention(50*time.Millisecond))
	client := newRuntime(t, q, nil, nil)
	ctx := context.Background()
	mustSubmit(t, client, runtime.RunSpec{RunID: "ex"})
	for i := range 3 {
		if err := client.Signal(ctx, "ex", fmt.Sprint("s", i), []byte("left")); err != nil {
			t.Fatal(err)
		}
	}
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "the run to expire", func() bool {
		_, err := rt.Status(ctx, "ex")
		return errors.Is(err, runtime.ErrRunNotFound)
	})
	if m := mailbox(t, q, "ex"); len(m) != 0 {
		t.Fatalf("mailbox after expiry: %q", m)
	}
}

// TestPauseParksRetry: a step that fails while its run is paused is not
// retried until Resume: its retry is parked when it comes due. Fails if
// a claimed step of a paused run runs.
func TestPauseParksRetry(t *testing.T) {
	release := make(chan struct{})
	log := &stepLog{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.Attempt == 1 {
			<-release
			return steprunner.Outcome{}, errors.New("transient")
		}
		return steprunner.Succeed(s.Payload), nil
	})
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	startRun(t, rt)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "pr", Input: []byte("in"), MaxAttemptsPerStep: 5})
	waitStatus(t, rt, "pr", "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
	if err := rt.Pause(ctx, "pr"); err != nil {
		t.Fatal(err)
	}
	close(release)
	testenv.Eventually(t, waitTimeout, "the retry to be parked", func() bool {
		_, err := q.Get(ctx, runrec.ParkedKey("pr"))
		return err == nil
	})
	if n := len(log.of("pr")); n != 1 {
		t.Fatalf("%d attempts ran while paused", n)
	}
	if err := rt.Resume(ctx, "pr"); err != nil {
		t.Fatal(err)
	}
	if o := hook.wait(t, "pr"); o.Status != terminal.Succeeded || string(o.Result) != "in" {
		t.Fatalf("outcome %+v", o)
	}
}
