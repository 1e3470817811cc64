package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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

// Tests of a run's execution policy: step timeouts, per-run retry
// policies, RetryAfter and scheduled starts. Delays are read back from the
// store (a retried job's due time minus the time of its failed attempt is
// exactly the delay the settlement chose), so they are exact whatever the
// machine's load; wall-clock checks are lower bounds only.

// lastRetryDelay returns the delay the settlement of a job's last failed
// attempt chose: its due time minus the time of that failure.
func lastRetryDelay(t testing.TB, q *queue.Queue, jobID string) time.Duration {
	t.Helper()
	j, err := q.GetJob(context.Background(), jobID)
	if err != nil {
		t.Errorf("GetJob(%s): %v", jobID, err)
		return 0
	}
	if len(j.History) == 0 {
		t.Errorf("job %s has no failed attempt", jobID)
		return 0
	}
	return j.RunAt.Sub(j.History[len(j.History)-1].At)
}

// A step that overruns the Runtime's default step timeout sees its ctx end
// with cause ErrStepTimeout, counts a failed attempt, and its retry (with a
// fresh deadline) settles the run.
func TestStepTimeoutThenRetrySucceeds(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var mu sync.Mutex
	var causes []error
	var deadlines []bool
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		_, has := ctx.Deadline()
		mu.Lock()
		deadlines = append(deadlines, has)
		mu.Unlock()
		if s.Attempt == 1 {
			<-ctx.Done()
			mu.Lock()
			causes = append(causes, context.Cause(ctx))
			mu.Unlock()
			return steprunner.Outcome{}, ctx.Err()
		}
		return steprunner.Succeed([]byte(fmt.Sprintf("attempt %d", s.Attempt))), nil
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook, runtime.WithStepTimeout(100*time.Millisecond))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "slow"})
	startRun(t, rt)
	o := hook.wait(t, "slow")
	if o.Status != terminal.Succeeded || string(o.Result) != "attempt 2" {
		t.Fatalf("outcome = %+v, want succeeded by attempt 2", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(causes) != 1 || !errors.Is(causes[0], steprunner.ErrStepTimeout) {
		t.Errorf("causes seen by the timed-out attempt = %v, want [ErrStepTimeout]", causes)
	}
	if len(deadlines) != 2 || !deadlines[0] || !deadlines[1] {
		t.Errorf("ctx.Deadline set per attempt = %v, want [true true]", deadlines)
	}
	st, err := rt.Status(context.Background(), "slow")
	if err != nil || st.Attempt != 2 {
		t.Errorf("Status = %+v, %v; want settled by attempt 2", st, err)
	}
}

// A timeout on the last attempt fails the run with an error that says so.
func TestStepTimeoutOnLastAttemptFailsRun(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		<-ctx.Done()
		return steprunner.Succeed(nil), nil // too late: still a timeout
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "always-slow", StepTimeout: 50 * time.Millisecond,
		Retry: &steprunner.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}})
	startRun(t, rt)
	o := hook.wait(t, "always-slow")
	if o.Status != terminal.Failed || !strings.Contains(o.Error, steprunner.ErrStepTimeout.Error()) ||
		!strings.Contains(o.Error, "50ms") || !strings.Contains(o.Error, "attempt 2") {
		t.Fatalf("outcome = %+v, want failed with a step timeout of 50ms on attempt 2", o)
	}
}

