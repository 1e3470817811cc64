package runtime_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
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

func TestNewValidation(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	r := succeedRunner(nil)
	if _, err := runtime.New(nil, r, terminal.Noop); err == nil {
		t.Error("New with a nil queue: no error")
	}
	if _, err := runtime.New(q, steprunner.RunnerFunc(nil), terminal.Noop); !errors.Is(err, runtime.ErrInvalidOption) {
		t.Errorf("New with a nil RunnerFunc: %v, want ErrInvalidOption", err)
	}
	if _, err := runtime.New(q, nil, &hookRecorder{}); !errors.Is(err, runtime.ErrInvalidOption) {
		t.Errorf("New with a hook but no runner: %v, want ErrInvalidOption", err)
	}
	// No runner: a client Runtime, whose Run refuses to start.
	client, err := runtime.New(q, nil, nil)
	if err != nil {
		t.Fatalf("New with no runner (a client Runtime): %v", err)
	}
	if err := client.Run(context.Background()); !errors.Is(err, runtime.ErrNoRunner) {
		t.Errorf("Run of a client Runtime = %v, want ErrNoRunner", err)
	}
	if _, err := runtime.New(q, r, nil); err != nil {
		t.Errorf("New with a nil hook (= Noop): %v", err)
	}
	bad := map[string]runtime.Option{
		"empty queue name":           runtime.WithQueueName(""),
		"same step and notify queue": runtime.WithQueueName("workflow-notify"),
		"zero concurrency":           runtime.WithMaxConcurrentSteps(0),
		"zero poll interval":         runtime.WithPollInterval(0),
		"zero retention":             runtime.WithTerminalRetention(0),
		"negative drain timeout":     runtime.WithDrainTimeout(-time.Second),
	}
	for name, opt := range bad {
		if _, err := runtime.New(q, r, terminal.Noop, opt); !errors.Is(err, runtime.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestSingleStepSucceeds(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, succeedRunner(&log), hook)
	sub := mustSubmit(t, rt, runtime.RunSpec{RunID: "single", Input: []byte("in"), Headers: map[string]string{"tenant": "acme"}})
	if sub.RunID != "single" || !sub.NewlySubmitted {
		t.Fatalf("Submit = %+v, want single, newly submitted", sub)
	}
	st, err := rt.Status(context.Background(), "single")
	if err != nil || st.State != runtime.StatePending || st.CurrentStep != 0 || st.Scheduled {
		t.Fatalf("Status before Run = %+v, %v; want pending at step 0, not scheduled", st, err)
	}
	startRun(t, rt)

	o := hook.wait(t, "single")
	want := terminal.Outcome{RunID: "single", Status: terminal.Succeeded, Result: []byte("in|0"),
		Headers: map[string]string{"tenant": "acme"}, FinalStep: 0, EndedAt: o.EndedAt}
	if !outcomeEqual(o, want) {
		t.Errorf("hook outcome = %+v, want %+v", o, want)
	}
	if o.EndedAt.IsZero() || time.Since(o.EndedAt) > time.Minute {
		t.Errorf("EndedAt = %v, want about now", o.EndedAt)
	}
	st = waitTerminal(t, rt, "single")
	if st.State != runtime.StateSucceeded || string(st.Result) != "in|0" || st.Error != "" || st.CurrentStep != 0 {
		t.Errorf("Status = %+v, want succeeded with result in|0 at step 0", st)
	}
	if st.State.String() != "succeeded" {
		t.Errorf("State.String() = %q", st.State)
	}
	steps := log.of("single")
	if len(steps) != 1 {
		t.Fatalf("runner called %d times, want 1", len(steps))
	}
	s := steps[0]
	if s.Number != 0 || s.Attempt != 1 || string(s.Payload) != "in" || s.JobID == "" || s.MaxAttempts != 5 {
		t.Errorf("step = %+v, want number 0, attempt 1, payload in, a job ID, max attempts 5 (queue default)", s)
	}
	if !maps.Equal(s.Headers, map[string]string{"tenant": "acme"}) {
		t.Errorf("step headers = %v, want only the submitter's", s.Headers)
	}
	// The run leaves nothing behind in the queues.
	testenv.Eventually(t, waitTimeout, "the notification to be acknowledged", func() bool {
		return mustStats(t, q, notifyQueue) == queue.Stats{}
	})
	if s := mustStats(t, q, stepsQueue); s != (queue.Stats{}) {
		t.Errorf("step queue stats = %+v, want empty", s)
	}
	whenIdle(t, q, "the hook was called twice", func() bool { return len(hook.outcomes("single")) == 1 })
}

func outcomeEqual(a, b terminal.Outcome) bool {
	return a.RunID == b.RunID && a.Status == b.Status && bytes.Equal(a.Result, b.Result) &&
		a.Error == b.Error && maps.Equal(a.Headers, b.Headers) && a.FinalStep == b.FinalStep && a.EndedAt.Equal(b.EndedAt)
}

func TestMultiStepChain(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, chainRunner(&log, 2), hook)
	headers := map[string]string{"a": "1", "callback_url": "https://example.com/x"}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "chain", Input: []byte("x"), Headers: headers})
	startRun(t, rt)

	o := hook.wait(t, "chain")
	if o.Status != terminal.Succeeded || string(o.Result) != "x|0|1|2" || o.FinalStep != 2 || o.Error != "" {
		t.Errorf("outcome = %+v, want succeeded x|0|1|2 at step 2", o)
	}
	if !maps.Equal(o.Headers, headers) {
		t.Errorf("outcome headers = %v, want %v", o.Headers, headers)
	}
	steps := log.of("chain")
	if len(steps) != 3 {
		t.Fatalf("steps = %d, want 3: %+v", len(steps), steps)
	}
	wantPayload := "x"
	jobs := map[string]bool{}
	for i, s := range steps {
		if s.Number != uint32(i) || s.Attempt != 1 || string(s.Payload) != wantPayload {
			t.Errorf("step %d = number %d attempt %d payload %q; want number %d attempt 1 payload %q",
				i, s.Number, s.Attempt, s.Payload, i, wantPayload)
		}
		if !maps.Equal(s.Headers, headers) {
			t.Errorf("step %d headers = %v, want %v", i, s.Headers, headers)
		}
		checkNoReservedHeaders(t, fmt.Sprintf("step %d", i), s.Headers)
		if jobs[s.JobID] {
			t.Errorf("step %d reuses job %s", i, s.JobID)
		}
		jobs[s.JobID] = true
		wantPayload += fmt.Sprintf("|%d", i)
	}
	st := waitTerminal(t, rt, "chain")
	if st.State != runtime.StateSucceeded || st.CurrentStep != 2 || string(st.Result) != "x|0|1|2" {
		t.Errorf("Status = %+v", st)
	}
	if !maps.Equal(st.Headers, headers) {
		t.Errorf("Status headers = %v, want %v", st.Headers, headers)
	}
}

