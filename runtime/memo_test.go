package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// memoView renders what a step sees of keys in the run's memory, e.g.
// "a=1 b=<empty> c=-" (- for unset).
func memoView(s *steprunner.Step, keys ...string) string {
	var parts []string
	for _, k := range keys {
		v, ok := s.Memo(k)
		switch {
		case !ok:
			parts = append(parts, k+"=-")
		case len(v) == 0:
			parts = append(parts, k+"=<empty>")
		default:
			parts = append(parts, k+"="+string(v))
		}
	}
	return strings.Join(parts, " ")
}

// views records memoView per (run, step, attempt).
type views struct {
	mu sync.Mutex
	m  map[string]string
}

func (v *views) add(s *steprunner.Step, keys ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]string{}
	}
	v.m[fmt.Sprintf("%s/%d/%d", s.RunID, s.Number, s.Attempt)] = memoView(s, keys...)
}

func (v *views) get(run string, step, attempt int) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.m[fmt.Sprintf("%s/%d/%d", run, step, attempt)]
}

func mustMemo(t *testing.T, rt *runtime.Runtime, runID string) map[string]string {
	t.Helper()
	m, err := rt.RunMemo(context.Background(), runID)
	if err != nil {
		t.Fatalf("RunMemo(%s): %v", runID, err)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

// TestMemoCommitsWithSettlement: a memo written with Continue is visible
// to the next step and to each of its retries; the writes of an attempt
// that failed are not; nil deletes a key, an empty value is kept; the
// writes of the last step commit with Succeed. Fails if memory is written
// outside the settlement (a failed attempt's writes would show), or not
// read with the step.
func TestMemoCommitsWithSettlement(t *testing.T) {
	q := openQueue(t, memURL())
	v := &views{}
	keys := []string{"a", "b", "c", "x"}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		v.add(s, keys...)
		switch {
		case s.Number == 0:
			return steprunner.Continue(nil).WithMemo("a", []byte("1")).WithMemo("b", []byte("2")), nil
		case s.Number == 1 && s.Attempt == 1:
			return steprunner.Continue(nil).WithMemo("x", []byte("failed attempt")), errors.New("transient")
		case s.Number == 1:
			return steprunner.Continue(nil).WithMemo("a", nil).WithMemo("c", []byte{}).
				WithMemo("b", []byte("2b")).WithMemo("b", []byte("3")), nil
		}
		return steprunner.Succeed(nil).WithMemo("d", []byte("4")), nil
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "m", MaxAttemptsPerStep: 3})
	if o := hook.wait(t, "m"); o.Status != terminal.Succeeded {
		t.Fatalf("outcome %+v", o)
	}
	for _, c := range []struct {
		step, attempt int
		want          string
	}{
		{0, 1, "a=- b=- c=- x=-"},
		{1, 1, "a=1 b=2 c=- x=-"},
		{1, 2, "a=1 b=2 c=- x=-"}, // the failed attempt wrote nothing
		{2, 1, "a=- b=3 c=<empty> x=-"},
	} {
		if got := v.get("m", c.step, c.attempt); got != c.want {
			t.Errorf("step %d attempt %d saw %q, want %q", c.step, c.attempt, got, c.want)
		}
	}
	want := map[string]string{"b": "3", "c": "", "d": "4"}
	if got := mustMemo(t, rt, "m"); !maps.Equal(got, want) {
		t.Errorf("RunMemo = %v, want %v", got, want)
	}
	st, err := rt.Status(context.Background(), "m")
	if err != nil || st.MemoKeys != 3 || st.MemoBytes != 2+1+2 {
		t.Errorf("Status = %+v, %v; want 3 memo keys of 5 bytes", st, err)
	}
}

