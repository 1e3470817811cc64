package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

func mustCancel(t testing.TB, rt *runtime.Runtime, runID string, want bool) {
	t.Helper()
	ok, err := rt.Cancel(context.Background(), runID)
	if err != nil || ok != want {
		t.Fatalf("Cancel(%s) = %v, %v; want %v, nil", runID, ok, err, want)
	}
}

func TestCancelPendingRun(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var calls atomic.Int32
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		calls.Add(1)
		return steprunner.Succeed(nil), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "pending", Headers: map[string]string{"h": "v"}})
	mustCancel(t, rt, "pending", true)

	st, err := rt.Status(context.Background(), "pending")
	if err != nil || st.State != runtime.StateCancelled || st.Error != "" || st.CurrentStep != 0 {
		t.Errorf("Status = %+v, %v; want cancelled at step 0 with no error", st, err)
	}
	if s := mustStats(t, q, stepsQueue); s != (queue.Stats{}) {
		t.Errorf("step queue = %+v: the pending step must be removed", s)
	}
	mustCancel(t, rt, "pending", false) // finished now
	startRun(t, rt)
	o := hook.wait(t, "pending")
	if o.Status != terminal.Cancelled || o.Error != "" || o.FinalStep != 0 || o.Result != nil || o.Headers["h"] != "v" {
		t.Errorf("outcome = %+v, want cancelled with empty error", o)
	}
	whenIdle(t, q, "a cancelled run executed", func() bool { return calls.Load() == 0 })
	if out := mustSubmit(t, rt, runtime.RunSpec{RunID: "pending", Headers: map[string]string{"h": "v"}}); out.NewlySubmitted {
		t.Errorf("Submit of the cancelled run = %+v, want a duplicate", out)
	}
}

func TestCancelScheduledStep(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		return steprunner.ContinueAfter([]byte("later"), time.Hour), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "sched"})
	startRun(t, rt)
	waitStatus(t, rt, "sched", "step 1 scheduled", func(s runtime.RunStatus) bool { return s.Scheduled && s.CurrentStep == 1 })
	mustCancel(t, rt, "sched", true)
	o := hook.wait(t, "sched")
	if o.Status != terminal.Cancelled || o.Error != "" || o.FinalStep != 1 {
		t.Errorf("outcome = %+v, want cancelled at step 1", o)
	}
	if s := mustStats(t, q, stepsQueue); s != (queue.Stats{}) {
		t.Errorf("step queue = %+v: the scheduled step must be removed", s)
	}
	if n := len(log.of("sched")); n != 1 {
		t.Errorf("steps run = %d, want 1", n)
	}
}

// blockingRunner blocks every step until its ctx is done, reports the
// cause, then waits for release and returns what ret says.
type blockingRunner struct {
	started chan *steprunner.Step
	causes  chan error
	release chan struct{}
	ret     func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error)
	calls   atomic.Int32
}

func newBlockingRunner(ret func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error)) *blockingRunner {
	return &blockingRunner{started: make(chan *steprunner.Step, 16), causes: make(chan error, 16), release: make(chan struct{}), ret: ret}
}

func (b *blockingRunner) RunStep(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	b.calls.Add(1)
	b.started <- s
	<-ctx.Done()
	b.causes <- context.Cause(ctx)
	<-b.release
	return b.ret(s, ctx)
}