func TestManyRunsConcurrently(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	var log stepLog
	rt := newRuntime(t, q, chainRunner(&log, 3), hook, runtime.WithMaxConcurrentSteps(8))
	startRun(t, rt)
	const n = 50
	for i := range n {
		mustSubmit(t, rt, runtime.RunSpec{RunID: fmt.Sprintf("r%02d", i), Input: []byte(fmt.Sprint(i))})
	}
	testenv.Eventually(t, waitTimeout, "every run to end", func() bool { return hook.total() >= n })
	for i := range n {
		id := fmt.Sprintf("r%02d", i)
		o := hook.outcomes(id)
		if len(o) != 1 || o[0].Status != terminal.Succeeded || string(o[0].Result) != fmt.Sprintf("%d|0|1|2|3", i) {
			t.Errorf("run %s: hook calls %+v", id, o)
		}
		if len(log.of(id)) != 4 {
			t.Errorf("run %s: %d steps, want 4", id, len(log.of(id)))
		}
	}
}

func TestContinueAfterDelaysNextStep(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	const delay = 500 * time.Millisecond
	var returned, step1At atomic.Int64
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			defer func() { returned.Store(time.Now().UnixNano()) }()
			return steprunner.ContinueAfter([]byte("later"), delay), nil
		}
		step1At.Store(time.Now().UnixNano())
		return steprunner.Succeed(s.Payload), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "delayed"})
	startRun(t, rt)

	st := waitStatus(t, rt, "delayed", "step 1 scheduled", func(s runtime.RunStatus) bool { return s.CurrentStep == 1 || s.State.Terminal() })
	if st.State != runtime.StatePending || !st.Scheduled || st.CurrentStep != 1 {
		t.Errorf("Status during the delay = %+v, want pending, scheduled, at step 1", st)
	}
	o := hook.wait(t, "delayed")
	if o.Status != terminal.Succeeded || string(o.Result) != "later" || o.FinalStep != 1 {
		t.Errorf("outcome = %+v", o)
	}
	if gap := time.Duration(step1At.Load() - returned.Load()); gap < delay-5*time.Millisecond {
		t.Errorf("step 1 ran %v after step 0 returned, want at least %v", gap, delay)
	}
}

func TestPermanentErrorFailsAndDeadLetters(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.Number == 0 {
			return steprunner.Continue(nil), nil
		}
		return steprunner.Outcome{}, steprunner.Permanent(errors.New("bad input"))
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "perm", MaxAttemptsPerStep: 5})
	startRun(t, rt)

	o := hook.wait(t, "perm")
	if o.Status != terminal.Failed || o.Error != "bad input" || o.FinalStep != 1 || o.Result != nil {
		t.Errorf("outcome = %+v, want failed, bad input, step 1", o)
	}
	st := waitTerminal(t, rt, "perm")
	if st.State != runtime.StateFailed || st.Error != "bad input" || st.CurrentStep != 1 {
		t.Errorf("Status = %+v", st)
	}
	steps := log.of("perm")
	if len(steps) != 2 {
		t.Fatalf("runner called %d times, want 2 (a permanent error is not retried)", len(steps))
	}
	dead := deadJobs(t, q, stepsQueue)
	if len(dead) != 1 || dead[0].ID != steps[1].JobID {
		t.Fatalf("dead step jobs = %v, want exactly job %s", jobIDs(dead), steps[1].JobID)
	}
	if dead[0].Headers[runtime.HeaderRunID] != "perm" || dead[0].Headers[runtime.HeaderStep] != "1" {
		t.Errorf("dead job headers = %v", dead[0].Headers)
	}
	checkDeadNoticesDrained(t, q)
	whenIdle(t, q, "the run was settled twice", func() bool { return len(hook.outcomes("perm")) == 1 })
}