// TestMemoOnEveryOutcome: WithMemo works on every Outcome kind (the ending
// ones commit it with the run's end), survives Retry of a failed run, and
// is discarded with an Outcome that an external Cancel overrides. Fails
// if a kind drops its writes.
func TestMemoOnEveryOutcome(t *testing.T) {
	q := openQueue(t, memURL())
	v := &views{}
	var mu sync.Mutex
	runs := map[string]int{} // executions of step 0 per run
	started := make(chan struct{}, 1)
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		runs[s.RunID+fmt.Sprint(s.Number)]++
		execs := runs[s.RunID+fmt.Sprint(s.Number)]
		mu.Unlock()
		v.add(s, "k")
		if s.Number == 1 || execs > 1 {
			return steprunner.Succeed(nil), nil
		}
		switch s.RunID {
		case "succeed":
			return steprunner.Succeed([]byte("r")).WithMemo("k", []byte("succeed")), nil
		case "fail":
			return steprunner.Fail("no").WithMemo("k", []byte("fail")), nil
		case "cancel":
			return steprunner.Cancel("stop").WithMemo("k", []byte("cancel")), nil
		case "after":
			return steprunner.ContinueAfter(nil, 5*time.Millisecond).WithMemo("k", []byte("after")), nil
		case "await":
			return steprunner.AwaitSignal("go", 0).WithMemo("k", []byte("await")), nil
		case "cancelled":
			started <- struct{}{}
			<-ctx.Done()
			return steprunner.Continue(nil).WithMemo("k", []byte("discarded")), nil
		}
		return steprunner.Outcome{}, fmt.Errorf("unknown run %s", s.RunID)
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook)
	startRun(t, rt)
	ctx := context.Background()
	for _, id := range []string{"succeed", "fail", "cancel", "after", "await", "cancelled"} {
		mustSubmit(t, rt, runtime.RunSpec{RunID: id})
	}
	waitStatus(t, rt, "await", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if err := rt.Signal(ctx, "await", "go", nil); err != nil {
		t.Fatal(err)
	}
	<-started
	if ok, err := rt.Cancel(ctx, "cancelled"); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	for id, want := range map[string]string{"succeed": "succeed", "fail": "fail", "cancel": "cancel",
		"after": "after", "await": "await", "cancelled": ""} {
		hook.wait(t, id)
		got := mustMemo(t, rt, id)["k"]
		if got != want {
			t.Errorf("run %s: memo k = %q, want %q", id, got, want)
		}
	}
	for _, id := range []string{"after", "await"} {
		if got := v.get(id, 1, 1); got != "k="+id {
			t.Errorf("run %s: step 1 saw %q, want k=%s", id, got, id)
		}
	}
	// Retry of the failed run: its step 0 runs again and sees its memory.
	if err := rt.Retry(ctx, "fail"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the retried run to end", func() bool { return len(hook.outcomes("fail")) == 2 })
	mu.Lock()
	execs := runs["fail0"]
	mu.Unlock()
	if got := v.get("fail", 0, 1); execs != 2 || got != "k=fail" {
		t.Errorf("retried run's step 0 (run %d times) saw %q, want k=fail", execs, got)
	}
}

// TestMemoLimits: an Outcome whose memory writes break a limit fails its
// step permanently with a typed error, and writes nothing of itself (the
// memory stays as it committed before). Fails if a limit is not checked,
// if its error is untyped, or if part of the refused Outcome is written.
func TestMemoLimits(t *testing.T) {
	lim := runtime.MemoLimits{MaxKeyBytes: 8, MaxValueBytes: 16, MaxTotalBytes: 40, MaxKeys: 3}
	x16 := []byte(strings.Repeat("x", 16))
	type write struct {
		k string
		v []byte
	}
	cases := []struct {
		name   string
		writes []write
		what   string // MemoLimitError.What; "" for ErrInvalidMemoKey
		size   int
		max    int
	}{
		{"key", []write{{"ok", x16}, {"k23456789", []byte("v")}}, "key", 9, 8},
		{"value", []write{{"ok", x16}, {"v", append(x16, 'y')}}, "value", 17, 16},
		{"memory", []write{{"ok", x16}, {"t1", x16}}, "memory", 12 + 18 + 18, 40},
		{"keys", []write{{"a", nil}, {"a", []byte{}}, {"b", nil}, {"c", nil}, {"b", []byte{}}, {"c", []byte{}}}, "keys", 4, 3},
		{"empty-key", []write{{"ok", nil}, {"", []byte("v")}}, "", 0, 0},
		{"control-key", []write{{"ok", nil}, {"a\nb", []byte("v")}}, "", 0, 0},
	}
	q := openQueue(t, memURL())
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			return steprunner.Continue(nil).WithMemo("base", []byte("12345678")), nil
		}
		i := slices.IndexFunc(cases, func(c struct {
			name   string
			writes []write
			what   string
			size   int
			max    int
		}) bool {
			return c.name == s.RunID
		})
		out := steprunner.Succeed([]byte("should not"))
		for _, w := range cases[i].writes {
			out = out.WithMemo(w.k, w.v)
		}
		return out, nil
	})
	var mu sync.Mutex
	stepErrs := map[string]*runtime.StepError{}
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook, runtime.WithMemoLimits(lim),
		runtime.WithErrorHandler(func(_ context.Context, e *runtime.StepError) {
			mu.Lock()
			stepErrs[e.RunID] = e
			mu.Unlock()
		}))
	startRun(t, rt)
	for _, c := range cases {
		mustSubmit(t, rt, runtime.RunSpec{RunID: c.name, MaxAttemptsPerStep: 3})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := hook.wait(t, c.name)
			if o.Status != terminal.Failed || !strings.Contains(o.Error, "memo") {
				t.Errorf("outcome %+v, want failed with a memo error", o)
			}
			// The error handler is called after the settlement commits:
			// the hook, on another worker, may come first.
			var se *runtime.StepError
			testenv.Eventually(t, waitTimeout, "the step error of "+c.name, func() bool {
				mu.Lock()
				defer mu.Unlock()
				se = stepErrs[c.name]
				return se != nil
			})
			if !se.Final || se.Attempt != 1 {
				t.Fatalf("step error %+v, want a final one on attempt 1", se)
			}
			var le *runtime.MemoLimitError
			if c.what == "" {
				if !errors.Is(se.Err, runtime.ErrInvalidMemoKey) || errors.As(se.Err, &le) {
					t.Errorf("error %v, want ErrInvalidMemoKey", se.Err)
				}
			} else if !errors.As(se.Err, &le) || !errors.Is(se.Err, runtime.ErrMemoTooLarge) ||
				le.What != c.what || le.Size != c.size || le.Max != c.max {
				t.Errorf("error %v (%+v), want a MemoLimitError{%s %d %d}", se.Err, le, c.what, c.size, c.max)
			}
			if got := mustMemo(t, rt, c.name); !maps.Equal(got, map[string]string{"base": "12345678"}) {
				t.Errorf("memory after the refused outcome: %v, want only base", got)
			}
		})
	}
}