func recv[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestCancelRunningStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ret  func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error)
	}{
		{"returns ctx error", func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
			return steprunner.Outcome{}, ctx.Err()
		}},
		{"returns permanent error", func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("perm"))
		}},
		{"returns succeed", func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
			return steprunner.Succeed([]byte("too late")), nil
		}},
		{"returns continue", func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
			return steprunner.Continue([]byte("next")), nil
		}},
		{"returns fail", func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
			return steprunner.Fail("failing anyway"), nil
		}},
		{"panics", func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
			panic("panicking after cancel")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := openQueue(t, memURL())
			br := newBlockingRunner(tc.ret)
			hook := &hookRecorder{}
			logs := &testenv.Buffer{}
			var reported atomic.Int32
			rt := newRuntime(t, q, br, hook, runtime.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
				runtime.WithErrorHandler(func(context.Context, *runtime.StepError) { reported.Add(1) }))
			mustSubmit(t, rt, runtime.RunSpec{RunID: "running", MaxAttemptsPerStep: 3})
			startRun(t, rt)
			recv(t, br.started, "the step to start")
			if st := waitStatus(t, rt, "running", "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning }); st.CurrentStep != 0 {
				t.Errorf("Status = %+v", st)
			}

			mustCancel(t, rt, "running", true)
			if cause := recv(t, br.causes, "the step's ctx to be cancelled"); !errors.Is(cause, steprunner.ErrRunCancelled) {
				t.Errorf("context.Cause = %v, want ErrRunCancelled", cause)
			}
			// The step has not returned yet: the run is cancelling.
			st, err := rt.Status(context.Background(), "running")
			if err != nil || st.State != runtime.StateCancelling || st.State.Terminal() {
				t.Errorf("Status while the step still runs = %+v, %v; want cancelling", st, err)
			}
			mustCancel(t, rt, "running", true) // again: still true
			close(br.release)

			o := hook.wait(t, "running")
			if o.Status != terminal.Cancelled || o.Error != "" || o.FinalStep != 0 || o.Result != nil {
				t.Errorf("outcome = %+v, want cancelled with empty error at step 0", o)
			}
			st = waitTerminal(t, rt, "running")
			if st.State != runtime.StateCancelled || st.Error != "" || st.Attempt != 1 {
				t.Errorf("Status = %+v, want cancelled at attempt 1 (no retry after the cancel)", st)
			}
			if dead := deadJobs(t, q, stepsQueue); len(dead) != 0 {
				t.Errorf("dead step jobs %v: a cancelled step is acknowledged", jobIDs(dead))
			}
			if s := mustStats(t, q, stepsQueue); s != (queue.Stats{}) {
				t.Errorf("step queue = %+v, want empty (no next step, no retry)", s)
			}
			mustCancel(t, rt, "running", false)
			whenIdle(t, q, "the step ran again or the hook fired twice", func() bool {
				return br.calls.Load() == 1 && len(hook.outcomes("running")) == 1
			})
			// Whatever the step returned, the cancel ended the run: the
			// attempt did not fail, and is neither reported nor logged as
			// a failure (a retry that never comes).
			if n := reported.Load(); n != 0 {
				t.Errorf("the error handler heard of %d failed attempts", n)
			}
			if l := linesWith(logs.String(), "step failed"); len(l) != 0 {
				t.Errorf("logged as a failure: %q", l)
			}
			panicLines := func() []string {
				return linesWith(logs.String(), "level=WARN", "panicked after its run was cancelled", "stack=")
			}
			if tc.name == "panics" {
				// Logged as the step's late return is handled, which can
				// be after the Cancel's transaction fired the hook.
				testenv.Eventually(t, 10*time.Second, "the panic after the cancel logged", func() bool { return len(panicLines()) > 0 })
			}
			if l := panicLines(); len(l) != btoi(tc.name == "panics") {
				t.Errorf("the panic after the cancel logged %d times with its stack: %q", len(l), logs.String())
			}
		})
	}
}

func TestCooperativeCancel(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			return steprunner.Continue(nil), nil
		}
		return steprunner.Cancel("why"), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "coop"})
	startRun(t, rt)
	o := hook.wait(t, "coop")
	if o.Status != terminal.Cancelled || o.Error != "why" || o.FinalStep != 1 {
		t.Errorf("outcome = %+v, want cancelled with why at step 1", o)
	}
	if st := waitTerminal(t, rt, "coop"); st.State != runtime.StateCancelled || st.Error != "why" {
		t.Errorf("Status = %+v", st)
	}
	if dead := deadJobs(t, q, stepsQueue); len(dead) != 0 {
		t.Errorf("dead jobs: %v", jobIDs(dead))
	}
}

func TestStepCancelReasonWinsOverExternalCancel(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	br := newBlockingRunner(func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
		return steprunner.Cancel("step says: " + context.Cause(ctx).Error()), nil
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, br, hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "both"})
	startRun(t, rt)
	recv(t, br.started, "the step to start")
	mustCancel(t, rt, "both", true)
	recv(t, br.causes, "the cancel")
	close(br.release)
	o := hook.wait(t, "both")
	want := "step says: " + steprunner.ErrRunCancelled.Error()
	if o.Status != terminal.Cancelled || o.Error != want {
		t.Errorf("outcome = %+v, want cancelled with %q", o, want)
	}
}