// checkDeadNoticesDrained waits until no notice of a dead step job is left
// unhandled: whatever the runtime uses to learn about dead steps must not
// pile up for steps it dead-lettered itself.
func checkDeadNoticesDrained(t testing.TB, q *queue.Queue) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "the dead-step notices to be handled", func() bool {
		names, err := q.Queues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if name == stepsQueue || name == notifyQueue {
				continue
			}
			if s := mustStats(t, q, name); s.Pending+s.Scheduled+s.Claimed+s.Dead != 0 {
				return false
			}
		}
		return true
	})
}

func jobIDs(jobs []*queue.Job) []string {
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

func TestFailOutcomeIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var calls atomic.Int32
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		calls.Add(1)
		return steprunner.Fail("card declined"), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "fail"})
	startRun(t, rt)

	o := hook.wait(t, "fail")
	if o.Status != terminal.Failed || o.Error != "card declined" || o.FinalStep != 0 {
		t.Errorf("outcome = %+v", o)
	}
	st := waitTerminal(t, rt, "fail")
	if st.State != runtime.StateFailed || st.Error != "card declined" {
		t.Errorf("Status = %+v", st)
	}
	if dead := deadJobs(t, q, stepsQueue); len(dead) != 0 {
		t.Errorf("Fail dead-lettered the step: %v", jobIDs(dead))
	}
	if s := mustStats(t, q, stepsQueue); s != (queue.Stats{}) {
		t.Errorf("step queue stats = %+v, want empty", s)
	}
	whenIdle(t, q, "Fail was retried", func() bool { return calls.Load() == 1 })
}

func TestTransientErrorsExhaustAttempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		perRun      uint32 // RunSpec.MaxAttemptsPerStep
		queueMax    uint32 // queue.WithMaxAttempts; 0: default
		wantAttempt uint32
	}{
		{"per-run limit", 3, 0, 3},
		{"queue default", 0, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var qopts []queue.Option
			if tc.queueMax > 0 {
				qopts = append(qopts, queue.WithMaxAttempts(tc.queueMax))
			}
			q := openQueue(t, memURL(), qopts...)
			var log stepLog
			hook := &hookRecorder{}
			rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
				log.add(s)
				return steprunner.Outcome{}, fmt.Errorf("flaky %d", s.Attempt)
			}), hook)
			mustSubmit(t, rt, runtime.RunSpec{RunID: "flaky", MaxAttemptsPerStep: tc.perRun})
			startRun(t, rt)

			o := hook.wait(t, "flaky")
			wantErr := fmt.Sprintf("flaky %d", tc.wantAttempt)
			if o.Status != terminal.Failed || o.Error != wantErr || o.FinalStep != 0 {
				t.Errorf("outcome = %+v, want failed with %q", o, wantErr)
			}
			steps := log.of("flaky")
			if len(steps) != int(tc.wantAttempt) {
				t.Fatalf("attempts = %d, want %d", len(steps), tc.wantAttempt)
			}
			for i, s := range steps {
				if s.Attempt != uint32(i+1) || s.MaxAttempts != tc.wantAttempt || s.JobID != steps[0].JobID || s.Number != 0 {
					t.Errorf("delivery %d = attempt %d/%d job %s step %d; want attempt %d/%d of job %s, step 0",
						i, s.Attempt, s.MaxAttempts, s.JobID, s.Number, i+1, tc.wantAttempt, steps[0].JobID)
				}
			}
			if !steps[len(steps)-1].LastAttempt() || steps[0].LastAttempt() && tc.wantAttempt > 1 {
				t.Errorf("LastAttempt wrong: %+v", steps)
			}
			dead := deadJobs(t, q, stepsQueue)
			if len(dead) != 1 || dead[0].ID != steps[0].JobID {
				t.Errorf("dead jobs = %v, want %s", jobIDs(dead), steps[0].JobID)
			}
			if st := waitTerminal(t, rt, "flaky"); st.State != runtime.StateFailed || st.Error != wantErr {
				t.Errorf("Status = %+v", st)
			}
			checkDeadNoticesDrained(t, q)
			whenIdle(t, q, "the run was settled twice", func() bool { return len(hook.outcomes("flaky")) == 1 })
		})
	}
}