// A step that ignores its ctx is not waited for: at its deadline the
// attempt is settled as timed out and retried, and what it returns later
// (here while the retry runs, before the retry settles) is discarded: the
// retry's result wins, the hook hears of the run once.
func TestStepIgnoringTimeoutIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	release := make(chan struct{})      // lets attempt 1 return
	lateReturned := make(chan struct{}) // attempt 1 returned
	var releaseOnce sync.Once
	releaseAttempt1 := func() { releaseOnce.Do(func() { close(release) }) }
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Attempt == 1 {
			<-release // ignores ctx
			defer close(lateReturned)
			return steprunner.Succeed([]byte("late")), nil
		}
		releaseAttempt1()
		select {
		case <-lateReturned:
		case <-time.After(waitTimeout):
			return steprunner.Outcome{}, errors.New("attempt 1 never returned")
		}
		return steprunner.Succeed([]byte("retry")), nil
	})
	var logs testenv.Buffer
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook, runtime.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	// The retry waits for attempt 1 to return: give it ample time (its
	// own deadline must not pass on a loaded machine).
	mustSubmit(t, rt, runtime.RunSpec{RunID: "stuck", StepTimeout: 300 * time.Millisecond,
		Retry: &steprunner.RetryPolicy{InitialBackoff: time.Millisecond, Multiplier: 1}})
	startRun(t, rt)
	// If the runtime waited for attempt 1, no retry would release it:
	// release it at the end (before Run's drain) so that the test fails
	// instead of hanging.
	t.Cleanup(releaseAttempt1)
	o := hook.wait(t, "stuck")
	if o.Status != terminal.Succeeded || string(o.Result) != "retry" {
		t.Fatalf("outcome = %+v, want succeeded with the retry's result", o)
	}
	testenv.Eventually(t, waitTimeout, "the late result to be logged as discarded", func() bool {
		return strings.Contains(logs.String(), "returned after its timeout")
	})
	whenIdle(t, q, "the late result changed the run", func() bool {
		st, err := rt.Status(context.Background(), "stuck")
		return err == nil && st.State == runtime.StateSucceeded && string(st.Result) == "retry" &&
			len(hook.outcomes("stuck")) == 1
	})
	if s := mustStats(t, q, stepsQueue); s.Pending+s.Scheduled+s.Claimed+s.Dead != 0 {
		t.Errorf("step queue after the run = %+v, want empty", s)
	}
}

// A per-run retry policy replaces the queue's backoff and attempt limit:
// the delays after each failed attempt are exactly the policy's (no
// jitter), and the run fails after the policy's attempt count.
func TestRetryPolicyOverridesQueueDefaults(t *testing.T) {
	t.Parallel()
	// The queue's defaults: 5 attempts, 1-5ms backoff (fastQueueOpts).
	q := openQueue(t, memURL())
	ms := time.Millisecond
	policy := &steprunner.RetryPolicy{MaxAttempts: 4, InitialBackoff: 20 * ms, MaxBackoff: 100 * ms, Multiplier: 3}
	want := []time.Duration{20 * ms, 60 * ms, 100 * ms}
	var mu sync.Mutex
	var delays []time.Duration
	var maxAttempts []uint32
	var lastReturn time.Time
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if s.Attempt > 1 {
			d := lastRetryDelay(t, q, s.JobID)
			delays = append(delays, d)
			if waited := time.Since(lastReturn); waited < d {
				t.Errorf("attempt %d ran %v after attempt %d returned, before its delay %v", s.Attempt, waited, s.Attempt-1, d)
			}
		}
		maxAttempts = append(maxAttempts, s.MaxAttempts)
		lastReturn = time.Now()
		return steprunner.Outcome{}, fmt.Errorf("boom %d", s.Attempt)
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "policy", MaxAttemptsPerStep: 9, Retry: policy})
	startRun(t, rt)
	o := hook.wait(t, "policy")
	if o.Status != terminal.Failed || o.Error != "boom 4" {
		t.Fatalf("outcome = %+v, want failed with boom 4", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(delays) != fmt.Sprint(want) {
		t.Errorf("retry delays = %v, want %v", delays, want)
	}
	if fmt.Sprint(maxAttempts) != "[4 4 4 4]" {
		t.Errorf("Step.MaxAttempts per attempt = %v, want the policy's 4 (over MaxAttemptsPerStep 9)", maxAttempts)
	}
}

// A policy without a backoff only sets the attempt limit; the queue's
// backoff (1-5ms here) times the retries.
func TestRetryPolicyAttemptsOnly(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var delays []time.Duration
	var mu sync.Mutex
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Attempt > 1 {
			mu.Lock()
			delays = append(delays, lastRetryDelay(t, q, s.JobID))
			mu.Unlock()
		}
		return steprunner.Outcome{}, errors.New("boom")
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "attempts", Retry: &steprunner.RetryPolicy{MaxAttempts: 2}})
	startRun(t, rt)
	if o := hook.wait(t, "attempts"); o.Status != terminal.Failed {
		t.Fatalf("outcome = %+v, want failed", o)
	}
	st, _ := rt.Status(context.Background(), "attempts")
	mu.Lock()
	defer mu.Unlock()
	if st.Attempt != 2 || len(delays) != 1 || delays[0] > 5*time.Millisecond || delays[0] <= 0 {
		t.Errorf("attempts %d, delays %v; want 2 attempts and the queue's backoff (at most 5ms)", st.Attempt, delays)
	}
}

