package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// linesWith returns the lines of log that contain every one of subs.
func linesWith(log string, subs ...string) []string {
	var out []string
next:
	for _, line := range strings.Split(log, "\n") {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// Failed attempts are logged (a retry at WARN, the end of a run at ERROR,
// a panic with its stack) with run ID, step and attempt, and reported to
// the ErrorHandler once their settlement committed; a failed hook delivery
// is logged too.
func TestStepErrorsAreLoggedAndReported(t *testing.T) {
	t.Parallel()
	logs := &testenv.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	var mu sync.Mutex
	var reported []runtime.StepError
	handler := func(ctx context.Context, e *runtime.StepError) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, *e)
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.RunID == "doomed":
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("card declined"))
		case s.Attempt == 1:
			return steprunner.Outcome{}, errors.New("flaky upstream")
		case s.Attempt == 2:
			panic("boom")
		}
		return steprunner.Succeed(nil), nil
	})
	var hookOnce sync.Once
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		var err error
		hookOnce.Do(func() { err = errors.New("receiver down") })
		return err
	})
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, runner, hook, runtime.WithLogger(logger), runtime.WithErrorHandler(handler))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "flaky", MaxAttemptsPerStep: 5})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "doomed", MaxAttemptsPerStep: 5})
	run := startRun(t, rt)
	if st := waitTerminal(t, rt, "flaky"); st.State != runtime.StateSucceeded {
		t.Fatalf("flaky: %v", st.State)
	}
	if st := waitTerminal(t, rt, "doomed"); st.State != runtime.StateFailed {
		t.Fatalf("doomed: %v", st.State)
	}
	testenv.Eventually(t, waitTimeout, "a failed hook delivery to be logged", func() bool {
		return len(linesWith(logs.String(), "level=WARN", "terminal hook failed", "receiver down")) > 0
	})
	// A failed attempt is logged and then reported once its settlement
	// committed: that can come after the run's next attempt, or its end,
	// is visible. Wait for the three, then check that there are no more.
	testenv.Eventually(t, waitTimeout, "3 failed attempts reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) >= 3
	})
	// A report follows its settlement's commit in the worker: once the
	// queues are idle and Run has returned, every report has been made
	// (and there must be no fourth).
	waitIdle(t, q)
	run.stop()

	mu.Lock()
	defer mu.Unlock()
	got := map[string]runtime.StepError{}
	for _, e := range reported {
		got[e.RunID+"/"+string(rune('0'+e.Attempt))] = e
	}
	if len(reported) != 3 {
		t.Fatalf("the handler heard of %d failed attempts, want 3: %+v", len(reported), reported)
	}
	if e := got["flaky/1"]; e.Final || e.Panic != nil || e.Err == nil || !strings.Contains(e.Err.Error(), "flaky upstream") || e.MaxAttempts != 5 {
		t.Errorf("flaky attempt 1: %+v", e)
	}
	if e := got["flaky/2"]; e.Final || e.Panic != "boom" || !bytes.Contains(e.Stack, []byte("panic")) {
		t.Errorf("flaky attempt 2 (panic): %+v", e)
	}
	if e := got["doomed/1"]; !e.Final || !steprunner.IsPermanent(e.Err) {
		t.Errorf("doomed attempt 1: %+v", e)
	}
	if l := linesWith(logs.String(), "level=WARN", "will be retried", "run_id=flaky", "attempt=1", "flaky upstream"); len(l) != 1 {
		t.Errorf("retry of flaky attempt 1 logged %d times: %q", len(l), l)
	}
	if l := linesWith(logs.String(), "level=WARN", "will be retried", "run_id=flaky", "attempt=2", "stack="); len(l) != 1 {
		t.Errorf("the panic of flaky attempt 2 is not logged with its stack: %q", l)
	}
	if l := linesWith(logs.String(), "level=ERROR", "the run fails", "run_id=doomed", "step=0", "card declined"); len(l) != 1 {
		t.Errorf("doomed's failure logged %d times at ERROR: %q", len(l), l)
	}
}

// brokenErr's Error reads its receiver: a nil *brokenErr returned as an
// error (a common slip) panics when read.
type brokenErr struct{ msg string }

func (e *brokenErr) Error() string { return e.msg }

// TestHostileSteps: a step that calls runtime.Goexit (t.FailNow does), or
// returns an error that panics when read (a typed nil), fails its attempt
// like any other: the ErrorHandler is told, the step is retried, and Run
// returns at the end. Before: Goexit lost its slot for good (with one
// slot nothing ran again, and Run did not return), a typed nil skipped
// the ErrorHandler and failed the run with the runtime's own stack, and
// one returned after its step timeout crashed the process.
func TestHostileSteps(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reported []string
	handler := func(ctx context.Context, e *runtime.StepError) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, e.RunID+": "+e.Err.Error())
	}
	late := make(chan struct{})
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Attempt > 1 {
			return steprunner.Succeed(nil), nil
		}
		switch s.RunID {
		case "goexit", "goexit-timeout":
			goruntime.Goexit()
		case "typed-nil":
			var e *brokenErr
			return steprunner.Outcome{}, e
		case "late":
			<-ctx.Done() // its timeout
			time.Sleep(20 * time.Millisecond)
			defer close(late)
			var e *brokenErr
			return steprunner.Outcome{}, e // read after the step was settled
		}
		return steprunner.Succeed(nil), nil
	})
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook, runtime.WithMaxConcurrentSteps(1), runtime.WithErrorHandler(handler))
	for _, id := range []string{"goexit", "typed-nil"} {
		mustSubmit(t, rt, runtime.RunSpec{RunID: id})
	}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "late", StepTimeout: 50 * time.Millisecond})
	// On a goroutine of its own (a step timeout): a failed attempt at once,
	// not a timeout a minute later.
	mustSubmit(t, rt, runtime.RunSpec{RunID: "goexit-timeout", StepTimeout: time.Minute})
	r := startRun(t, rt)
	for _, id := range []string{"goexit", "typed-nil", "late", "goexit-timeout"} {
		if o := hook.wait(t, id); o.Status != terminal.Succeeded {
			t.Errorf("%s: %+v, want succeeded at its second attempt", id, o)
		}
	}
	<-late
	if err := r.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(reported, "\n"); !strings.Contains(got, "typed-nil: an error of type *runtime_test.brokenErr whose Error method panicked") ||
		!strings.Contains(got, "late: ") || !strings.Contains(got, "goexit-timeout: runtime: the step called runtime.Goexit") {
		t.Errorf("the ErrorHandler was told:\n%s", got)
	}
}

func TestWithErrorHandlerNil(t *testing.T) {
	q := openQueue(t, memURL())
	if _, err := runtime.New(q, succeedRunner(nil), nil, runtime.WithErrorHandler(nil)); !errors.Is(err, runtime.ErrInvalidOption) {
		t.Fatalf("WithErrorHandler(nil): %v, want ErrInvalidOption", err)
	}
}
