package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// treeRunner runs trees of runs by their input:
//
//	"spawn K0,K1,..."  step 0 spawns one child per K, input "K:<index>";
//	"spawn N*K"        N children of kind K; after the join it succeeds
//	                   with the number of children
//	"ok:i"             succeeds with "r<i>"
//	"fail:i"           fails with "boom<i>"
//	"wait:i"           awaits the signal "go", then succeeds with "woke"
//	"nest:i"           spawns two "wait" children, then succeeds
func treeRunner(log *stepLog) steprunner.RunnerFunc {
	return func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		in := string(s.Payload)
		if s.Children != nil {
			return steprunner.Succeed([]byte(strconv.Itoa(len(s.Children)))), nil
		}
		if s.Signal != nil {
			return steprunner.Succeed([]byte("woke")), nil
		}
		kind, idx, _ := strings.Cut(in, ":")
		switch {
		case strings.HasPrefix(in, "spawn "):
			return steprunner.Spawn(childrenOf(strings.TrimPrefix(in, "spawn "))), nil
		case kind == "ok":
			return steprunner.Succeed([]byte("r" + idx)), nil
		case kind == "fail":
			return steprunner.Fail("boom" + idx), nil
		case kind == "wait":
			return steprunner.AwaitSignal("go", 0), nil
		case kind == "nest":
			return steprunner.Spawn(childrenOf("wait,wait")), nil
		}
		return steprunner.Outcome{}, steprunner.Permanent(fmt.Errorf("unknown input %q", in))
	}
}

func childrenOf(spec string) []steprunner.Child {
	var kinds []string
	if n, k, ok := strings.Cut(spec, "*"); ok {
		c, _ := strconv.Atoi(n)
		for range c {
			kinds = append(kinds, k)
		}
	} else {
		kinds = strings.Split(spec, ",")
	}
	cs := make([]steprunner.Child, len(kinds))
	for i, k := range kinds {
		cs[i] = steprunner.Child{Input: []byte(k + ":" + strconv.Itoa(i))}
	}
	return cs
}

// joins returns the steps of runID that followed a join.
func joins(log *stepLog, runID string) []steprunner.Step {
	var out []steprunner.Step
	for _, s := range log.of(runID) {
		if s.Children != nil {
			out = append(out, s)
		}
	}
	return out
}

func spawnSetup(t *testing.T, opts ...runtime.Option) (*queue.Queue, *stepLog, *hookRecorder, *runtime.Runtime) {
	q := openQueue(t, memURL())
	log, hook := &stepLog{}, &hookRecorder{}
	rt := newRuntime(t, q, treeRunner(log), hook, append([]runtime.Option{runtime.WithMaxConcurrentSteps(8)}, opts...)...)
	startRun(t, rt)
	return q, log, hook, rt
}

// TestSpawnFanOut1000: 1,000 children in one Spawn; the parent is woken
// once, and its next step gets every result in order with its own payload.
func TestSpawnFanOut1000(t *testing.T) {
	q, log, hook, rt := spawnSetup(t)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn 1000*ok")})
	if o := hook.wait(t, "p"); o.Status != terminal.Succeeded || string(o.Result) != "1000" {
		t.Fatalf("parent ended %v %q (%s)", o.Status, o.Result, o.Error)
	}
	whenIdle(t, q, "every run notified once", func() bool { return hook.total() == 1001 })
	noPendingKeys(t, q)
	js := joins(log, "p")
	if len(js) != 1 {
		t.Fatalf("the step after the join ran %d times, want 1", len(js))
	}
	if js[0].Number != 1 || string(js[0].Payload) != "spawn 1000*ok" || len(js[0].Children) != 1000 {
		t.Fatalf("joined step %d, payload %q, %d children", js[0].Number, js[0].Payload, len(js[0].Children))
	}
	for i, c := range js[0].Children {
		id := "p.s0." + strconv.Itoa(i)
		if c.RunID != id || c.Status != terminal.Succeeded || string(c.Result) != "r"+strconv.Itoa(i) || c.Error != "" {
			t.Fatalf("child %d = %+v, want %s succeeded r%d", i, c, id, i)
		}
		if n := len(log.of(id)); n != 1 {
			t.Fatalf("child %s ran %d steps, want 1", id, n)
		}
	}
	st, err := rt.Status(context.Background(), "p")
	if err != nil || len(st.Children) != 1000 || st.Children[999] != "p.s0.999" || st.Parent != "" {
		t.Fatalf("parent Status: %d children, parent %q, %v", len(st.Children), st.Parent, err)
	}
	if st, err := rt.Status(context.Background(), "p.s0.7"); err != nil || st.Parent != "p" || st.State != runtime.StateSucceeded {
		t.Fatalf("child Status %+v, %v", st, err)
	}
}