// TestMemoLimitOptions: WithMemoLimits refuses negative limits, a key
// limit over MaxMemoKeyBytes and a keys limit over queue.MaxScanLimit
// (loadMemo reads the memory in one scan), and takes the largest ones.
// Fails if MaxKeys is not capped: the memory could then take several
// scans to read, and RunMemo return a map torn between two settlements.
func TestMemoLimitOptions(t *testing.T) {
	q := openQueue(t, memURL())
	for _, l := range []runtime.MemoLimits{{MaxKeys: -1}, {MaxKeyBytes: runtime.MaxMemoKeyBytes + 1}, {MaxKeys: queue.MaxScanLimit + 1}} {
		if _, err := runtime.New(q, succeedRunner(nil), nil, runtime.WithMemoLimits(l)); !errors.Is(err, runtime.ErrInvalidOption) {
			t.Errorf("WithMemoLimits(%+v): %v, want ErrInvalidOption", l, err)
		}
	}
	l := runtime.MemoLimits{MaxKeys: queue.MaxScanLimit, MaxKeyBytes: runtime.MaxMemoKeyBytes}
	if _, err := runtime.New(q, succeedRunner(nil), nil, runtime.WithMemoLimits(l)); err != nil {
		t.Errorf("WithMemoLimits(%+v): %v, want nil", l, err)
	}
}

// TestValidateMemoKey: ValidateMemoKey checks a key against the default
// limits, no limit to pass: printable ASCII of 1 to
// DefaultMemoMaxKeyBytes bytes. Fails if a key over the default limit, an
// empty one or a control byte passes, or a valid one fails.
func TestValidateMemoKey(t *testing.T) {
	for _, k := range []string{"a", "orders/42", "sp ace", strings.Repeat("k", runtime.DefaultMemoMaxKeyBytes)} {
		if err := runtime.ValidateMemoKey(k); err != nil {
			t.Errorf("ValidateMemoKey(%.20q): %v, want nil", k, err)
		}
	}
	var le *runtime.MemoLimitError
	long := strings.Repeat("k", runtime.DefaultMemoMaxKeyBytes+1)
	if err := runtime.ValidateMemoKey(long); !errors.As(err, &le) || le.What != "key" || le.Max != runtime.DefaultMemoMaxKeyBytes {
		t.Errorf("ValidateMemoKey(%d bytes): %v, want a MemoLimitError on the key", len(long), err)
	}
	for _, k := range []string{"", "a\nb", "caf\u00e9"} {
		if err := runtime.ValidateMemoKey(k); !errors.Is(err, runtime.ErrInvalidMemoKey) {
			t.Errorf("ValidateMemoKey(%q): %v, want ErrInvalidMemoKey", k, err)
		}
	}
}