func TestTransientErrorThenSuccess(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.Attempt < 3 {
			return steprunner.Outcome{}, errors.New("try again")
		}
		return steprunner.Succeed([]byte(fmt.Sprint(s.Attempt))), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "retry", MaxAttemptsPerStep: 4})
	startRun(t, rt)

	// While it retries, Status keeps reporting the run as active at step 0.
	o := hook.wait(t, "retry")
	if o.Status != terminal.Succeeded || string(o.Result) != "3" {
		t.Errorf("outcome = %+v, want succeeded on attempt 3", o)
	}
	var attempts []uint32
	for _, s := range log.of("retry") {
		attempts = append(attempts, s.Attempt)
	}
	if !slices.Equal(attempts, []uint32{1, 2, 3}) {
		t.Errorf("attempts = %v, want [1 2 3]", attempts)
	}
	if dead := deadJobs(t, q, stepsQueue); len(dead) != 0 {
		t.Errorf("dead jobs = %v, want none", jobIDs(dead))
	}
}

func TestRetryBackoffShowsScheduled(t *testing.T) {
	t.Parallel()
	// A long backoff makes the retry visible as a scheduled step.
	q := openQueue(t, memURL(), queue.WithRetryBackoff(time.Hour, time.Hour))
	var calls atomic.Int32
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		calls.Add(1)
		return steprunner.Outcome{}, errors.New("later")
	}), terminal.Noop)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "backoff"})
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "the first attempt", func() bool { return calls.Load() == 1 })
	st := waitStatus(t, rt, "backoff", "scheduled retry", func(s runtime.RunStatus) bool { return s.Scheduled })
	if st.State != runtime.StatePending || st.CurrentStep != 0 {
		t.Errorf("Status = %+v, want pending (scheduled) at step 0", st)
	}
}

func TestPanicIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.RunID == "always" || s.Attempt == 1 {
			panic("kaboom " + s.RunID)
		}
		return steprunner.Succeed([]byte("recovered")), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "always", MaxAttemptsPerStep: 2})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "once", MaxAttemptsPerStep: 2})
	startRun(t, rt)

	o := hook.wait(t, "always")
	if o.Status != terminal.Failed || !strings.Contains(o.Error, "kaboom always") {
		t.Errorf("always-panicking run: outcome %+v, want failed with the panic message", o)
	}
	if n := len(log.of("always")); n != 2 {
		t.Errorf("always-panicking run: %d attempts, want 2", n)
	}
	if dead := deadJobs(t, q, stepsQueue); len(dead) != 1 {
		t.Errorf("dead jobs = %v, want the always-panicking step", jobIDs(dead))
	}
	o = hook.wait(t, "once")
	if o.Status != terminal.Succeeded || string(o.Result) != "recovered" {
		t.Errorf("run that panicked once: outcome %+v, want succeeded", o)
	}
}

func TestZeroOutcomeIsAnError(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Outcome{}, nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "zero", MaxAttemptsPerStep: 1})
	startRun(t, rt)
	o := hook.wait(t, "zero")
	if o.Status != terminal.Failed || !strings.Contains(o.Error, "zero Outcome") {
		t.Errorf("outcome = %+v, want failed naming the zero Outcome", o)
	}
}

func TestHeadersReachStepsHookAndStatus(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	hook := &hookRecorder{}
	rt := newRuntime(t, q, chainRunner(&log, 1), hook)
	h := map[string]string{"tenant": "acme", "trace": "abc-123", "x.workflow.y": "not reserved", "Workflow.Case": "not reserved either"}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "hdr", Headers: h})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "nohdr"})
	startRun(t, rt)

	o := hook.wait(t, "hdr")
	if !maps.Equal(o.Headers, h) {
		t.Errorf("hook headers = %v, want %v", o.Headers, h)
	}
	for _, s := range log.of("hdr") {
		if !maps.Equal(s.Headers, h) {
			t.Errorf("step %d headers = %v, want %v", s.Number, s.Headers, h)
		}
	}
	if st := waitTerminal(t, rt, "hdr"); !maps.Equal(st.Headers, h) {
		t.Errorf("Status headers = %v, want %v", st.Headers, h)
	}
	o = hook.wait(t, "nohdr")
	if len(o.Headers) != 0 {
		t.Errorf("run without headers: hook headers %v", o.Headers)
	}
	for _, s := range log.of("nohdr") {
		if len(s.Headers) != 0 {
			t.Errorf("run without headers: step %d headers %v", s.Number, s.Headers)
		}
	}
}

func TestPriorityOrdersRuns(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	rt := newRuntime(t, q, succeedRunner(&log), terminal.Noop, runtime.WithMaxConcurrentSteps(1))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "low", Priority: -1})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "mid"})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "high", Priority: 5})
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "three steps", func() bool { return log.count() == 3 })
	var order []string
	log.mu.Lock()
	for _, s := range log.steps {
		order = append(order, s.RunID)
	}
	log.mu.Unlock()
	if !slices.Equal(order, []string{"high", "mid", "low"}) {
		t.Errorf("order = %v, want [high mid low]", order)
	}
}

