package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

func TestSubmitDuplicateSameInput(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, chainRunner(&log, 1), hook)
	spec := runtime.RunSpec{RunID: "dup", Input: []byte("same")}
	if out := mustSubmit(t, rt, spec); !out.NewlySubmitted || out.RunID != "dup" {
		t.Fatalf("first Submit = %+v", out)
	}
	txns := q.StorageStats().Transactions
	// The same spec again is a no-op; an empty header map is no headers.
	spec2 := spec
	spec2.Headers = map[string]string{}
	for i, s := range []runtime.RunSpec{spec, spec2} {
		if out := mustSubmit(t, rt, s); out.NewlySubmitted || out.RunID != "dup" {
			t.Errorf("duplicate Submit %d = %+v, want not newly submitted", i, out)
		}
	}
	// The same input with other headers, priority or attempt limit is not
	// silently taken for the run submitted: ErrSpecMismatch.
	for name, mod := range map[string]func(*runtime.RunSpec){
		"headers":  func(s *runtime.RunSpec) { s.Headers = map[string]string{"other": "headers"} },
		"priority": func(s *runtime.RunSpec) { s.Priority = 5 },
		"attempts": func(s *runtime.RunSpec) { s.MaxAttemptsPerStep = 9 },
	} {
		other := spec
		mod(&other)
		_, err := rt.Submit(context.Background(), other)
		if !errors.Is(err, runtime.ErrSpecMismatch) || errors.Is(err, runtime.ErrInputMismatch) {
			t.Errorf("re-Submit with other %s: %v, want ErrSpecMismatch", name, err)
		}
	}
	if got := q.StorageStats().Transactions; got != txns {
		t.Errorf("duplicate Submits committed %d transactions, want 0", got-txns)
	}
	if s := mustStats(t, q, stepsQueue); s.Pending != 1 {
		t.Errorf("step queue = %+v, want exactly one pending step", s)
	}
	startRun(t, rt)
	hook.wait(t, "dup")
	// Also a no-op while the run is terminal (within the retention).
	if out := mustSubmit(t, rt, spec); out.NewlySubmitted {
		t.Errorf("Submit after the end = %+v, want not newly submitted", out)
	}
	whenIdle(t, q, "a duplicate Submit started a second run", func() bool {
		return len(log.of("dup")) == 2 && len(hook.outcomes("dup")) == 1
	})
}

func TestSubmitDifferentInputIsMismatch(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, succeedRunner(nil), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "mm", Input: []byte("one")})
	for _, in := range [][]byte{[]byte("two"), nil, []byte("one ")} {
		if _, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: "mm", Input: in}); !errors.Is(err, runtime.ErrInputMismatch) {
			t.Errorf("Submit with input %q while active: %v, want ErrInputMismatch", in, err)
		}
	}
	startRun(t, rt)
	hook.wait(t, "mm")
	if _, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: "mm", Input: []byte("two")}); !errors.Is(err, runtime.ErrInputMismatch) {
		t.Errorf("Submit with another input after the end: %v, want ErrInputMismatch", err)
	}
	// nil and empty inputs are the same input.
	mustSubmit(t, rt, runtime.RunSpec{RunID: "empty", Input: nil})
	if out, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: "empty", Input: []byte{}}); err != nil || out.NewlySubmitted {
		t.Errorf("Submit of []byte{} after nil = %+v, %v; want a duplicate", out, err)
	}
}