// RetryAfter delays the retry by exactly its delay (read back from the
// store), and the retry does not run before it; the attempt counts.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	const after = 400 * time.Millisecond
	var mu sync.Mutex
	var returned, retried time.Time
	var delay time.Duration
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if s.Attempt == 1 {
			returned = time.Now()
			return steprunner.Outcome{}, steprunner.RetryAfter(errors.New("429 too many requests"), after)
		}
		retried, delay = time.Now(), lastRetryDelay(t, q, s.JobID)
		return steprunner.Succeed([]byte(fmt.Sprint(s.Attempt))), nil
	})
	hook := &hookRecorder{}
	// A backoff policy that RetryAfter must override.
	rt := newRuntime(t, q, runner, hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "429", Retry: &steprunner.RetryPolicy{InitialBackoff: time.Millisecond}})
	startRun(t, rt)
	o := hook.wait(t, "429")
	if o.Status != terminal.Succeeded || string(o.Result) != "2" {
		t.Fatalf("outcome = %+v, want succeeded on attempt 2", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if delay != after {
		t.Errorf("retry delay = %v, want the RetryAfter delay %v", delay, after)
	}
	if waited := retried.Sub(returned); waited < after || waited > after+10*time.Second {
		t.Errorf("the retry ran %v after the 429, want no earlier than %v", waited, after)
	}
}

// RetryAfter on the last attempt fails the run; a permanent error wrapped
// in RetryAfter is dead-lettered at once.
func TestRetryAfterLastAttemptAndPermanent(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var mu sync.Mutex
	attempts := map[string]int{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		attempts[s.RunID]++
		mu.Unlock()
		err := errors.New("429 " + s.RunID)
		if s.RunID == "permanent" {
			err = steprunner.Permanent(err)
		}
		return steprunner.Outcome{}, steprunner.RetryAfter(err, time.Hour)
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "last", MaxAttemptsPerStep: 1})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "permanent"})
	startRun(t, rt)
	for _, id := range []string{"last", "permanent"} {
		if o := hook.wait(t, id); o.Status != terminal.Failed || o.Error != "429 "+id {
			t.Errorf("%s: outcome = %+v, want failed with its error", id, o)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts["last"] != 1 || attempts["permanent"] != 1 {
		t.Errorf("attempts = %v, want one each", attempts)
	}
}

// A run submitted with StartAt in the future is pending and scheduled
// (DueAt = StartAt) until then; step 0 runs no earlier. A duplicate Submit
// is a no-op only with the same StartAt.
func TestStartAtSchedulesStepZero(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var mu sync.Mutex
	started := map[string]time.Time{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		started[s.RunID] = time.Now()
		mu.Unlock()
		return steprunner.Succeed(nil), nil
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	startAt := time.Now().Add(time.Second)
	spec := runtime.RunSpec{RunID: "later", Input: []byte("x"), StartAt: startAt}
	mustSubmit(t, rt, spec)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "past", StartAt: time.Now().Add(-time.Hour)})
	st, err := rt.Status(context.Background(), "later")
	// (A machine so loaded that StartAt has passed by now only checks the
	// rest.)
	if early := time.Now().Before(startAt); err != nil || st.State != runtime.StatePending ||
		early && !st.Scheduled || st.Scheduled && !st.DueAt.Equal(startAt) {
		t.Fatalf("Status = %+v, %v; want pending, scheduled, due at %v", st, err, startAt)
	}
	if out := mustSubmit(t, rt, spec); out.NewlySubmitted {
		t.Errorf("duplicate Submit = %+v, want a no-op", out)
	}
	for name, at := range map[string]time.Time{"other": startAt.Add(time.Second), "none": {}} {
		other := spec
		other.StartAt = at
		if _, err := rt.Submit(context.Background(), other); !errors.Is(err, runtime.ErrSpecMismatch) {
			t.Errorf("re-Submit with StartAt %s: %v, want ErrSpecMismatch", name, err)
		}
	}
	startRun(t, rt)
	hook.wait(t, "past")
	hook.wait(t, "later")
	mu.Lock()
	defer mu.Unlock()
	if started["later"].Before(startAt) {
		t.Errorf("step 0 ran at %v, %v before its StartAt", started["later"], startAt.Sub(started["later"]))
	}
}

