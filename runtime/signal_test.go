package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// signalSetup opens a memory store with a Runtime running runner and a
// client Runtime on the same store.
func signalSetup(t *testing.T, runner steprunner.Runner) (*queue.Queue, *hookRecorder, *runtime.Runtime, *runtime.Runtime) {
	t.Helper()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	client := newRuntime(t, q, nil, nil)
	return q, hook, rt, client
}

// wakeRunner: step n awaits the signal named names[n] (timeouts[n]), and
// records what woke each step; after len(names) awaits the run succeeds
// with "name=payload" or "name=timeout" per step, joined by ",".
func wakeRunner(log *stepLog, names []string, timeouts []time.Duration) steprunner.RunnerFunc {
	return func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		n := int(s.Number)
		if n < len(names) {
			return steprunner.AwaitSignal(names[n], timeouts[n]), nil
		}
		var parts []string
		for _, st := range log.of(s.RunID) {
			switch {
			case st.Signal == nil:
			case st.Signal.TimedOut:
				parts = append(parts, st.Signal.Name+"=timeout")
			default:
				parts = append(parts, st.Signal.Name+"="+string(st.Payload))
			}
		}
		return steprunner.Succeed([]byte(strings.Join(parts, ","))), nil
	}
}

func mailbox(t *testing.T, q *queue.Queue, runID string) []string {
	t.Helper()
	page, err := q.Scan(context.Background(), runrec.MailboxRunPrefix(runID), queue.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range page.Items {
		out = append(out, string(kv.Value))
	}
	return out
}

// TestSignalBeforeAwait: signals sent before the run awaits them (here,
// before any Runtime runs its steps) wait in the mailbox, and two awaits
// of one name consume two signals in arrival order, ignoring a signal of
// another name. Fails if a signal sent early is lost or consumed out of
// order, or if a signal wakes an await of another name.
func TestSignalBeforeAwait(t *testing.T) {
	log := &stepLog{}
	q, hook, rt, client := signalSetup(t, wakeRunner(log, []string{"go", "go"}, []time.Duration{0, 0}))
	ctx := context.Background()
	mustSubmit(t, client, runtime.RunSpec{RunID: "early", Input: []byte("in")})
	for _, s := range []struct{ name, payload string }{{"go", "first"}, {"other", "x"}, {"go", "second"}} {
		if err := client.Signal(ctx, "early", s.name, []byte(s.payload)); err != nil {
			t.Fatalf("Signal(%s): %v", s.name, err)
		}
	}
	if got := mailbox(t, q, "early"); strings.Join(got, ",") != "first,second,x" { // by name, then arrival
		t.Fatalf("mailbox before Run = %q", got)
	}
	startRun(t, rt)
	o := hook.wait(t, "early")
	if o.Status != terminal.Succeeded || string(o.Result) != "go=first,go=second" {
		t.Fatalf("outcome %+v (result %q), want go=first,go=second", o, o.Result)
	}
	if got := mailbox(t, q, "early"); len(got) != 1 || got[0] != "x" {
		t.Fatalf("mailbox after the run = %q, want only the unconsumed signal", got)
	}
}

// TestSignalWakesWaitingRun: a waiting run shows StateWaiting with the
// awaited name and deadline, holds no step job, and a Signal starts its
// next step with the payload. Then Signal of the ended run is
// ErrRunEnded.
func TestSignalWakesWaitingRun(t *testing.T) {
	log := &stepLog{}
	q, hook, rt, _ := signalSetup(t, wakeRunner(log, []string{"approve"}, []time.Duration{time.Hour}))
	startRun(t, rt)
	ctx := context.Background()
	before := time.Now()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "w1"})
	st := waitStatus(t, rt, "w1", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if st.WaitingFor != "approve" || st.CurrentStep != 1 || st.WaitDeadline.Before(before.Add(time.Hour)) ||
		st.WaitDeadline.After(time.Now().Add(time.Hour)) {
		t.Fatalf("waiting status %+v", st)
	}
	if s := mustStats(t, q, stepsQueue); s.Pending+s.Scheduled+s.Claimed != 0 {
		t.Fatalf("a waiting run holds a step job: %+v", s)
	}
	if s := mustStats(t, q, stepsQueue+".timers"); s.Scheduled != 1 {
		t.Fatalf("timer queue %+v, want one scheduled timeout", s)
	}
	if err := rt.Signal(ctx, "w1", "approve", []byte("yes")); err != nil {
		t.Fatal(err)
	}
	o := hook.wait(t, "w1")
	if string(o.Result) != "approve=yes" {
		t.Fatalf("result %q", o.Result)
	}
	steps := log.of("w1")
	if len(steps) != 2 || steps[1].Signal == nil || steps[1].Signal.TimedOut || string(steps[1].Payload) != "yes" || steps[0].Signal != nil {
		t.Fatalf("steps %+v", steps)
	}
	testenv.Eventually(t, waitTimeout, "the losing timeout to be dropped", func() bool {
		s := mustStats(t, q, stepsQueue+".timers")
		return s.Pending+s.Scheduled+s.Claimed == 0
	})
	if err := rt.Signal(ctx, "w1", "approve", nil); !errors.Is(err, runtime.ErrRunEnded) {
		t.Fatalf("Signal of an ended run = %v, want ErrRunEnded", err)
	}
}

