package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Tests of what a step's huge answers do: error and reason texts are
// bounded in every record (64 KiB, with the original size noted), and a
// settlement that cannot commit fails the run with its reason, promptly
// and logged, instead of leaving the step to run out its attempts by
// lease expiry.

const (
	// maxErrorText is the documented bound of an error or reason text in
	// a record (runtime and queue package documentation).
	maxErrorText = 64 << 10
	// longLease is the queue lease of these tests: a settlement that did
	// not commit would leave the run waiting this long, far past
	// waitTimeout, so a run that ends ended by its settlement.
	longLease = 10 * time.Minute
)

// hugeText is a 32 MiB text (33554432 bytes), made once: a tool's
// response pasted into an error, with multi-byte characters that a cut
// must not split.
var hugeText = sync.OnceValue(func() string {
	const unit, size = "tool output é€ ", 32 << 20
	return strings.Repeat(unit, size/len(unit)) + strings.Repeat("x", size%len(unit))
})

// checkBounded fails unless text is what a record keeps of a text of size
// bytes that starts with prefix: at most maxErrorText bytes of valid
// UTF-8, prefix and the start of the text, and the note of the size.
func checkBounded(t *testing.T, what, text, prefix string, size int) {
	t.Helper()
	note := fmt.Sprintf("... (truncated, %d bytes)", size)
	if len(text) > maxErrorText || !strings.HasPrefix(text, prefix) || !strings.HasSuffix(text, note) || !utf8.ValidString(text) {
		t.Errorf("%s: %d bytes (valid UTF-8: %v), starting %.60q, ending %.60q; want at most %d bytes starting %.60q and ending %q",
			what, len(text), utf8.ValidString(text), text, text[max(0, len(text)-60):], maxErrorText, prefix, note)
	}
	if len(text) < maxErrorText/2 {
		t.Errorf("%s: only %d bytes kept", what, len(text))
	}
}