// Times outside what a record's int64 nanoseconds since 1970 hold: a
// StartAt before 1970 has passed (at once); a StartAt, Deadline,
// ContinueAfter delay or AwaitSignal timeout past 2262-04-11 is due then.
// Before, they wrapped around: a far deadline failed the run at once, a
// far delay or timeout fired at once, a StartAt of 1969 came an hour late.
func TestTimesOutsideNanoRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	never := time.Unix(0, math.MaxInt64)
	long := 250 * 365 * 24 * time.Hour
	q := openQueue(t, memURL())
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.Number > 0:
			return steprunner.Succeed(nil), nil
		case s.RunID == "sleep":
			return steprunner.ContinueAfter(nil, long), nil
		case s.RunID == "await":
			return steprunner.AwaitSignal("go", long), nil
		}
		return steprunner.Succeed(nil), nil
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "old", StartAt: time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC)})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "far", StartAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "deadline", Deadline: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "sleep"})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "await"})
	if st, err := rt.Status(ctx, "far"); err != nil || st.State != runtime.StatePending || !st.Scheduled || !st.DueAt.Equal(never) {
		t.Errorf("StartAt 2300: %+v, %v; want pending, due at %v", st, err, never)
	}
	if st, err := rt.Status(ctx, "deadline"); err != nil || !st.Deadline.Equal(never) {
		t.Errorf("Deadline 2300: %+v, %v; want the deadline at %v", st, err, never)
	}
	startRun(t, rt)
	if o := hook.wait(t, "old"); o.Status != terminal.Succeeded {
		t.Errorf("StartAt 1969: %+v, want succeeded", o)
	}
	if o := hook.wait(t, "deadline"); o.Status != terminal.Succeeded {
		t.Errorf("Deadline 2300: %+v, want succeeded", o)
	}
	st := waitStatus(t, rt, "sleep", "the delayed step 1 to be scheduled", func(st runtime.RunStatus) bool { return st.Scheduled })
	if !st.DueAt.Equal(never) {
		t.Errorf("ContinueAfter of 250 years: due at %v, want %v", st.DueAt, never)
	}
	waitStatus(t, rt, "await", "the run to wait", func(st runtime.RunStatus) bool { return st.State == runtime.StateWaiting })
	// A timeout wrapped around into the past would be pending, claimed or
	// gone (fired) by now, not scheduled.
	timers := mustStats(t, q, runrec.TimersQueue("workflow-steps"))
	if timers.Scheduled != 1 || timers.Pending+timers.Claimed != 0 {
		t.Errorf("the await's timeout job: %+v, want one scheduled", timers)
	}
}