// TestAwaitTimeout: an await whose timeout passes starts the next step
// with an empty payload and TimedOut; a signal sent after that stays in
// the mailbox and is consumed by the next await of that name at once.
func TestAwaitTimeout(t *testing.T) {
	log := &stepLog{}
	_, hook, rt, _ := signalSetup(t, wakeRunner(log, []string{"s", "s"}, []time.Duration{20 * time.Millisecond, 0}))
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "to"})
	testenv.Eventually(t, waitTimeout, "step 1 to run", func() bool { return len(log.of("to")) >= 2 })
	// Step 1 timed out; the run now awaits "s" again, without a timeout.
	if err := rt.Signal(context.Background(), "to", "s", []byte("late")); err != nil {
		t.Fatal(err)
	}
	o := hook.wait(t, "to")
	if string(o.Result) != "s=timeout,s=late" {
		t.Fatalf("result %q", o.Result)
	}
	if s := log.of("to")[1]; len(s.Payload) != 0 || !s.Signal.TimedOut {
		t.Fatalf("timed-out step %+v", s)
	}
}

// TestTimeoutRacesSignal: many runs whose await times out while a signal
// is sent: in each exactly one wins. If the signal won, step 1 has it; if
// the timeout won, the signal stays in the mailbox and the run's second
// await (made only after a timeout) consumes it. Either way the signal is
// delivered exactly once, no timer is left, and the mailbox ends empty.
func TestTimeoutRacesSignal(t *testing.T) {
	const runs = 40
	log := &stepLog{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		switch {
		case s.Number == 0:
			return steprunner.AwaitSignal("race", time.Duration(len(s.Payload))*time.Millisecond), nil
		case s.Signal != nil && s.Signal.TimedOut:
			return steprunner.AwaitSignal("race", 0), nil
		}
		return steprunner.Succeed(fmt.Appendf(nil, "%d:%s", s.Number, s.Payload)), nil
	})
	q, hook, rt, _ := signalSetup(t, runner)
	startRun(t, rt)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range runs {
		id := fmt.Sprintf("race-%d", i)
		mustSubmit(t, rt, runtime.RunSpec{RunID: id, Input: make([]byte, i%5)}) // timeouts 0..4 ms
		wg.Go(func() {
			waitStatus(t, rt, id, "waiting or past it", func(s runtime.RunStatus) bool { return s.CurrentStep >= 1 })
			if err := rt.Signal(ctx, id, "race", []byte("sig")); err != nil {
				t.Errorf("Signal(%s): %v", id, err)
			}
		})
	}
	wg.Wait()
	won := map[string]int{}
	for i := range runs {
		id := fmt.Sprintf("race-%d", i)
		o := hook.wait(t, id)
		switch string(o.Result) {
		case "1:sig":
			won["signal"]++
		case "2:sig":
			won["timeout"]++
		default:
			t.Errorf("run %s: result %q", id, o.Result)
		}
		if m := mailbox(t, q, id); len(m) != 0 {
			t.Errorf("run %s: mailbox %q left", id, m)
		}
	}
	t.Logf("winners: %v", won)
	testenv.Eventually(t, waitTimeout, "no timer left", func() bool {
		s := mustStats(t, q, stepsQueue+".timers")
		return s.Pending+s.Scheduled+s.Claimed == 0
	})
}

// TestCancelWaitingRun: Cancel of a waiting run ends it at once
// (Cancelled, hook called) and removes its timeout job.
func TestCancelWaitingRun(t *testing.T) {
	log := &stepLog{}
	q, hook, rt, client := signalSetup(t, wakeRunner(log, []string{"x"}, []time.Duration{time.Hour}))
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "cw"})
	waitStatus(t, rt, "cw", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if ok, err := client.Cancel(context.Background(), "cw"); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	if st, _ := rt.Status(context.Background(), "cw"); st.State != runtime.StateCancelled || st.WaitingFor != "" {
		t.Fatalf("status after Cancel %+v", st)
	}
	if o := hook.wait(t, "cw"); o.Status != terminal.Cancelled {
		t.Fatalf("hook %+v", o)
	}
	if s := mustStats(t, q, stepsQueue+".timers"); s.Pending+s.Scheduled+s.Claimed != 0 {
		t.Fatalf("timer left after cancel: %+v", s)
	}
}