func TestCancelFinishedAndUnknownRuns(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, succeedRunner(nil), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "done"})
	startRun(t, rt)
	hook.wait(t, "done")
	waitTerminal(t, rt, "done")
	mustCancel(t, rt, "done", false)
	if st, _ := rt.Status(context.Background(), "done"); st.State != runtime.StateSucceeded {
		t.Errorf("Cancel changed a finished run: %+v", st)
	}
	mustCancel(t, rt, "unknown", false)
	if ok, err := rt.Cancel(context.Background(), "a/b"); ok || !errors.Is(err, runtime.ErrInvalidRunID) {
		t.Errorf("Cancel(a/b) = %v, %v; want ErrInvalidRunID", ok, err)
	}
	whenIdle(t, q, "the hook fired again", func() bool { return hook.total() == 1 })
}

func TestCancelFromAnotherRuntime(t *testing.T) {
	t.Parallel()
	url := memURL()
	q := openQueue(t, url)
	br := newBlockingRunner(func(s *steprunner.Step, ctx context.Context) (steprunner.Outcome, error) {
		return steprunner.Outcome{}, ctx.Err()
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, br, hook, runtime.WithMaxConcurrentSteps(4))
	// Two Runtimes that do not Run: one on the same *queue.Queue, one on a
	// second handle opened on the same mem:// URL (the same store and writer).
	others := map[string]*runtime.Runtime{
		"same-queue":    newRuntime(t, q, succeedRunner(nil), hook),
		"second-handle": newRuntime(t, openQueue(t, url), succeedRunner(nil), hook),
	}
	for id := range others {
		mustSubmit(t, rt, runtime.RunSpec{RunID: id + "-running"})
		mustSubmit(t, rt, runtime.RunSpec{RunID: id + "-pending", Input: []byte("p")})
	}
	// Cancel the pending runs before Run starts.
	for id, other := range others {
		mustCancel(t, other, id+"-pending", true)
	}
	startRun(t, rt)
	for range others {
		recv(t, br.started, "a step to start")
	}
	for id, other := range others {
		waitStatus(t, other, id+"-running", "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
		mustCancel(t, other, id+"-running", true)
		if cause := recv(t, br.causes, "a cancel"); !errors.Is(cause, steprunner.ErrRunCancelled) {
			t.Errorf("%s: cause %v", id, cause)
		}
		if st, _ := other.Status(context.Background(), id+"-running"); st.State != runtime.StateCancelling {
			t.Errorf("%s: Status = %+v, want cancelling", id, st)
		}
	}
	close(br.release)
	for id := range others {
		for _, run := range []string{id + "-running", id + "-pending"} {
			o := hook.wait(t, run)
			if o.Status != terminal.Cancelled || o.Error != "" {
				t.Errorf("%s: outcome %+v", run, o)
			}
		}
	}
}

// A Runtime that only submits, reads and cancels (an API process) is built
// without a runner or hook: it does not Run, so it has no hook to call.
// Cancelling a pending run from it must still notify the hook of the
// Runtime that Runs (which records its notify queue in the store when its
// Run starts): the contract calls the hook for every run whose termination
// committed.
func TestCancelFromNoopRuntimeStillNotifiesHook(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	worker := newRuntime(t, q, succeedRunner(nil), hook)
	api := newRuntime(t, q, nil, nil)
	// The worker has Run on the store before (a deployment's steady state).
	first := startRun(t, worker)
	testenv.Eventually(t, waitTimeout, "the worker to record its notify queue", func() bool {
		v, err := q.Get(context.Background(), []byte("workflow/config/notify_queue"))
		return err == nil && string(v) == notifyQueue
	})
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, api, runtime.RunSpec{RunID: "api-cancelled"})
	mustCancel(t, api, "api-cancelled", true)
	mustSubmit(t, api, runtime.RunSpec{RunID: "api-done"})
	startRun(t, worker)
	if o := hook.wait(t, "api-done"); o.Status != terminal.Succeeded {
		t.Errorf("outcome = %+v", o)
	}
	testenv.Eventually(t, stuckTimeout, "the worker's hook to hear about the run cancelled through the Noop Runtime", func() bool {
		return len(hook.outcomes("api-cancelled")) == 1
	})
}

func TestCancelRacesWithSettlement(t *testing.T) {
	t.Parallel()
	// Cancel runs while steps settle as fast as they can: every run ends
	// either Succeeded (cancel came too late: false) or Cancelled (true),
	// exactly once, and consistently with what Cancel returned.
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, chainRunner(nil, 5), hook, runtime.WithMaxConcurrentSteps(8))
	startRun(t, rt)
	const n = 40
	results := make([]bool, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = "race-" + string(rune('A'+i%26)) + string(rune('a'+i/26))
		mustSubmit(t, rt, runtime.RunSpec{RunID: ids[i]})
	}
	for i := range n {
		if i%3 == 0 {
			time.Sleep(time.Millisecond)
		}
		ok, err := rt.Cancel(context.Background(), ids[i])
		if err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		results[i] = ok
	}
	for i, id := range ids {
		st := waitTerminal(t, rt, id)
		want := runtime.StateSucceeded
		if results[i] {
			want = runtime.StateCancelled
		}
		if st.State != want {
			t.Errorf("run %s: Cancel returned %v but the run ended %v", id, results[i], st.State)
		}
		o := hook.wait(t, id)
		if (o.Status == terminal.Cancelled) != results[i] {
			t.Errorf("run %s: Cancel returned %v, hook says %v", id, results[i], o.Status)
		}
	}
	whenIdle(t, q, "a hook fired twice", func() bool { return hook.total() == n })
}