// TestMemoReadFailureLogged (file://): a step whose run's memory cannot
// be read (here a value's blob is gone from the store) does not start, and
// the failure is logged, with the run and step, like a settlement that
// does not commit. Fails if the read fails silently (the step would just
// wait out its lease, nothing said).
func TestMemoReadFailureLogged(t *testing.T) {
	if memberMode() {
		t.Skip("deletes the store's blob files: local stores only")
	}
	dir := t.TempDir()
	var ran atomic.Int32
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			return steprunner.AwaitSignal("go", 0).WithMemo("big", []byte(strings.Repeat("b", 128<<10))), nil
		}
		ran.Add(1)
		return steprunner.Succeed(nil), nil
	})
	q := openQueue(t, "file://"+dir, queue.WithLargeValueThreshold(64<<10))
	logs := &testenv.Buffer{}
	rt := newRuntime(t, q, runner, nil, runtime.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "lost-blob"})
	waitStatus(t, rt, "lost-blob", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	blobs, err := filepath.Glob(filepath.Join(dir, "blob", "*"))
	if err != nil || len(blobs) == 0 {
		t.Fatalf("no blob files under %s (%v): the memory value was not stored as a blob", dir, err)
	}
	for _, b := range blobs {
		if err := os.Remove(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Signal(context.Background(), "lost-blob", "go", nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the failed memory read to be logged", func() bool {
		out := logs.String()
		return strings.Contains(out, "reading the run's memory failed") && strings.Contains(out, "run_id=lost-blob") && strings.Contains(out, "step=1")
	})
	if n := ran.Load(); n != 0 {
		t.Errorf("step 1 ran %d times without its memory", n)
	}
}

// TestMemoSurvivesRestart (file://): memory written before the process
// stops (a value at the size limit, stored as a blob, included) is what
// the step after the restart reads. Fails if the memory is not durable
// with the settlement.
func TestMemoSurvivesRestart(t *testing.T) {
	url := fileURL(t)
	v := &views{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		v.add(s, "k", "big")
		if s.Number == 0 {
			return steprunner.AwaitSignal("go", 0).WithMemo("k", []byte("before restart")).
				WithMemo("big", []byte(strings.Repeat("b", runtime.DefaultMemoMaxValueBytes))), nil
		}
		return steprunner.Succeed(nil), nil
	})
	ctx := context.Background()
	// A small large-value threshold: the big value is stored as a blob.
	blobs := queue.WithLargeValueThreshold(64 << 10)
	q1, err := openStore(t, url, blobs)
	if err != nil {
		t.Fatal(err)
	}
	rt1 := newRuntime(t, q1, runner, nil)
	r1 := startRun(t, rt1)
	mustSubmit(t, rt1, runtime.RunSpec{RunID: "durable"})
	waitStatus(t, rt1, "durable", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	r1.stop()
	if err := q1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	q2 := openQueue(t, url, blobs)
	rt2 := newRuntime(t, q2, runner, nil)
	startRun(t, rt2)
	if err := rt2.Signal(ctx, "durable", "go", nil); err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, rt2, "durable")
	want := "k=before restart big=" + strings.Repeat("b", runtime.DefaultMemoMaxValueBytes)
	if got := v.get("durable", 1, 1); got != want {
		t.Errorf("step 1 after the restart saw %.60q..., want %.60q...", got, want)
	}
}

// TestMemoDeletedAtExpiry: a run's memory is deleted with its record when
// the terminal retention passes. Fails if memory outlives its run (a
// reused run ID would see it).
func TestMemoDeletedAtExpiry(t *testing.T) {
	q := openQueue(t, memURL())
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		out := steprunner.Succeed(nil)
		for i := range 3 {
			out = out.WithMemo(fmt.Sprint("k", i), []byte("v"))
		}
		return out, nil
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, runner, hook, runtime.WithTerminalRetention(50*time.Millisecond))
	ctx := context.Background()
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "ex"})
	hook.wait(t, "ex")
	testenv.Eventually(t, waitTimeout, "the run to expire", func() bool {
		_, err := rt.Status(ctx, "ex")
		return errors.Is(err, runtime.ErrRunNotFound)
	})
	page, err := q.Scan(ctx, runrec.MemoRunPrefix("ex"), queue.ScanOptions{})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("memory after expiry: %d entries, %v", len(page.Items), err)
	}
	if _, err := rt.RunMemo(ctx, "ex"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("RunMemo after expiry: %v, want ErrRunNotFound", err)
	}
}