// TestSignalBadInput: each bad call is refused with its typed error and
// changes nothing (run record and mailbox as they were).
func TestSignalBadInput(t *testing.T) {
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil, runtime.WithMaxSignalPayload(8))
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "b1"})
	before, _ := q.Get(ctx, kvrecord.RunKey("b1"))
	var tooLarge *runtime.SignalTooLargeError
	for _, c := range []struct {
		run, name string
		payload   []byte
		want      error
	}{
		{"nope", "s", nil, runtime.ErrRunNotFound},
		{"", "s", nil, runtime.ErrInvalidRunID},
		{"b1", "", nil, runtime.ErrInvalidSignalName},
		{"b1", " s", nil, runtime.ErrInvalidSignalName},
		{"b1", "a/b", nil, runtime.ErrInvalidSignalName},
		{"b1", "s\x01", nil, runtime.ErrInvalidSignalName},
		{"b1", strings.Repeat("s", 129), nil, runtime.ErrInvalidSignalName},
		{"b1", "s", make([]byte, 9), runtime.ErrSignalTooLarge},
	} {
		err := rt.Signal(ctx, c.run, c.name, c.payload)
		if !errors.Is(err, c.want) {
			t.Errorf("Signal(%q, %q, %d bytes) = %v, want %v", c.run, c.name, len(c.payload), err, c.want)
		}
	}
	if err := rt.Signal(ctx, "b1", "s", make([]byte, 9)); !errors.As(err, &tooLarge) || tooLarge.Size != 9 || tooLarge.Max != 8 {
		t.Errorf("oversized: %v", err)
	}
	after, _ := q.Get(ctx, kvrecord.RunKey("b1"))
	if string(before) != string(after) || len(mailbox(t, q, "b1")) != 0 {
		t.Fatalf("a refused Signal changed the run record or the mailbox")
	}
	// Ended run: ErrRunEnded, nothing added.
	if ok, err := rt.Cancel(ctx, "b1"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := rt.Signal(ctx, "b1", "s", nil); !errors.Is(err, runtime.ErrRunEnded) {
		t.Fatalf("Signal of a cancelled run = %v", err)
	}
	for _, f := range []func(context.Context, string) error{rt.Pause, rt.Resume} {
		if err := f(ctx, "b1"); !errors.Is(err, runtime.ErrRunEnded) {
			t.Errorf("Pause/Resume of a cancelled run = %v, want ErrRunEnded", err)
		}
		if err := f(ctx, "nope"); !errors.Is(err, runtime.ErrRunNotFound) {
			t.Errorf("Pause/Resume of an unknown run = %v, want ErrRunNotFound", err)
		}
	}
	if len(mailbox(t, q, "b1")) != 0 {
		t.Fatal("a signal of an ended run was kept")
	}
}

// TestAwaitInvalidNameFailsRun: an await on an invalid name fails the run
// at once, saying why.
func TestAwaitInvalidNameFailsRun(t *testing.T) {
	log := &stepLog{}
	_, hook, rt, _ := signalSetup(t, wakeRunner(log, []string{"bad/name"}, []time.Duration{0}))
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "inv"})
	o := hook.wait(t, "inv")
	if o.Status != terminal.Failed || !strings.Contains(o.Error, "invalid signal name") {
		t.Fatalf("outcome %+v", o)
	}
}

// TestLargeSignal: a signal payload large enough to be stored as its own
// object reaches the step intact, from the mailbox and from a direct
// wake-up alike.
func TestLargeSignal(t *testing.T) {
	log := &stepLog{}
	_, hook, rt, client := signalSetup(t, wakeRunner(log, []string{"big", "big"}, []time.Duration{0, 0}))
	ctx := context.Background()
	big := make([]byte, 700<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	mustSubmit(t, client, runtime.RunSpec{RunID: "large"})
	if err := client.Signal(ctx, "large", "big", big); err != nil { // to the mailbox
		t.Fatal(err)
	}
	startRun(t, rt)
	waitStatus(t, rt, "large", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if err := client.Signal(ctx, "large", "big", big[1:]); err != nil { // wakes it
		t.Fatal(err)
	}
	if o := hook.wait(t, "large"); o.Status != terminal.Succeeded {
		t.Fatalf("outcome %+v", o)
	}
	steps := log.of("large")
	if len(steps) != 3 || !bytes.Equal(steps[1].Payload, big) || !bytes.Equal(steps[2].Payload, big[1:]) {
		t.Fatalf("large payloads did not arrive intact (%d steps)", len(steps))
	}
}