func TestCustomQueueName(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, chainRunner(nil, 1), hook, runtime.WithQueueName("orders"), runtime.WithNotifyQueueName("orders-done"))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "custom"})
	names, err := q.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, "orders") || slices.Contains(names, stepsQueue) {
		t.Errorf("queues = %v, want orders and not %s", names, stepsQueue)
	}
	startRun(t, rt)
	if o := hook.wait(t, "custom"); o.Status != terminal.Succeeded {
		t.Errorf("outcome = %+v", o)
	}
	names, _ = q.Queues(context.Background())
	if !slices.Contains(names, "orders-done") || slices.Contains(names, notifyQueue) {
		t.Errorf("queues = %v, want orders-done and not %s", names, notifyQueue)
	}
}

func TestStatusFromSecondRuntime(t *testing.T) {
	t.Parallel()
	url := memURL()
	q := openQueue(t, url)
	release := make(chan struct{})
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.RunID == "blocked" {
			<-release
		}
		return steprunner.Succeed([]byte("r-" + s.RunID)), nil
	}), terminal.Noop)
	// Observers: one on the same handle, one on another handle of the same
	// store. Neither runs.
	observers := map[string]*runtime.Runtime{
		"same queue":     newRuntime(t, q, succeedRunner(nil), terminal.Noop),
		"second handle":  newRuntime(t, openQueue(t, url), succeedRunner(nil), terminal.Noop),
		"running itself": rt,
	}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "blocked"})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "done", Headers: map[string]string{"k": "v"}})
	startRun(t, rt)
	for name, obs := range observers {
		waitStatus(t, obs, "blocked", name+": running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
		st := waitTerminal(t, obs, "done")
		if st.State != runtime.StateSucceeded || string(st.Result) != "r-done" || st.RunID != "done" || st.Headers["k"] != "v" {
			t.Errorf("%s: Status(done) = %+v", name, st)
		}
		if _, err := obs.Status(context.Background(), "never-submitted"); !errors.Is(err, runtime.ErrRunNotFound) {
			t.Errorf("%s: Status of an unknown run: %v, want ErrRunNotFound", name, err)
		}
	}
	close(release)
	for name, obs := range observers {
		if st := waitTerminal(t, obs, "blocked"); st.State != runtime.StateSucceeded {
			t.Errorf("%s: Status(blocked) = %+v", name, st)
		}
	}
}

func TestHookRetriedUntilItSucceeds(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{fail: func(o terminal.Outcome, n int) error {
		if n <= 2 {
			return fmt.Errorf("receiver down (call %d)", n)
		}
		return nil
	}}
	rt := newRuntime(t, q, succeedRunner(nil), terminal.HookFunc(hook.OnTermination))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "hooked", Input: []byte("r")})
	startRun(t, rt)

	testenv.Eventually(t, waitTimeout, "three hook calls", func() bool { return len(hook.outcomes("hooked")) >= 3 })
	testenv.Eventually(t, waitTimeout, "the notification to be acknowledged", func() bool {
		return mustStats(t, q, notifyQueue) == queue.Stats{}
	})
	calls := hook.outcomes("hooked")
	if len(calls) != 3 {
		t.Fatalf("hook called %d times, want 3", len(calls))
	}
	for i, c := range calls {
		if !outcomeEqual(c, calls[0]) || c.Status != terminal.Succeeded || string(c.Result) != "r|0" {
			t.Errorf("call %d = %+v; every call must carry the same outcome as the first %+v", i, c, calls[0])
		}
	}
	if dead := deadJobs(t, q, notifyQueue); len(dead) != 0 {
		t.Errorf("dead notifications: %v", jobIDs(dead))
	}
	whenIdle(t, q, "the hook was called again after succeeding", func() bool { return len(hook.outcomes("hooked")) == 3 })
}

func TestHookPermanentErrorDeadLettersNotification(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{fail: func(o terminal.Outcome, n int) error {
		return &terminal.DeliveryError{Permanent: true, Err: errors.New("gone")}
	}}
	rt := newRuntime(t, q, succeedRunner(nil), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "gone"})
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "the notification to be dead-lettered", func() bool { return len(deadJobs(t, q, notifyQueue)) == 1 })
	if n := len(hook.outcomes("gone")); n != 1 {
		t.Errorf("hook called %d times, want 1 (permanent error)", n)
	}
	if st := waitTerminal(t, rt, "gone"); st.State != runtime.StateSucceeded {
		t.Errorf("Status = %+v: the hook's failure must not change the run", st)
	}
}

func TestHookPanicIsRetried(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{fail: func(o terminal.Outcome, n int) error {
		if n == 1 {
			panic("hook bug")
		}
		return nil
	}}
	rt := newRuntime(t, q, succeedRunner(nil), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "hookpanic"})
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "a second hook call", func() bool { return len(hook.outcomes("hookpanic")) == 2 })
	testenv.Eventually(t, waitTimeout, "the notification to be acknowledged", func() bool {
		return mustStats(t, q, notifyQueue) == queue.Stats{}
	})
}

func TestNoopHookEnqueuesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hook terminal.Hook
	}{{"Noop", terminal.Noop}, {"nil", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := openQueue(t, memURL())
			var log stepLog
			rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
				log.add(s)
				switch s.RunID {
				case "fails":
					return steprunner.Fail("no"), nil
				case "perm":
					return steprunner.Outcome{}, steprunner.Permanent(errors.New("perm"))
				}
				return steprunner.Succeed(nil), nil
			}), tc.hook)
			for _, id := range []string{"ok", "fails", "perm", "cancelled"} {
				mustSubmit(t, rt, runtime.RunSpec{RunID: id})
			}
			if ok, err := rt.Cancel(context.Background(), "cancelled"); !ok || err != nil {
				t.Fatalf("Cancel = %v, %v", ok, err)
			}
			startRun(t, rt)
			for _, id := range []string{"ok", "fails", "perm", "cancelled"} {
				waitTerminal(t, rt, id)
			}
			if s := mustStats(t, q, notifyQueue); s != (queue.Stats{}) {
				t.Errorf("notify queue stats = %+v, want zero", s)
			}
			names, err := q.Queues(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(names, notifyQueue) {
				t.Errorf("Queues() = %v: a Noop hook must not create %s", names, notifyQueue)
			}
		})
	}
}

// Not parallel: a 100ms lease is renewed by an in-process ticker (every
// lease/3), and on a small machine running the race detector next to the
// CPU-heavy parallel tests (4 MiB payloads, crash-test children) that
// goroutine can be delayed by more than the lease, which loses the claim.
// Sequential tests run alone, before the parallel ones resume.
func TestLongStepKeepsItsLease(t *testing.T) {
	q := openQueue(t, memURL(), queue.WithLease(250*time.Millisecond))
	var log stepLog
	var cancelled atomic.Value
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		select {
		case <-time.After(800 * time.Millisecond):
		case <-ctx.Done():
			cancelled.Store(fmt.Sprint(context.Cause(ctx)))
			return steprunner.Outcome{}, ctx.Err()
		}
		return steprunner.Succeed([]byte("slow")), nil
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "slow"})
	startRun(t, rt)

	o := hook.wait(t, "slow")
	if c := cancelled.Load(); c != nil {
		t.Errorf("the step's ctx was cancelled: %v", c)
	}
	if o.Status != terminal.Succeeded || string(o.Result) != "slow" {
		t.Errorf("outcome = %+v", o)
	}
	whenIdle(t, q, "the step ran again", func() bool { return len(log.of("slow")) == 1 })
	if s := log.of("slow"); len(s) != 1 || s[0].Attempt != 1 {
		t.Errorf("deliveries = %+v, want one, attempt 1", s)
	}
}

func TestLargePayloadsRoundTrip(t *testing.T) {
	t.Parallel()
	const size = 4 << 20
	input, cont, result := randBytes(t, size), randBytes(t, size), randBytes(t, size)
	q := openQueue(t, memURL())
	var bad atomic.Value
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch s.Number {
		case 0:
			if !bytes.Equal(s.Payload, input) {
				bad.Store(fmt.Sprintf("step 0 got %d bytes, not the input", len(s.Payload)))
			}
			return steprunner.Continue(cont), nil
		default:
			if !bytes.Equal(s.Payload, cont) {
				bad.Store(fmt.Sprintf("step 1 got %d bytes, not the continue payload", len(s.Payload)))
			}
			return steprunner.Succeed(result), nil
		}
	}), hook)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "big", Input: input})
	// Idempotent re-submit of a large input.
	if out := mustSubmit(t, rt, runtime.RunSpec{RunID: "big", Input: input}); out.NewlySubmitted {
		t.Error("re-submit of the large input created a second run")
	}
	startRun(t, rt)
	o := hook.wait(t, "big")
	if b := bad.Load(); b != nil {
		t.Error(b)
	}
	if o.Status != terminal.Succeeded || !bytes.Equal(o.Result, result) {
		t.Errorf("outcome: status %v, %d result bytes (equal: %v)", o.Status, len(o.Result), bytes.Equal(o.Result, result))
	}
	st := waitTerminal(t, rt, "big")
	if !bytes.Equal(st.Result, result) {
		t.Errorf("Status result: %d bytes, not the result", len(st.Result))
	}
}

func randBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunStoppedWhileStartingReturnsNil: Run whose ctx ends before or while
// it starts returns nil, as its doc says of a ctx that ends. Before, Run
// with a hook returned the error of recording its notify queue: with an
// ended ctx, context.Canceled at once; with its Runtime in a member, whose
// commit is a call, ErrOutcomeUnknown when the ctx ended during the call
// (TestNewDoesNoIO failed so with STEPWELL_RUNTIME_STORE=member-s3).
func TestRunStoppedWhileStartingReturnsNil(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), &hookRecorder{})
	for _, wait := range []time.Duration{-1, 0, 100 * time.Microsecond, time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		when := fmt.Sprint(wait, " after Run started")
		if wait < 0 {
			cancel()
			when = "before Run"
		} else {
			time.AfterFunc(wait, cancel)
		}
		if err := rt.Run(ctx); err != nil {
			t.Errorf("Run with its ctx ended %s = %v, want nil", when, err)
		}
		cancel()
	}
}