func TestSubmitIdempotentAcrossRestart(t *testing.T) {
	t.Parallel()
	url := fileURL(t)
	ctx := context.Background()
	q1, err := openStore(t, url)
	if err != nil {
		t.Fatal(err)
	}
	rt1 := newRuntime(t, q1, succeedRunner(nil), terminal.Noop)
	mustSubmit(t, rt1, runtime.RunSpec{RunID: "persist", Input: []byte("in")})
	if err := q1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	q2 := openQueue(t, url)
	var log stepLog
	hook := &hookRecorder{}
	rt2 := newRuntime(t, q2, succeedRunner(&log), hook)
	if out := mustSubmit(t, rt2, runtime.RunSpec{RunID: "persist", Input: []byte("in")}); out.NewlySubmitted {
		t.Errorf("Submit after restart = %+v, want a duplicate", out)
	}
	if _, err := rt2.Submit(ctx, runtime.RunSpec{RunID: "persist", Input: []byte("other")}); !errors.Is(err, runtime.ErrInputMismatch) {
		t.Errorf("Submit with another input after restart: %v, want ErrInputMismatch", err)
	}
	startRun(t, rt2)
	if o := hook.wait(t, "persist"); o.Status != terminal.Succeeded || string(o.Result) != "in|0" {
		t.Errorf("outcome = %+v", o)
	}
	whenIdle(t, q2, "the run executed twice", func() bool { return len(log.of("persist")) == 1 })
}

func TestConcurrentSubmitsSameRunID(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, succeedRunner(&log), hook)
	startRun(t, rt)
	const n = 64
	var newly atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: "racy", Input: []byte("x")})
			if err != nil {
				errs <- err
				return
			}
			if out.RunID != "racy" {
				errs <- errors.New("wrong run ID " + out.RunID)
			}
			if out.NewlySubmitted {
				newly.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Submit: %v", err)
	}
	if got := newly.Load(); got != 1 {
		t.Errorf("%d Submits reported NewlySubmitted, want exactly 1", got)
	}
	hook.wait(t, "racy")
	whenIdle(t, q, "more than one run executed", func() bool {
		return len(hook.outcomes("racy")) == 1 && len(log.of("racy")) == 1
	})
}

func TestSubmitAfterRetentionReusesRunID(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	retention := 300 * time.Millisecond
	if memberMode() {
		// Each check below is a call to the writer process: beside two
		// busy loops, the run expired before the checks ran.
		retention = 2 * time.Second
	}
	rt := newRuntime(t, q, succeedRunner(&log), hook, runtime.WithTerminalRetention(retention))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "reuse", Input: []byte("first")})
	startRun(t, rt)
	first := hook.wait(t, "reuse")

	// Within the retention: a no-op (same input), a mismatch (other input).
	if out := mustSubmit(t, rt, runtime.RunSpec{RunID: "reuse", Input: []byte("first")}); out.NewlySubmitted {
		t.Errorf("Submit within the retention = %+v, want a duplicate", out)
	}
	if _, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: "reuse", Input: []byte("second")}); !errors.Is(err, runtime.ErrInputMismatch) {
		t.Errorf("Submit with another input within the retention: %v, want ErrInputMismatch", err)
	}
	if st, err := rt.Status(context.Background(), "reuse"); err != nil || st.State != runtime.StateSucceeded {
		t.Errorf("Status within the retention = %+v, %v", st, err)
	}

	// The janitor forgets the run after the retention.
	testenv.Eventually(t, waitTimeout, "the janitor to expire the run", func() bool {
		_, err := rt.Status(context.Background(), "reuse")
		return errors.Is(err, runtime.ErrRunNotFound)
	})
	if since := time.Since(first.EndedAt); since < retention {
		t.Errorf("the run was forgotten %v after it ended, before the retention %v", since, retention)
	}
	if ok, err := rt.Cancel(context.Background(), "reuse"); ok || err != nil {
		t.Errorf("Cancel of an expired run = %v, %v; want false", ok, err)
	}
	// Now the ID is free, for any input.
	out := mustSubmit(t, rt, runtime.RunSpec{RunID: "reuse", Input: []byte("second")})
	if !out.NewlySubmitted {
		t.Fatalf("Submit after the retention = %+v, want newly submitted", out)
	}
	testenv.Eventually(t, waitTimeout, "the second run's hook", func() bool { return len(hook.outcomes("reuse")) == 2 })
	second := hook.outcomes("reuse")[1]
	if string(first.Result) != "first|0" || string(second.Result) != "second|0" || !second.EndedAt.After(first.EndedAt) {
		t.Errorf("outcomes = %+v then %+v", first, second)
	}
	if n := len(log.of("reuse")); n != 2 {
		t.Errorf("steps = %d, want 2 (one per run)", n)
	}
}