// When the queue dead-letters a run's current step on its own (a lease that
// expired on the step's last attempt, see TestStepLostOnLastAttemptEndsRun),
// Cancel must still return. Not parallel: if Cancel spins, it burns a CPU
// until the store closes at the end of the test.
func TestCancelRunWhoseStepIsDeadReturns(t *testing.T) {
	q := openQueue(t, memURL(), queue.WithLease(30*time.Millisecond))
	rt := newRuntime(t, q, succeedRunner(nil), terminal.Noop)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "dead-step", MaxAttemptsPerStep: 1})
	// A worker claims the step and hangs without renewing its lease; the
	// reaper dead-letters it (last attempt).
	if j, err := claimOne(context.Background(), q, stepsQueue); err != nil || j == nil {
		t.Fatalf("Claim = %v, %v", j, err)
	}
	testenv.Eventually(t, waitTimeout, "the reaper to dead-letter the step", func() bool { return mustStats(t, q, stepsQueue).Dead == 1 })

	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	go func() {
		ok, err := rt.Cancel(ctx, "dead-step")
		done <- result{ok, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Errorf("Cancel = %v, %v", r.ok, r.err)
		}
		st, err := rt.Status(context.Background(), "dead-step")
		t.Logf("Cancel = %v; Status = %+v, %v", r.ok, st, err)
	case <-time.After(2 * time.Second):
		st, _ := rt.Status(context.Background(), "dead-step")
		t.Errorf("Cancel of a run whose current step job is dead did not return within 2s "+
			"(its ctx has a 1s deadline); Status = %+v", st)
	}
}

// TestCancelBeforeWorkerRunsStillNotifiesHook: a run that a client Runtime
// submits and cancels after the worker Runtime (with a hook) was made, but
// before its Run started, is notified to the worker's hook once it runs:
// the contract calls the hook for every run whose termination committed.
// New records nothing (it does no I/O), so the cancel finds no notify
// queue and hands the notification to the step queue's notices queue,
// which the worker's Run forwards to its hook. Fails if Cancel drops the
// notification when no notify queue is known.
func TestCancelBeforeWorkerRunsStillNotifiesHook(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	worker := newRuntime(t, q, succeedRunner(nil), hook)
	api := newRuntime(t, q, nil, nil)
	mustSubmit(t, api, runtime.RunSpec{RunID: "api-cancelled"})
	mustCancel(t, api, "api-cancelled", true)
	mustSubmit(t, api, runtime.RunSpec{RunID: "api-scheduled", StartAt: time.Now().Add(time.Hour)})
	mustCancel(t, api, "api-scheduled", true)
	mustSubmit(t, api, runtime.RunSpec{RunID: "api-paused"}) // its step parked: no job to cancel
	if err := api.Pause(context.Background(), "api-paused"); err != nil {
		t.Fatal(err)
	}
	mustCancel(t, api, "api-paused", true)
	mustSubmit(t, api, runtime.RunSpec{RunID: "api-done"})
	if s := mustStats(t, q, deadStepsQueue); s.Pending != 3 {
		t.Errorf("notices queue before the worker runs = %+v, want the 3 handed-over notifications", s)
	}
	startRun(t, worker)
	if o := hook.wait(t, "api-done"); o.Status != terminal.Succeeded {
		t.Errorf("outcome = %+v", o)
	}
	for _, id := range []string{"api-cancelled", "api-scheduled", "api-paused"} {
		if o := hook.wait(t, id); o.Status != terminal.Cancelled || o.Error != "" || o.EndedAt.IsZero() {
			t.Errorf("outcome of run %s, cancelled before the worker ran = %+v", id, o)
		}
	}
	testenv.Eventually(t, waitTimeout, "the notices queue drained", func() bool {
		s := mustStats(t, q, deadStepsQueue)
		return s.Pending+s.Claimed+s.Dead == 0
	})
}