// Run, its ctx done, stops claiming and waits for the running step, which
// settles, and then returns. In a synctest bubble, synctest.Wait proves
// Run has taken in the end of its ctx and stands still waiting for the
// step (rather than a fixed wait hoping it got that far). The store is a
// plain mem:// one in every store mode: a cluster member's network calls
// would never stand still.
func TestRunDrainsRunningSteps(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q, err := queue.Open(ctx, testenv.MemURL(t.Name()), fastQueueOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close(ctx)
		started := make(chan struct{})
		release := make(chan struct{})
		var releaseOnce sync.Once
		free := func() { releaseOnce.Do(func() { close(release) }) }
		defer free() // a failed test lets the step end too
		var ctxErr atomic.Value
		hook := &hookRecorder{}
		rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
			close(started)
			<-release
			if ctx.Err() != nil {
				ctxErr.Store(fmt.Sprint(context.Cause(ctx)))
			}
			return steprunner.Succeed([]byte("drained")), nil
		}), hook)
		mustSubmit(t, rt, runtime.RunSpec{RunID: "drain"})
		runCtx, stop := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- rt.Run(runCtx) }()
		<-started

		stop()
		synctest.Wait() // Run has seen its ctx end and waits
		select {
		case err := <-stopped:
			t.Fatalf("Run returned (%v) while a step was still running", err)
		default:
		}
		free()
		if err := <-stopped; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if e := ctxErr.Load(); e != nil {
			t.Errorf("the step's ctx was cancelled during the drain: %v", e)
		}
		// The settlement committed before Run returned.
		st, err := rt.Status(ctx, "drain")
		if err != nil || st.State != runtime.StateSucceeded || string(st.Result) != "drained" {
			t.Fatalf("Status right after Run returned = %+v, %v; want succeeded", st, err)
		}
		// The notification is delivered by the next Run.
		runCtx, stop = context.WithCancel(ctx)
		go func() { stopped <- rt.Run(runCtx) }()
		if o := hook.wait(t, "drain"); o.Status != terminal.Succeeded {
			t.Errorf("outcome = %+v", o)
		}
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("second Run: %v", err)
		}
	})
}

func TestDrainTimeoutCancelsStepWithShutdownCause(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	var log stepLog
	causes := make(chan error, 4)
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if log.add(s); log.count() == 1 {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return steprunner.Outcome{}, ctx.Err()
		}
		return steprunner.Succeed([]byte(fmt.Sprint(s.Attempt))), nil
	}), terminal.Noop, runtime.WithDrainTimeout(50*time.Millisecond))
	// One attempt: the one the drain cut short must not use it up.
	mustSubmit(t, rt, runtime.RunSpec{RunID: "shutdown", MaxAttemptsPerStep: 1})
	r := startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "the step to start", func() bool { return log.count() == 1 })
	r.stop()
	select {
	case c := <-causes:
		if !errors.Is(c, steprunner.ErrShutdown) {
			t.Errorf("cause = %v, want ErrShutdown", c)
		}
	default:
		t.Fatal("Run returned without cancelling the step after the drain timeout")
	}
	// The step is delivered again by the next Run, as its first attempt
	// again: the drain released it.
	startRun(t, rt)
	st := waitTerminal(t, rt, "shutdown")
	if st.State != runtime.StateSucceeded || string(st.Result) != "1" {
		t.Errorf("Status = %+v, want succeeded on attempt 1", st)
	}
}

// The default drain timeout lets Run return within a Kubernetes pod's
// default 30 s termination grace period, with time left to settle.
func TestDefaultDrainTimeoutFitsKubernetesGrace(t *testing.T) {
	if d := runtime.DefaultDrainTimeout; d <= 0 || d > 25*time.Second {
		t.Fatalf("DefaultDrainTimeout = %v, want 0 < d <= 25s (30 s grace, minus settling and Close)", d)
	}
}

// Many short steps under a very short lease: lease renewals (every lease/3)
// run while steps settle, which the race detector checks. Lost leases only
// cost retries here (high attempt limit); every run must still succeed
// exactly once with the right result.
func TestSettleWhileRenewingLeases(t *testing.T) {
	t.Parallel()
	lease := 6 * time.Millisecond
	if memberMode() {
		// A member renews by a call to the writer process: at 6ms most
		// leases run out under the race detector on 2 cores, and the runs
		// took up to 12s alone, over 15s beside other tests; at 15ms once
		// 25s. At 50ms renewals (every 16ms) still race settlements, and
		// leases run out only when the machine is busy.
		lease = 50 * time.Millisecond
	}
	url := memURL()
	setWriterFlags(url, fmt.Sprint("lease=", lease)) // member mode: the writer's reaper runs every lease/4
	q := openQueue(t, url, queue.WithLease(lease))
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		time.Sleep(4 * time.Millisecond)
		if s.Number == 2 {
			return steprunner.Succeed(s.Payload), nil
		}
		return steprunner.Continue(fmt.Appendf(bytes.Clone(s.Payload), "%d", s.Number)), nil
	}), hook, runtime.WithMaxConcurrentSteps(8))
	const n = 30
	for i := range n {
		mustSubmit(t, rt, runtime.RunSpec{RunID: fmt.Sprintf("renew-%02d", i), MaxAttemptsPerStep: 1000})
	}
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "every run to end", func() bool { return hook.total() >= n })
	for i := range n {
		id := fmt.Sprintf("renew-%02d", i)
		if st := waitTerminal(t, rt, id); st.State != runtime.StateSucceeded || string(st.Result) != "01" {
			t.Errorf("run %s: %+v", id, st)
		}
	}
}