// TestSpawnWaiting: a parked parent is waiting, counting its children as
// they end; a child that fails and one cancelled do not fail it; a child
// retried after the join does not wake it again.
func TestSpawnWaiting(t *testing.T) {
	q, log, hook, rt := spawnSetup(t)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn wait,fail,wait,ok")})
	waitStatus(t, rt, "p", "waiting for 2 of 4", func(s runtime.RunStatus) bool {
		return s.State == runtime.StateWaiting && s.WaitingFor == "children: 2 of 4 ended"
	})
	waitStatus(t, rt, "p.s0.0", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if err := rt.Signal(ctx, "p", "go", nil); err != nil { // the parent's mailbox: no wake-up
		t.Fatal(err)
	}
	if err := rt.Signal(ctx, "p.s0.0", "go", nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, rt, "p", "waiting for 3 of 4", func(s runtime.RunStatus) bool { return s.WaitingFor == "children: 3 of 4 ended" })
	if ok, err := rt.Cancel(ctx, "p.s0.2"); !ok || err != nil {
		t.Fatalf("Cancel child: %v, %v", ok, err)
	}
	if o := hook.wait(t, "p"); o.Status != terminal.Succeeded {
		t.Fatalf("parent ended %v (%s)", o.Status, o.Error)
	}
	js := joins(log, "p")
	if len(js) != 1 {
		t.Fatalf("joined %d times", len(js))
	}
	want := []steprunner.ChildResult{
		{RunID: "p.s0.0", Status: terminal.Succeeded, Result: []byte("woke")},
		{RunID: "p.s0.1", Status: terminal.Failed, Error: "boom1"},
		{RunID: "p.s0.2", Status: terminal.Cancelled},
		{RunID: "p.s0.3", Status: terminal.Succeeded, Result: []byte("r3")},
	}
	for i, w := range want {
		c := js[0].Children[i]
		if c.RunID != w.RunID || c.Status != w.Status || string(c.Result) != string(w.Result) || c.Error != w.Error {
			t.Errorf("child %d = %+v, want %+v", i, c, w)
		}
	}
	// A Retry of a child after the join: it ends again, its parent is done.
	if err := rt.Retry(ctx, "p.s0.1"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the retried child to end", func() bool { return len(hook.outcomes("p.s0.1")) == 2 })
	whenIdle(t, q, "the parent woken once", func() bool { return len(joins(log, "p")) == 1 && len(hook.outcomes("p")) == 1 })
}

// TestSpawnCancelCascade: cancelling a waiting parent cancels its
// children and theirs.
func TestSpawnCancelCascade(t *testing.T) {
	q, log, hook, rt := spawnSetup(t)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn nest,wait")})
	tree := []string{"p.s0.0", "p.s0.1", "p.s0.0.s0.0", "p.s0.0.s0.1"}
	for _, id := range tree {
		waitStatus(t, rt, id, "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	}
	if st, _ := rt.Status(context.Background(), "p.s0.0.s0.1"); st.Parent != "p.s0.0" {
		t.Fatalf("grandchild's Parent %q", st.Parent)
	}
	if ok, err := rt.Cancel(context.Background(), "p"); !ok || err != nil {
		t.Fatalf("Cancel: %v, %v", ok, err)
	}
	for _, id := range append(tree, "p") {
		if o := hook.wait(t, id); o.Status != terminal.Cancelled {
			t.Errorf("run %s ended %v, want cancelled", id, o.Status)
		}
	}
	whenIdle(t, q, "no join after the cancel", func() bool { return len(joins(log, "p")) == 0 && len(joins(log, "p.s0.0")) == 0 })
	noPendingKeys(t, q)
}

// TestSpawnSettlementLost: the Spawn's first settlement is lost (its claim
// ran out): the step runs again and spawns the same children, once.
func TestSpawnSettlementLost(t *testing.T) {
	var q *queue.Queue
	var lost atomic.Bool
	lose := runtime.WithBeforeSettle(func(ctx context.Context, j *queue.Job) {
		if j.Headers[runtime.HeaderRunID] == "p" && j.Headers[runtime.HeaderStep] == "0" && lost.CompareAndSwap(false, true) {
			if err := runtime.ReleaseJob(ctx, q, j); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
	})
	q, log, hook, _ := spawnSetup(t, lose)
	rt := newRuntime(t, q, nil, nil) // submit from a client
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn 3*ok")})
	if o := hook.wait(t, "p"); o.Status != terminal.Succeeded || string(o.Result) != "3" {
		t.Fatalf("parent ended %v %q (%s)", o.Status, o.Result, o.Error)
	}
	whenIdle(t, q, "three children, each run once", func() bool {
		return hook.total() == 4 && len(log.of("p.s0.0")) == 1 && len(log.of("p.s0.2")) == 1
	})
	if !lost.Load() || len(log.of("p")) != 3 { // step 0 twice, step 1 once
		t.Fatalf("parent steps %d, lost %v", len(log.of("p")), lost.Load())
	}
}

// TestSpawnExistingChild: a child ID that names an existing run fails the
// step (ErrInputMismatch with another input), writing nothing.
func TestSpawnExistingChild(t *testing.T) {
	_, _, hook, rt := spawnSetup(t)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p.s0.1", Input: []byte("wait:other")})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn ok,ok")})
	o := hook.wait(t, "p")
	if o.Status != terminal.Failed || !strings.Contains(o.Error, runtime.ErrInputMismatch.Error()) || !strings.Contains(o.Error, "p.s0.1") {
		t.Fatalf("parent ended %v %q, want failed with ErrInputMismatch", o.Status, o.Error)
	}
	if _, err := rt.Status(context.Background(), "p.s0.0"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("child 0 written: %v", err)
	}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "q.s0.0", Input: []byte("wait:0")})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "q", Input: []byte("spawn wait")})
	if o := hook.wait(t, "q"); o.Status != terminal.Failed || !strings.Contains(o.Error, runtime.ErrChildExists.Error()) {
		t.Fatalf("parent q ended %v %q, want failed with ErrChildExists", o.Status, o.Error)
	}
}