// Invalid policy fields are refused before anything is written.
func TestSubmitInvalidPolicyChangesNothing(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), nil)
	txns := q.StorageStats().Transactions
	for name, spec := range map[string]runtime.RunSpec{
		"negative timeout": {RunID: "bad", StepTimeout: -time.Second},
		"bad multiplier":   {RunID: "bad", Retry: &steprunner.RetryPolicy{InitialBackoff: time.Second, Multiplier: 0.5}},
		"bad jitter":       {RunID: "bad", Retry: &steprunner.RetryPolicy{InitialBackoff: time.Second, Jitter: 2}},
		"max below base":   {RunID: "bad", Retry: &steprunner.RetryPolicy{InitialBackoff: time.Second, MaxBackoff: time.Millisecond}},
	} {
		_, err := rt.Submit(context.Background(), spec)
		if !errors.Is(err, runtime.ErrInvalidRunSpec) {
			t.Errorf("%s: Submit = %v, want ErrInvalidRunSpec", name, err)
		}
		var pe *steprunner.RetryPolicyError
		if spec.Retry != nil && !errors.As(err, &pe) {
			t.Errorf("%s: Submit = %v, want a *steprunner.RetryPolicyError in it", name, err)
		}
	}
	if got := q.StorageStats().Transactions; got != txns {
		t.Errorf("invalid Submits committed %d transactions", got-txns)
	}
	if _, err := rt.Status(context.Background(), "bad"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Errorf("Status after invalid Submits = %v, want ErrRunNotFound", err)
	}
	if _, err := runtime.New(q, succeedRunner(nil), nil, runtime.WithStepTimeout(-time.Second)); !errors.Is(err, runtime.ErrInvalidOption) {
		t.Errorf("WithStepTimeout(-1s): %v, want ErrInvalidOption", err)
	}
}

// A re-Submit with another step timeout or retry policy is ErrSpecMismatch;
// nil and the zero policy are the same.
func TestSubmitPolicyMismatch(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), nil)
	spec := runtime.RunSpec{RunID: "p", StepTimeout: time.Second,
		Retry: &steprunner.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, Multiplier: 1.5, Jitter: 0.1}}
	mustSubmit(t, rt, spec)
	same := spec
	p := *spec.Retry
	same.Retry = &p
	if out := mustSubmit(t, rt, same); out.NewlySubmitted {
		t.Errorf("duplicate Submit = %+v, want a no-op", out)
	}
	for name, mod := range map[string]func(*runtime.RunSpec){
		"timeout":    func(s *runtime.RunSpec) { s.StepTimeout = 2 * time.Second },
		"no policy":  func(s *runtime.RunSpec) { s.Retry = nil },
		"attempts":   func(s *runtime.RunSpec) { r := *s.Retry; r.MaxAttempts = 4; s.Retry = &r },
		"multiplier": func(s *runtime.RunSpec) { r := *s.Retry; r.Multiplier = 2; s.Retry = &r },
		"jitter":     func(s *runtime.RunSpec) { r := *s.Retry; r.Jitter = 0.2; s.Retry = &r },
	} {
		other := spec
		mod(&other)
		if _, err := rt.Submit(context.Background(), other); !errors.Is(err, runtime.ErrSpecMismatch) {
			t.Errorf("re-Submit with other %s: %v, want ErrSpecMismatch", name, err)
		}
	}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "zero", Retry: &steprunner.RetryPolicy{}})
	if out := mustSubmit(t, rt, runtime.RunSpec{RunID: "zero"}); out.NewlySubmitted {
		t.Errorf("Submit without a policy after one with the zero policy = %+v, want a no-op", out)
	}
}