// With one step slot, chaining runs a started run to its end before the
// next run starts (each settlement claims its run's next step); without
// it, steps wait in the queue in FIFO order and runs interleave.
func TestStepChainingOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		chain bool
		want  string
	}{
		{true, "a0 a1 a2 b0 b1 b2"},
		{false, "a0 b0 a1 b1 a2 b2"},
	} {
		t.Run(fmt.Sprint("chain=", tc.chain), func(t *testing.T) {
			q := openQueue(t, memURL())
			var log stepLog
			rt := newRuntime(t, q, chainRunner(&log, 2), terminal.Noop,
				runtime.WithMaxConcurrentSteps(1), runtime.WithStepChaining(tc.chain))
			mustSubmit(t, rt, runtime.RunSpec{RunID: "a"})
			mustSubmit(t, rt, runtime.RunSpec{RunID: "b"})
			startRun(t, rt)
			testenv.Eventually(t, waitTimeout, "six steps", func() bool { return log.count() == 6 })
			var order []string
			log.mu.Lock()
			for _, s := range log.steps {
				order = append(order, fmt.Sprint(s.RunID, s.Number))
			}
			log.mu.Unlock()
			if got := strings.Join(order, " "); got != tc.want {
				t.Errorf("order = %q, want %q", got, tc.want)
			}
			for _, id := range []string{"a", "b"} {
				if st := waitTerminal(t, rt, id); st.State != runtime.StateSucceeded {
					t.Errorf("run %s: %v", id, st.State)
				}
			}
		})
	}
}

// With a Run idle, a run goes from Submit to its hook in four commits: the
// submit claims step 0 for an idle slot (queuex.API.WithDispatch),
// each Continue chains the next step, and the last settlement claims the
// notification for an idle hook slot. The notification's ack is the fifth.
func TestIdleRunCommitsPerRun(t *testing.T) {
	t.Parallel()
	q, _, hooks, rt := chainSetup(t, 2)
	startRun(t, rt)
	// A first run makes sure the Run's workers are up and idle.
	mustSubmit(t, rt, runtime.RunSpec{RunID: "warm"})
	hooks.wait(t, "warm")
	testenv.Eventually(t, waitTimeout, "the warm-up notification acked", func() bool {
		return mustStats(t, q, "workflow-notify").Claimed == 0
	})
	before, callsBefore := q.StorageStats().Transactions, q.StorageStats().ClusterCalls
	mustSubmit(t, rt, runtime.RunSpec{RunID: "r"})
	hooks.wait(t, "r")
	statsCalls := int64(0)
	testenv.Eventually(t, waitTimeout, "the notification acked", func() bool {
		statsCalls++
		s := mustStats(t, q, "workflow-notify")
		return s.Claimed+s.Pending == 0
	})
	if memberMode() {
		// A member's transactions are the writer's to count; it counts its
		// calls: the 5 commits, as in one process (step 0 dispatched to
		// the parked step loop, each step's record carried with it, the
		// notification dispatched to the parked hook loop). A long-poll
		// that times out meanwhile and is made again adds one: the Run's
		// four claim loops' (every 10s) or the events call's (every 5s).
		calls := q.StorageStats().ClusterCalls - callsBefore - statsCalls
		t.Logf("member: %d calls to the writer for a 3-step run on an idle Run", calls)
		if calls > 7 {
			t.Fatalf("%d calls to the writer for a 3-step run on an idle Run, want 5 (and a long-poll or two)", calls)
		}
		return
	}
	if n := q.StorageStats().Transactions - before; n != 5 {
		t.Fatalf("%d transactions for a 3-step run on an idle Run, want 5", n)
	}
}

// A step of a run submitted without headers gets nil Step.Headers (its
// job's headers are all reserved ones); with headers, exactly the
// submitter's.
func TestStepHeadersAreTheSubmitters(t *testing.T) {
	_, log, hook, rt := chainSetup(t, 1)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "bare"})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "with", Headers: map[string]string{"h": "v"}})
	hook.wait(t, "bare")
	hook.wait(t, "with")
	for _, s := range log.of("bare") {
		if s.Headers != nil {
			t.Errorf("step %d of a run without headers: Headers = %v, want nil", s.Number, s.Headers)
		}
	}
	for _, s := range log.of("with") {
		if len(s.Headers) != 1 || s.Headers["h"] != "v" {
			t.Errorf("step %d: Headers = %v, want map[h:v]", s.Number, s.Headers)
		}
	}
	if n := len(log.of("bare")) + len(log.of("with")); n != 4 {
		t.Fatalf("%d steps logged, want 4", n)
	}
}