// TestSpawnLimits: a Spawn over a limit fails its step with a typed error
// before anything is written.
func TestSpawnLimits(t *testing.T) {
	var reported []error
	var mu = make(chan struct{}, 1)
	eh := runtime.WithErrorHandler(func(ctx context.Context, e *runtime.StepError) {
		mu <- struct{}{}
		reported = append(reported, e.Err)
		<-mu
	})
	_, _, hook, rt := spawnSetup(t, runtime.WithSpawnLimits(runtime.SpawnLimits{MaxChildren: 3, MaxDepth: 1, MaxBytes: 200}), eh)
	long := strings.Repeat("x", 124)
	cases := []struct{ id, input, want string }{
		{"many", "spawn 4*ok", "spawn of children 4, at most 3"},
		{"deep", "spawn nest", ""}, // its child fails: depth 2
		{"bytes", "spawn ok," + strings.Repeat("y", 300), "spawn of bytes"},
		{long, "spawn ok", "invalid run ID"},
		{"empty", "spawn 0*ok", "Spawn of no children"},
	}
	for _, c := range cases {
		mustSubmit(t, rt, runtime.RunSpec{RunID: c.id, Input: []byte(c.input)})
	}
	for _, c := range cases {
		o := hook.wait(t, c.id)
		if c.want == "" {
			continue
		}
		if o.Status != terminal.Failed || !strings.Contains(o.Error, c.want) {
			t.Errorf("run %s ended %v %q, want failed with %q", c.id, o.Status, o.Error, c.want)
		}
		// (A child ID too long to be valid is refused by Status itself.)
		if _, err := rt.Status(context.Background(), runtimeChild(c.id)); !errors.Is(err, runtime.ErrRunNotFound) && !errors.Is(err, runtime.ErrInvalidRunID) {
			t.Errorf("run %s: its child was written: %v", c.id, err)
		}
	}
	if o := hook.wait(t, "deep.s0.0"); o.Status != terminal.Failed || !strings.Contains(o.Error, "spawn of depth 2, at most 1") {
		t.Errorf("deep child ended %v %q", o.Status, o.Error)
	}
	if o := hook.wait(t, "deep"); o.Status != terminal.Succeeded {
		t.Errorf("deep ended %v %q: a failed child does not fail its parent", o.Status, o.Error)
	}
	// The ErrorHandler is told once the failure's settlement committed,
	// which can be after the run's hook fired.
	testenv.Eventually(t, 10*time.Second, "a *SpawnLimitError{children 4/3} reported", func() bool {
		mu <- struct{}{}
		defer func() { <-mu }()
		var le *runtime.SpawnLimitError
		for _, err := range reported {
			if errors.As(err, &le) && le.What == "children" && le.Size == 4 && le.Max == 3 {
				return true
			}
		}
		return false
	})
}