func TestInvalidRunIDs(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), terminal.Noop)
	for name, id := range map[string]string{
		"space":          " ",
		"whitespace":     " \t\n ",
		"129 bytes":      strings.Repeat("a", 129),
		"control byte":   "run\x01",
		"newline":        "run\n1",
		"DEL":            "run\x7f",
		"non-ASCII":      "rün",
		"slash":          "a/b",
		"leading slash":  "/a",
		"NUL":            "a\x00b",
		"129 with slash": strings.Repeat("/", 129),
		"leading space":  " padded",
		"trailing space": "padded ",
		"both":           " padded ",
	} {
		before := q.StorageStats()
		_, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: id, Input: []byte("x")})
		if !errors.Is(err, runtime.ErrInvalidRunID) {
			t.Errorf("%s (%q): %v, want ErrInvalidRunID", name, id, err)
		}
		if err := runtime.ValidateRunID(id); !errors.Is(err, runtime.ErrInvalidRunID) {
			t.Errorf("ValidateRunID(%s): %v", name, err)
		}
		// Every call that takes a run ID says so, rather than "not
		// found" (Status, Wait) or nothing (Cancel).
		if ok, err := rt.Cancel(context.Background(), id); ok || !errors.Is(err, runtime.ErrInvalidRunID) {
			t.Errorf("Cancel(%s) = %v, %v; want ErrInvalidRunID", name, ok, err)
		}
		if _, err := rt.Status(context.Background(), id); !errors.Is(err, runtime.ErrInvalidRunID) {
			t.Errorf("Status(%s) = %v; want ErrInvalidRunID", name, err)
		}
		if _, err := rt.Wait(context.Background(), id); !errors.Is(err, runtime.ErrInvalidRunID) {
			t.Errorf("Wait(%s) = %v; want ErrInvalidRunID", name, err)
		}
		if after := q.StorageStats(); after.Transactions != before.Transactions || after.Puts != before.Puts {
			t.Errorf("%s: Submit wrote: %d transactions, %d puts", name, after.Transactions-before.Transactions, after.Puts-before.Puts)
		}
	}
	for _, id := range []string{strings.Repeat("z", 128), "a b", "~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',."} {
		if out, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: id}); err != nil || !out.NewlySubmitted || out.RunID != id {
			t.Errorf("valid ID %q: %+v, %v", id, out, err)
		}
		if _, err := rt.Status(context.Background(), id); err != nil {
			t.Errorf("Status(%q): %v", id, err)
		}
	}
	if s := mustStats(t, q, stepsQueue); s.Pending != 3 {
		t.Errorf("step queue = %+v, want the 3 valid runs pending", s)
	}
}

func TestReservedHeaderRejected(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), terminal.Noop)
	for _, key := range []string{"workflow.run_id", "workflow.step", "workflow.", "workflow.anything"} {
		before := q.StorageStats().Transactions
		_, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: "hdr", Headers: map[string]string{"ok": "1", key: "x"}})
		if !errors.Is(err, runtime.ErrReservedHeader) {
			t.Errorf("header %q: %v, want ErrReservedHeader", key, err)
		}
		if after := q.StorageStats().Transactions; after != before {
			t.Errorf("header %q: Submit committed %d transactions", key, after-before)
		}
	}
	if _, err := rt.Status(context.Background(), "hdr"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Errorf("Status after rejected submits: %v, want ErrRunNotFound", err)
	}
}

