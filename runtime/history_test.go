package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// history returns the run's history, failing the test on error.
func history(t testing.TB, rt *runtime.Runtime, runID string) []runtime.HistoryEntry {
	t.Helper()
	h, err := rt.History(context.Background(), runID)
	if err != nil {
		t.Fatalf("History(%q): %v", runID, err)
	}
	return h
}

// kinds returns the kinds of h, as "kind@step/attempt" words.
func kinds(h []runtime.HistoryEntry) string {
	var w []string
	for _, e := range h {
		w = append(w, fmt.Sprintf("%s@%d/%d", e.Kind, e.Step, e.Attempt))
	}
	return strings.Join(w, " ")
}

// checkKinds fails t unless the run's history reads want (see kinds), and
// its entries are numbered from first without gaps.
func checkKinds(t testing.TB, h []runtime.HistoryEntry, first uint64, want string) {
	t.Helper()
	if got := kinds(h); got != want {
		t.Fatalf("history:\n got  %s\n want %s", got, want)
	}
	for i, e := range h {
		if e.Seq != first+uint64(i) {
			t.Fatalf("entry %d has Seq %d, want %d", i, e.Seq, first+uint64(i))
		}
		if e.Worker == "" && e.Kind != runtime.HistorySubmitted || e.End.IsZero() || e.Start.After(e.End) {
			t.Fatalf("entry %d: worker %q, start %v, end %v", i, e.Worker, e.Start, e.End)
		}
	}
}

// TestHistoryChain: a run of three steps records its submission and each
// step's attempt, with sizes and previews of what the steps returned.
func TestHistoryChain(t *testing.T) {
	_, _, _, rt := chainSetup(t, 2, runtime.WithWorkerName("w-1"))
	if _, err := rt.History(context.Background(), "nope"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("History(unknown) = %v, want ErrRunNotFound", err)
	}
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "h1", Input: []byte("in")})
	h := waitKinds(t, rt, "h1", "submitted@0/0 continue@0/1 continue@1/1 succeed@2/1 hook_delivered@2/1")
	if st, err := rt.Status(context.Background(), "h1"); err != nil || !h[0].End.Equal(st.SubmittedAt) {
		t.Fatalf("submitted entry %+v, status %+v, %v", h[0], st, err)
	}
	if e := h[1]; e.Preview != "in|0" || e.ResultSize != 4 || e.PayloadSize != 2 || e.Worker != "w-1" || e.Job == "" {
		t.Fatalf("step 0 entry %+v", e)
	}
	if e := h[3]; e.Preview != "in|0|1|2" || e.ResultSize != 8 || e.PayloadSize != 6 {
		t.Fatalf("step 2 entry %+v", e)
	}
}

// waitKinds waits until the run's history reads want (see kinds) and
// returns it; entries numbered from 1.
func waitKinds(t testing.TB, rt *runtime.Runtime, runID, want string) []runtime.HistoryEntry {
	t.Helper()
	var h []runtime.HistoryEntry
	ok := false
	defer func() {
		if !ok {
			t.Logf("run %s history: %s", runID, kinds(h))
		}
	}()
	testenv.Eventually(t, waitTimeout, "run "+runID+" history "+want, func() bool {
		var err error
		h, err = rt.History(context.Background(), runID)
		return err == nil && kinds(h) == want
	})
	ok = true
	checkKinds(t, h, 1, want)
	return h
}