// TestCancelHandOffWithoutAnyHook: on a store where no Runtime has a hook,
// a client's cancel hands the notification over all the same (nobody
// could know that no hook will ever Run), and the hookless worker that
// Runs the step queue drops it: nothing is left in the notices queue or
// in a notify queue. Fails if handed-over notifications pile up.
func TestCancelHandOffWithoutAnyHook(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	api := newRuntime(t, q, nil, nil)
	mustSubmit(t, api, runtime.RunSpec{RunID: "c"})
	mustCancel(t, api, "c", true)
	if s := mustStats(t, q, deadStepsQueue); s.Pending != 1 {
		t.Fatalf("notices queue = %+v, want the handed-over notification", s)
	}
	worker := newRuntime(t, q, succeedRunner(nil), nil)
	startRun(t, worker)
	testenv.Eventually(t, waitTimeout, "the hand-off dropped", func() bool {
		s := mustStats(t, q, deadStepsQueue)
		return s.Pending+s.Claimed+s.Dead == 0
	})
	if s := mustStats(t, q, "workflow-notify"); s.Pending+s.Scheduled+s.Claimed+s.Dead != 0 {
		t.Errorf("notify queue = %+v, want untouched", s)
	}
	if st, err := api.Status(context.Background(), "c"); err != nil || st.State != runtime.StateCancelled {
		t.Errorf("Status = %+v, %v", st, err)
	}
}

// TestNewDoesNoIO: New makes no request to the store and commits nothing,
// whatever it is given (a runner and a hook, a client Runtime), and does
// not fail on a closed queue: it validates its arguments and that is all.
// The hook's notify queue is recorded by Run. Fails if New reads or writes
// the store (it used to record the notify queue, a commit bounded by a
// 10 s timeout on a stalled store).
func TestNewDoesNoIO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	before := q.StorageStats()
	hook := &hookRecorder{}
	worker, err := runtime.New(q, succeedRunner(nil), hook)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.New(q, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.New(q, succeedRunner(nil), nil, runtime.WithQueueName("other")); err != nil {
		t.Fatal(err)
	}
	after := q.StorageStats()
	// Writes only: the store's reads (Gets, Lists) include its own
	// background ones, and a Runtime's reads of the state are served from
	// memory (TestNewOnStalledStoreReturnsAtOnce covers them: New returns
	// at once on a hung store).
	type writes struct {
		Puts, Deletes                     int64
		WALBatches, Transactions, Mutated uint64
	}
	count := func(s queue.StorageStats) writes {
		return writes{s.Puts, s.Deletes, s.WALBatches, s.Transactions, s.Mutations}
	}
	if count(before) != count(after) {
		t.Errorf("New wrote to the store: counters %+v before, %+v after", count(before), count(after))
	}
	if _, err := q.Get(ctx, []byte("workflow/config/notify_queue")); !errors.Is(err, queue.ErrKeyNotFound) {
		t.Errorf("notify queue recorded by New: Get = %v", err)
	}
	r := startRun(t, worker)
	testenv.Eventually(t, waitTimeout, "Run to record the notify queue", func() bool {
		v, err := q.Get(ctx, []byte("workflow/config/notify_queue"))
		return err == nil && string(v) == "workflow-notify"
	})
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	closed, err := queue.Open(ctx, memURL())
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.New(closed, succeedRunner(nil), hook); err != nil {
		t.Fatalf("New on a closed queue: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