// TestHeadersLeaveRoomForReserved: a run's headers must leave room for
// the reserved headers its step jobs carry at their largest (419 bytes:
// RunSpec.Headers): with exactly that room, a run with the longest run ID
// goes past step 9 (a two-digit step number) and is woken by a signal of
// the longest name; a byte more is a *queue.TooLargeError at Submit, which
// writes nothing. (Before, Submit took headers that fit step 0 only, and
// the run failed at step 9 or could not be signalled.)
func TestHeadersLeaveRoomForReserved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	signal := strings.Repeat("s", runtime.MaxSignalNameLen)
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.Number < 11:
			return steprunner.Continue(nil), nil
		case s.Number == 11:
			return steprunner.AwaitSignal(signal, 0), nil
		}
		return steprunner.Succeed(nil), nil
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	room := queue.MaxHeaderBytes - 419
	over := map[string]string{"h": strings.Repeat("x", room)} // room + 1 bytes
	before := q.StorageStats().Transactions
	var tooLarge *queue.TooLargeError
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "over", Headers: over}); !errors.As(err, &tooLarge) {
		t.Fatalf("Submit with a byte too many = %v, want a *queue.TooLargeError", err)
	}
	if after := q.StorageStats().Transactions; after != before {
		t.Errorf("the refused Submit committed %d transactions", after-before)
	}
	id := strings.Repeat("r", runtime.MaxRunIDLen)
	fits := map[string]string{"h": strings.Repeat("x", room-1)}
	mustSubmit(t, rt, runtime.RunSpec{RunID: id, Headers: fits})
	startRun(t, rt)
	waitStatus(t, rt, id, "the run to wait for its signal", func(st runtime.RunStatus) bool { return st.State == runtime.StateWaiting })
	if err := rt.Signal(ctx, id, signal, nil); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if o := hook.wait(t, id); o.Status != terminal.Succeeded || o.FinalStep != 12 {
		t.Errorf("outcome %+v, want succeeded at step 12", o)
	}
}

func TestEmptyRunIDGeneratesULID(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	rt := newRuntime(t, q, succeedRunner(&log), terminal.Noop)
	a := mustSubmit(t, rt, runtime.RunSpec{Input: []byte("same")})
	b := mustSubmit(t, rt, runtime.RunSpec{Input: []byte("same")})
	for _, out := range []runtime.SubmitOutcome{a, b} {
		if !out.NewlySubmitted || !isULID(out.RunID) {
			t.Errorf("Submit without ID = %+v, want a new run with a ULID", out)
		}
	}
	if a.RunID == b.RunID {
		t.Errorf("two Submits without ID got the same ID %s", a.RunID)
	}
	startRun(t, rt)
	for _, id := range []string{a.RunID, b.RunID} {
		if st := waitTerminal(t, rt, id); st.State != runtime.StateSucceeded {
			t.Errorf("run %s: %+v", id, st)
		}
		if steps := log.of(id); len(steps) != 1 || steps[0].RunID != id {
			t.Errorf("run %s: steps %+v", id, steps)
		}
	}
}

// isULID reports whether s looks like a ULID: 26 characters of Crockford's
// base32, first one at most 7.
func isULID(s string) bool {
	if len(s) != 26 || s[0] > '7' {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", c) {
			return false
		}
	}
	return true
}

// Submit only records the run and queues its first step: without Run,
// nothing executes it. In a synctest bubble, a second passes (a hundred
// poll intervals) for whatever New or Submit might have started, and
// synctest.Wait lets it run to a standstill, before the check. The store
// is a plain mem:// one in every store mode: a cluster member's network
// calls would never stand still.
func TestSubmitWithoutRunDoesNotExecute(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q, err := queue.Open(ctx, testenv.MemURL(t.Name()), fastQueueOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close(ctx)
		var calls atomic.Int32
		rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
			calls.Add(1)
			return steprunner.Succeed(nil), nil
		}), terminal.Noop)
		mustSubmit(t, rt, runtime.RunSpec{RunID: "idle"})
		time.Sleep(time.Second)
		synctest.Wait()
		if n := calls.Load(); n != 0 {
			t.Fatalf("a step ran %d times without Run", n)
		}
		if s := mustStats(t, q, stepsQueue); s.Pending != 1 || s.Claimed != 0 {
			t.Errorf("step queue = %+v, want the first step pending, unclaimed", s)
		}
		st, err := rt.Status(ctx, "idle")
		if err != nil || st.State != runtime.StatePending || st.State.Terminal() || st.State.String() != "pending" {
			t.Errorf("Status = %+v, %v", st, err)
		}
	})
}