// TestHistorySettlementTable: every row of the settlement table (see
// the package documentation) leaves its entry, and so do the run
// controls (signal, pause, resume, cancel, retry) and the hook's
// delivery. Fails if any of them commits without its entry.
func TestHistorySettlementTable(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, memURL())
	var mu sync.Mutex
	release := map[string]chan struct{}{} // "block" runs wait on these
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		kind, _, _ := strings.Cut(s.RunID, "-")
		switch {
		case strings.Contains(s.RunID, ".s0."): // a child of "spawn"
			return steprunner.Succeed([]byte("child")), nil
		case kind == "continue" && s.Number == 0:
			return steprunner.Continue([]byte("next")), nil
		case kind == "delay" && s.Number == 0:
			return steprunner.ContinueAfter([]byte("later"), 20*time.Millisecond), nil
		case (kind == "await" || kind == "pause" || kind == "idlecancel") && s.Number == 0:
			return steprunner.AwaitSignal("go", 0), nil
		case kind == "timeout" && s.Number == 0:
			return steprunner.AwaitSignal("go", 20*time.Millisecond), nil
		case kind == "spawn" && s.Number == 0:
			return steprunner.Spawn([]steprunner.Child{{Input: []byte("a")}, {Input: []byte("b")}}), nil
		case kind == "fail":
			return steprunner.Fail("no luck"), nil
		case kind == "cancel":
			return steprunner.Cancel("changed my mind"), nil
		case kind == "error" && s.Attempt == 1:
			return steprunner.Outcome{}, steprunner.RetryAfter(errors.New("flaky"), time.Millisecond)
		case kind == "panic" && s.Attempt == 1:
			panic("boom")
		case kind == "steptimeout" && s.Attempt == 1:
			<-ctx.Done()
			return steprunner.Outcome{}, ctx.Err()
		case kind == "exhaust":
			return steprunner.Outcome{}, steprunner.RetryAfter(errors.New("always"), time.Millisecond)
		case kind == "permanent":
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("hopeless"))
		case kind == "block":
			mu.Lock()
			ch := release[s.RunID]
			mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
			}
			return steprunner.Outcome{}, ctx.Err()
		case kind == "retry" && s.Attempt == 1 && s.Headers["life"] == "":
			return steprunner.Fail("first life"), nil
		}
		return steprunner.Succeed([]byte("done")), nil
	})
	hook := &hookRecorder{fail: func(o terminal.Outcome, n int) error {
		if strings.HasPrefix(o.RunID, "hookfail-") {
			return &terminal.DeliveryError{Err: errors.New("endpoint says no"), Permanent: true}
		}
		return nil
	}}
	rt := newRuntime(t, q, runner, hook)
	startRun(t, rt)

	const sub = "submitted@0/0 "
	rows := []struct {
		id   string
		spec runtime.RunSpec
		act  func(id string)
		want string
	}{
		{id: "continue-1", want: sub + "continue@0/1 succeed@1/1 hook_delivered@1/1"},
		{id: "delay-1", want: sub + "delay@0/1 succeed@1/1 hook_delivered@1/1"},
		{id: "await-1", act: func(id string) {
			waitStatus(t, rt, id, "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
			if err := rt.Signal(ctx, id, "go", []byte("payload")); err != nil {
				t.Fatal(err)
			}
		}, want: sub + "await@0/1 signal@1/0 succeed@1/1 hook_delivered@1/1"},
		{id: "timeout-1", want: sub + "await@0/1 await_timeout@1/0 succeed@1/1 hook_delivered@1/1"},
		{id: "spawn-1", want: sub + "spawn@0/1 join@1/0 succeed@1/1 hook_delivered@1/1"},
		{id: "succeed-1", want: sub + "succeed@0/1 hook_delivered@0/1"},
		{id: "fail-1", want: sub + "fail@0/1 hook_delivered@0/1"},
		{id: "cancel-1", want: sub + "cancel@0/1 hook_delivered@0/1"},
		{id: "error-1", want: sub + "error@0/1 succeed@0/2 hook_delivered@0/1"},
		{id: "panic-1", want: sub + "panic@0/1 succeed@0/2 hook_delivered@0/1"},
		{id: "steptimeout-1", spec: runtime.RunSpec{StepTimeout: 20 * time.Millisecond},
			want: sub + "timeout@0/1 succeed@0/2 hook_delivered@0/1"},
		{id: "exhaust-1", spec: runtime.RunSpec{MaxAttemptsPerStep: 2},
			want: sub + "error@0/1 error@0/2 hook_delivered@0/1"},
		{id: "permanent-1", want: sub + "error@0/1 hook_delivered@0/1"},
		{id: "pause-1", act: func(id string) {
			waitStatus(t, rt, id, "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
			for _, f := range []func(context.Context, string) error{rt.Pause, rt.Resume} {
				if err := f(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := rt.Signal(ctx, id, "go", nil); err != nil {
				t.Fatal(err)
			}
		}, want: sub + "await@0/1 pause@1/0 resume@1/0 signal@1/0 succeed@1/1 hook_delivered@1/1"},
		{id: "idlecancel-1", act: func(id string) {
			waitStatus(t, rt, id, "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
			if _, err := rt.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, want: sub + "await@0/1 cancel@1/0 hook_delivered@1/1"},
		{id: "block-1", act: func(id string) {
			waitStatus(t, rt, id, "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
			if _, err := rt.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, want: sub + "cancel_requested@0/0 cancel@0/1 hook_delivered@0/1"},
		{id: "retry-1", act: func(id string) {
			hook.wait(t, id)
			waitKinds(t, rt, id, sub+"fail@0/1 hook_delivered@0/1")
			if err := rt.Retry(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, want: sub + "fail@0/1 hook_delivered@0/1 retry@0/0 fail@0/1 hook_delivered@0/1"},
		{id: "hookfail-1", want: sub + "succeed@0/1 hook_failed@0/1"},
	}
	for _, r := range rows {
		mu.Lock()
		release[r.id] = make(chan struct{})
		mu.Unlock()
		r.spec.RunID, r.spec.Input = r.id, []byte("input")
		mustSubmit(t, rt, r.spec)
	}
	for _, r := range rows {
		t.Run(r.id, func(t *testing.T) {
			if r.act != nil {
				r.act(r.id)
			}
			h := waitKinds(t, rt, r.id, r.want)
			for _, e := range h {
				if e.Attempt > 0 && (e.Job == "" || e.Queue == "" || e.Start.IsZero()) {
					t.Errorf("attempt entry without job, queue or start: %+v", e)
				}
			}
		})
	}
}

// TestHistoryBounded: a run of 1,200 entries keeps the newest 1,000 in
// the store, and History reports the 200 older ones as dropped (the first
// entry's Seq is 201). Fails if the history grows without bound.
func TestHistoryBounded(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, memURL())
	// No hook: the submission and 1,199 steps make 1,200 entries.
	rt := newRuntime(t, q, chainRunner(nil, 1198), nil)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "long"})
	waitTerminal(t, rt, "long")
	h := history(t, rt, "long")
	if len(h) != 1000 || h[0].Seq != 201 || h[0].Seq-1 != 200 {
		t.Fatalf("%d entries, first Seq %d; want 1,000 from 201 (200 dropped)", len(h), h[0].Seq)
	}
	want := "continue@199/1" // Seq 1 is the submission, Seq k step k-2
	if got := kinds(h[:1]); got != want {
		t.Fatalf("first kept entry %s, want %s", got, want)
	}
	checkKinds(t, h[len(h)-1:], 1200, "succeed@1198/1")
	n := 0
	var after []byte
	for {
		page, err := q.Scan(ctx, runrec.HistoryRunPrefix("long"), queue.ScanOptions{After: after, Limit: queue.MaxScanLimit})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	if n != 1000 {
		t.Fatalf("%d history keys in the store, want 1,000", n)
	}
}

// TestHistoryLeaseLost: attempts that a dead worker held record as
// lease_lost, written by the step's next committed settlement (or with
// the dead letter of its last attempt), and have no entry of their own.
// Fails if a lost attempt is forgotten or recorded twice.
func TestHistoryLeaseLost(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T) *queue.Queue {
		q, err := openStore(t, shortLeaseURL(t, 40*time.Millisecond), queue.WithLease(40*time.Millisecond),
			queue.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), queue.WithPollInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close(ctx) })
		return q
	}
	// abandon claims the step job as a worker that dies: it never settles
	// or renews; the queue ends the attempt when its lease runs out.
	abandon := func(t *testing.T, q *queue.Queue, attempts int) {
		var j *queue.Job
		testenv.Eventually(t, waitTimeout, "the step to be claimable (its retry due)", func() bool {
			var err error
			if j, err = claimOne(ctx, q, stepsQueue); err != nil {
				t.Fatal(err)
			}
			return j != nil
		})
		testenv.Eventually(t, waitTimeout, "the abandoned attempt's lease to run out", func() bool {
			job, err := q.GetJob(ctx, j.ID)
			return err == nil && len(job.History) == attempts && job.State != queue.JobClaimed
		})
	}
	t.Run("retried", func(t *testing.T) {
		q := open(t)
		rt := newRuntime(t, q, chainRunner(nil, 1), nil)
		mustSubmit(t, rt, runtime.RunSpec{RunID: "lost", MaxAttemptsPerStep: 4})
		abandon(t, q, 1)
		abandon(t, q, 2)
		startRun(t, rt)
		h := waitKinds(t, rt, "lost", "submitted@0/0 lease_lost@0/1 lease_lost@0/2 continue@0/3 succeed@1/1")
		if h[1].Error != "lease expired" {
			t.Fatalf("lease_lost entry %+v", h[1])
		}
	})
	t.Run("dead", func(t *testing.T) {
		q := open(t)
		rt := newRuntime(t, q, succeedRunner(nil), nil)
		mustSubmit(t, rt, runtime.RunSpec{RunID: "dead", MaxAttemptsPerStep: 2})
		abandon(t, q, 1)
		abandon(t, q, 2)
		startRun(t, rt)
		h := waitKinds(t, rt, "dead", "submitted@0/0 lease_lost@0/1 dead@0/2")
		if !strings.Contains(h[2].Error, "lease expired") {
			t.Fatalf("dead entry %+v", h[2])
		}
	})
}

// TestHistoryFromAnyRuntime: a client Runtime (no Runner) reads the
// history that another Runtime on the store wrote, and History refuses
// invalid and unknown run IDs.
func TestHistoryFromAnyRuntime(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, chainRunner(nil, 1), nil, runtime.WithWorkerName("executor"))
	startRun(t, rt)
	client := newRuntime(t, q, nil, nil)
	mustSubmit(t, client, runtime.RunSpec{RunID: "c1"})
	h := waitKinds(t, client, "c1", "submitted@0/0 continue@0/1 succeed@1/1")
	if h[1].Worker != "executor" {
		t.Fatalf("worker %q, want executor", h[1].Worker)
	}
	if other := newRuntime(t, openQueue(t, memURL()), nil, nil); true { // no Runtime runs its steps
		mustSubmit(t, other, runtime.RunSpec{RunID: "c2", MaxAttemptsPerStep: 1})
		if _, err := other.Cancel(ctx, "c2"); err != nil {
			t.Fatal(err)
		}
		// The cancel committed by the client: its default name, host:pid.
		h := waitKinds(t, other, "c2", "submitted@0/0 cancel@0/0")
		if w := h[1].Worker; !strings.HasSuffix(w, fmt.Sprintf(":%d", os.Getpid())) {
			t.Fatalf("the client's worker name %q, want host:pid", w)
		}
	}
	if _, err := client.History(ctx, "bad/id"); !errors.Is(err, runtime.ErrInvalidRunID) {
		t.Fatalf("History(bad/id) = %v, want ErrInvalidRunID", err)
	}
	if _, err := client.History(ctx, "unknown"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("History(unknown) = %v, want ErrRunNotFound", err)
	}
	if _, err := runtime.New(q, nil, nil, runtime.WithWorkerName("")); !errors.Is(err, runtime.ErrInvalidOption) {
		t.Fatalf("WithWorkerName(\"\") = %v, want ErrInvalidOption", err)
	}
}

// TestHistoryInMember: History read through a cluster member, of a run
// that the member executed (each entry written through the writer).
func TestHistoryInMember(t *testing.T) {
	_, rt, _ := memberRuntime(t, chainRunner(nil, 2))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "m1"})
	waitKinds(t, rt, "m1", "submitted@0/0 continue@0/1 continue@1/1 succeed@2/1 hook_delivered@2/1")
}

// TestHistoryDeletedAtExpiry: a run's history goes with its record when
// the terminal retention passes. Fails if entries outlive their run (a
// reused run ID would show them).
func TestHistoryDeletedAtExpiry(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, chainRunner(nil, 3), hook, runtime.WithTerminalRetention(50*time.Millisecond))
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "ex"})
	hook.wait(t, "ex")
	testenv.Eventually(t, waitTimeout, "the run to expire", func() bool {
		_, err := rt.Status(ctx, "ex")
		return errors.Is(err, runtime.ErrRunNotFound)
	})
	page, err := q.Scan(ctx, runrec.HistoryRunPrefix("ex"), queue.ScanOptions{})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("history after expiry: %d entries, %v", len(page.Items), err)
	}
	if _, err := rt.History(ctx, "ex"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("History after expiry: %v, want ErrRunNotFound", err)
	}
}