func runtimeChild(parent string) string { return steprunner.DeriveChildRunID(parent, 0, 0) }

// TestSpawnChildRetriedWhileWaiting: a child retried while its parent
// still waits for the others is counted once: the parent does not join
// before the last child ends.
func TestSpawnChildRetriedWhileWaiting(t *testing.T) {
	q, log, hook, rt := spawnSetup(t)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn fail,wait")})
	waitStatus(t, rt, "p", "1 of 2 ended", func(s runtime.RunStatus) bool { return s.WaitingFor == "children: 1 of 2 ended" })
	for i := 1; i <= 2; i++ {
		if err := rt.Retry(ctx, "p.s0.0"); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, "the retried child to end", func() bool { return len(hook.outcomes("p.s0.0")) == i+1 })
	}
	whenIdle(t, q, "the parent still waiting", func() bool { return len(joins(log, "p")) == 0 })
	if st, err := rt.Status(ctx, "p"); err != nil || st.State != runtime.StateWaiting || st.WaitingFor != "children: 1 of 2 ended" {
		t.Fatalf("parent %+v, %v", st, err)
	}
	waitStatus(t, rt, "p.s0.1", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if err := rt.Signal(ctx, "p.s0.1", "go", nil); err != nil {
		t.Fatal(err)
	}
	if o := hook.wait(t, "p"); o.Status != terminal.Succeeded {
		t.Fatalf("parent ended %v (%s)", o.Status, o.Error)
	}
	whenIdle(t, q, "one join", func() bool { return len(joins(log, "p")) == 1 })
}

// noPendingKeys fails unless every Spawn's pending counters are gone (a
// join or a cancel deletes them).
func noPendingKeys(t *testing.T, q *queue.Queue) {
	t.Helper()
	page, err := q.Scan(context.Background(), []byte(runrec.PendingPrefix), queue.ScanOptions{})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("pending counters left: %d, %v", len(page.Items), err)
	}
}

// TestSpawnCancelMany: a parent cancelled while 40 children (three shards
// full) wait: all cancelled, the counters deleted, no join.
func TestSpawnCancelMany(t *testing.T) {
	q, log, hook, rt := spawnSetup(t)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "p", Input: []byte("spawn 40*wait")})
	for i := range 40 {
		waitStatus(t, rt, "p.s0."+strconv.Itoa(i), "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	}
	// Ten end first: the counters count them.
	for i := range 10 {
		if err := rt.Signal(context.Background(), "p.s0."+strconv.Itoa(i*3), "go", nil); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, rt, "p", "10 of 40", func(s runtime.RunStatus) bool { return s.WaitingFor == "children: 10 of 40 ended" })
	if ok, err := rt.Cancel(context.Background(), "p"); !ok || err != nil {
		t.Fatalf("Cancel: %v, %v", ok, err)
	}
	testenv.Eventually(t, waitTimeout, "every child to end", func() bool { return hook.total() == 41 })
	whenIdle(t, q, "no join", func() bool { return len(joins(log, "p")) == 0 && hook.total() == 41 })
	noPendingKeys(t, q)
	st, err := rt.Status(context.Background(), "p.s0.39")
	if err != nil || st.State != runtime.StateCancelled {
		t.Fatalf("child 39: %+v, %v", st, err)
	}
}