// boundedSetup opens a memory store whose lease outlasts the tests, and a
// Runtime running runner, with a hook and a logger recorded.
func boundedSetup(t *testing.T, runner steprunner.RunnerFunc, qopts []queue.Option, opts ...runtime.Option) (*queue.Queue, *runtime.Runtime, *hookRecorder, *testenv.Buffer) {
	t.Helper()
	q := openQueue(t, memURL(), append([]queue.Option{queue.WithLease(longLease)}, qopts...)...)
	hook := &hookRecorder{}
	logs := &testenv.Buffer{}
	opts = append([]runtime.Option{runtime.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
	rt := newRuntime(t, q, runner, hook, opts...)
	startRun(t, rt)
	return q, rt, hook, logs
}

// checkLogsSane fails if a log line holds a huge text.
func checkLogsSane(t *testing.T, logs *testenv.Buffer) {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2*maxErrorText {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
}

// TestHugeErrorsAndReasonsAreBounded: a step that fails (or cancels its
// run) with a 32 MiB error or reason ends its run at once, and every
// record keeps at most 64 KiB of the text, cut at a character boundary,
// with its original size noted: the run's Error (terminal record), the
// hook's Outcome.Error (notification), the dead job's attempt history
// (Status's LastError too). Before the bound, these texts were kept whole
// (and at the sizes of a fault probe's errors, 32-50 MB with the step's
// payload in the same records, the settlement could not commit).
func TestHugeErrorsAndReasonsAreBounded(t *testing.T) {
	huge := hugeText()
	cases := []struct {
		name   string
		answer func() (steprunner.Outcome, error)
		state  runtime.State
		dead   bool // the step job is dead-lettered with the text
	}{
		{"Permanent", func() (steprunner.Outcome, error) {
			return steprunner.Outcome{}, steprunner.Permanent(errors.New(huge))
		}, runtime.StateFailed, true},
		{"Fail", func() (steprunner.Outcome, error) { return steprunner.Fail(huge), nil }, runtime.StateFailed, false},
		{"Cancel", func() (steprunner.Outcome, error) { return steprunner.Cancel(huge), nil }, runtime.StateCancelled, false},
		// Retried once (history), then the last attempt fails the run.
		{"transient", func() (steprunner.Outcome, error) { return steprunner.Outcome{}, errors.New(huge) }, runtime.StateFailed, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int32
			runner := func(_ context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
				if s.Number == 0 {
					return steprunner.Continue([]byte("payload")), nil
				}
				attempts.Add(1)
				return tc.answer()
			}
			q, rt, hook, logs := boundedSetup(t, runner, []queue.Option{queue.WithMaxAttempts(2)})
			mustSubmit(t, rt, runtime.RunSpec{RunID: "huge", Input: []byte("in")})
			o := hook.wait(t, "huge") // the run's end: its notification
			st := waitTerminal(t, rt, "huge")
			if st.State != tc.state || st.CurrentStep != 1 {
				t.Fatalf("run ended %v at step %d, want %v at step 1", st.State, st.CurrentStep, tc.state)
			}
			prefix := huge[:100]
			checkBounded(t, "Status.Error", st.Error, prefix, len(huge))
			checkBounded(t, "Status.LastError", st.LastError, prefix, len(huge))
			checkBounded(t, "the hook's Outcome.Error", o.Error, prefix, len(huge))
			if st.Error != o.Error {
				t.Errorf("the terminal record and the notification keep different texts")
			}
			want := int32(1)
			if tc.name == "transient" {
				want = 2
			}
			if n := attempts.Load(); n != want {
				t.Errorf("step 1 ran %d times, want %d", n, want)
			}
			dead := deadJobs(t, q, stepsQueue)
			if !tc.dead {
				if len(dead) != 0 {
					t.Fatalf("%d dead step jobs, want none", len(dead))
				}
				checkLogsSane(t, logs)
				return
			}
			if len(dead) != 1 || len(dead[0].History) != int(want) {
				t.Fatalf("dead step jobs %d (history %v), want 1 with %d attempts", len(dead), len(dead), want)
			}
			for i, a := range dead[0].History {
				checkBounded(t, fmt.Sprintf("the dead job's history[%d]", i), a.Error, prefix, len(huge))
			}
			// The notice of the dead job (its reason header is bounded
			// tighter: 1 KiB) found the run ended and was acknowledged.
			testenv.Eventually(t, waitTimeout, "the dead step's notice to be handled", func() bool {
				s := mustStats(t, q, stepsQueue+".dead")
				return s.Pending+s.Claimed == 0
			})
			testenv.Eventually(t, waitTimeout, "the failure to be logged", func() bool {
				return strings.Contains(logs.String(), "level=ERROR msg=\"stepwell: step failed; the run fails\" run_id=huge step=1")
			})
			checkLogsSane(t, logs)
		})
	}
}

// TestLargeResultsSettle: a 40 MiB Succeed result and a 40 MiB Continue
// payload are within the queue's value limit (64 MiB): they settle, and
// arrive whole.
func TestLargeResultsSettle(t *testing.T) {
	big := bytes.Repeat([]byte("r"), 40<<20)
	for _, kind := range []string{"Succeed", "Continue"} {
		t.Run(kind, func(t *testing.T) {
			var got atomic.Int64 // the size of the payload step 1 saw
			runner := func(_ context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
				switch {
				case kind == "Succeed":
					return steprunner.Succeed(big), nil
				case s.Number == 0:
					return steprunner.Continue(big), nil
				}
				got.Store(int64(len(s.Payload)))
				return steprunner.Succeed(nil), nil
			}
			_, rt, hook, _ := boundedSetup(t, runner, nil)
			mustSubmit(t, rt, runtime.RunSpec{RunID: "big", Input: []byte("in")})
			o := hook.wait(t, "big")
			if o.Status != terminal.Succeeded {
				t.Fatalf("run ended %v (%.200s)", o.Status, o.Error)
			}
			if kind == "Succeed" && !bytes.Equal(o.Result, big) {
				t.Fatalf("the hook got a result of %d bytes, want %d", len(o.Result), len(big))
			}
			if kind == "Continue" && got.Load() != int64(len(big)) {
				t.Fatalf("step 1 got a payload of %d bytes, want %d", got.Load(), len(big))
			}
		})
	}
}

// TestUnsettleableSettlementFailsRun: a settlement that cannot commit for
// good (a Succeed result, a Continue payload over the queue's value
// limit: a *queue.TooLargeError) fails the run at once with that reason,
// logged at ERROR with the run and step and told to the ErrorHandler, its
// step job dead-lettered so that Retry can run it again. A settlement
// that failed silently on every attempt would end the run only when the
// attempts ran out by lease expiry ("step 1 died: lease expired"): with
// this test's lease, never within the test.
func TestUnsettleableSettlementFailsRun(t *testing.T) {
	const limit = 1 << 20 // the queue's value limit here (64 MiB by default)
	tooBig := bytes.Repeat([]byte("v"), 2*limit)
	for _, kind := range []string{"Succeed", "Continue"} {
		t.Run(kind, func(t *testing.T) {
			var retried atomic.Bool // after Retry, step 1 succeeds
			runner := func(_ context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
				switch {
				case s.Number == 0:
					return steprunner.Continue([]byte("payload")), nil
				case retried.Load():
					return steprunner.Succeed([]byte("small")), nil
				case kind == "Succeed":
					return steprunner.Succeed(tooBig), nil
				}
				return steprunner.Continue(tooBig), nil
			}
			var mu sync.Mutex
			var reported []*runtime.StepError
			handler := runtime.WithErrorHandler(func(_ context.Context, e *runtime.StepError) {
				mu.Lock()
				reported = append(reported, e)
				mu.Unlock()
			})
			q, rt, hook, logs := boundedSetup(t, runner, []queue.Option{queue.WithMaxValueSize(limit)}, handler)
			mustSubmit(t, rt, runtime.RunSpec{RunID: "unsettleable", Input: []byte("in")})
			o := hook.wait(t, "unsettleable")
			if o.Status != terminal.Failed || o.FinalStep != 1 {
				t.Fatalf("run ended %v at step %d (%q), want failed at step 1", o.Status, o.FinalStep, o.Error)
			}
			want := fmt.Sprintf("runtime: step 1's settlement (%s) cannot commit: queue: ", strings.ToLower(kind))
			if !strings.HasPrefix(o.Error, want) || !strings.Contains(o.Error, fmt.Sprintf("exceeds the limit of %d", limit)) {
				t.Fatalf("run's error %q, want %q... exceeds the limit of %d", o.Error, want, limit)
			}
			testenv.Eventually(t, waitTimeout, "the failure to be logged and reported", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(reported) > 0 && strings.Contains(logs.String(), "level=ERROR msg=\"stepwell: step failed; the run fails\" run_id=unsettleable step=1")
			})
			mu.Lock()
			e := reported[0]
			mu.Unlock()
			var tl *queue.TooLargeError
			if !errors.As(e.Err, &tl) || !steprunner.IsPermanent(e.Err) || !e.Final || e.Step != 1 {
				t.Fatalf("ErrorHandler got %+v, want the final, permanent error of step 1 wrapping a *queue.TooLargeError", e)
			}
			dead := deadJobs(t, q, stepsQueue)
			if len(dead) != 1 || string(dead[0].Payload) != "payload" {
				t.Fatalf("dead step jobs: %d, want step 1's with its payload", len(dead))
			}
			// Retry requeues the dead step job, which runs with its payload.
			retried.Store(true)
			if err := rt.Retry(context.Background(), "unsettleable"); err != nil {
				t.Fatalf("Retry: %v", err)
			}
			st := waitStatus(t, rt, "unsettleable", "success after Retry", func(s runtime.RunStatus) bool { return s.State == runtime.StateSucceeded })
			if string(st.Result) != "small" {
				t.Fatalf("result after Retry %q", st.Result)
			}
		})
	}
}

// TestLateSettlementIsLogged: a settlement refused because the step's
// claim was lost (its lease ran out, and the queue requeued the job) is
// logged at WARN with the run, step and job, and the step runs again.
// Here the claim is taken back between the step's return and its
// settlement, as the reaper does to a claim whose lease ran out. Before,
// the runtime dropped such a settlement without a word.
func TestLateSettlementIsLogged(t *testing.T) {
	var lost atomic.Bool
	var lostJob atomic.Value // the ID of the job whose claim was lost
	var q *queue.Queue
	lose := runtime.WithBeforeSettle(func(ctx context.Context, j *queue.Job) {
		if j.Headers[runtime.HeaderStep] == "0" && lost.CompareAndSwap(false, true) {
			lostJob.Store(j.ID)
			if err := runtime.ReleaseJob(ctx, q, j); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
	})
	log := &stepLog{}
	q, rt, hook, logs := boundedSetup(t, chainRunner(log, 1), nil, lose)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "late", Input: []byte("in")})
	if o := hook.wait(t, "late"); o.Status != terminal.Succeeded {
		t.Fatalf("run ended %v (%q)", o.Status, o.Error)
	}
	if steps := log.of("late"); len(steps) != 3 || steps[0].Number != 0 || steps[1].Number != 0 {
		t.Fatalf("steps run: %d, want step 0 twice, then step 1", len(steps))
	}
	want := fmt.Sprintf(`level=WARN msg="stepwell: a late settlement was refused: the step's claim was lost (its lease ran out, or the job was settled elsewhere); its outcome is discarded" run_id=late step=0 attempt=1 max_attempts=5 job_id=%s`, lostJob.Load())
	// The refused attempt logs once its commit returns, which can be after
	// the retry finished the run.
	testenv.Eventually(t, 10*time.Second, "the late settlement's log line", func() bool {
		return strings.Contains(logs.String(), want)
	})
}
