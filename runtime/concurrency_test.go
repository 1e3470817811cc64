package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// slotRunner runs 3-step runs whose input is "KEY:i". It tracks, per
// key, how many runs are between their step 0 and their last step (a
// run holds its slot at least that long) and the highest count seen, and
// the order in which runs started. Runs of a key in gated block in step
// 1 until their gate is opened (or their ctx ends).
type slotRunner struct {
	mu      sync.Mutex
	active  map[string]int
	maxSeen map[string]int
	started map[string][]int // per key: run indexes in step-0 order
	gated   map[string]bool
	gates   map[string]chan struct{} // run ID -> gate
}

func newSlotRunner(gated ...string) *slotRunner {
	g := &slotRunner{active: map[string]int{}, maxSeen: map[string]int{}, started: map[string][]int{},
		gated: map[string]bool{}, gates: map[string]chan struct{}{}}
	for _, k := range gated {
		g.gated[k] = true
	}
	return g
}

func (g *slotRunner) gate(runID string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.gates[runID]
	if !ok {
		c = make(chan struct{})
		g.gates[runID] = c
	}
	return c
}

func (g *slotRunner) open(runID string) { close(g.gate(runID)) }

// finish opens the gates of runIDs, then waits for each run to end
// Succeeded.
func (g *slotRunner) finish(t *testing.T, rt *runtime.Runtime, runIDs ...string) {
	t.Helper()
	for _, id := range runIDs {
		g.open(id)
	}
	for _, id := range runIDs {
		if st := waitTerminal(t, rt, id); st.State != runtime.StateSucceeded {
			t.Fatalf("%s: %v %q", id, st.State, st.Error)
		}
	}
}

// startSlotRuntime starts a runtime on a new memory queue whose steps run
// on a slotRunner gating the runs of key.
func startSlotRuntime(t *testing.T, key string, opts ...runtime.Option) (*queue.Queue, *slotRunner, *runtime.Runtime) {
	t.Helper()
	q := openQueue(t, memURL())
	g := newSlotRunner(key)
	rt := newRuntime(t, q, g, nil, opts...)
	startRun(t, rt)
	return q, g, rt
}

func (g *slotRunner) startedOf(key string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.started[key]...)
}

func (g *slotRunner) max(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxSeen[key]
}

func (g *slotRunner) RunStep(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	key, idx, _ := strings.Cut(string(s.Payload), ":")
	switch s.Number {
	case 0:
		i, _ := strconv.Atoi(idx)
		g.mu.Lock()
		g.active[key]++
		g.maxSeen[key] = max(g.maxSeen[key], g.active[key])
		g.started[key] = append(g.started[key], i)
		g.mu.Unlock()
		return steprunner.Continue(s.Payload), nil
	case 1:
		if g.gated[key] {
			select {
			case <-g.gate(s.RunID):
			case <-ctx.Done():
				return steprunner.Outcome{}, context.Cause(ctx)
			}
		}
		return steprunner.Continue(s.Payload), nil
	}
	g.mu.Lock()
	g.active[key]--
	g.mu.Unlock()
	return steprunner.Succeed(s.Payload), nil
}

func keyed(key string, limit, i int) runtime.RunSpec {
	return runtime.RunSpec{RunID: fmt.Sprintf("%s-%02d", key, i), Input: fmt.Appendf(nil, "%s:%d", key, i),
		Concurrency: runtime.Concurrency{Key: key, Limit: limit}}
}

// checkKeyGone fails unless key's state and line are gone: no slot held,
// nobody waiting, nothing leaked.
func checkKeyGone(t *testing.T, q *queue.Queue, key string) {
	t.Helper()
	if b, err := q.Get(context.Background(), runrec.ConcStateKey(key)); !errors.Is(err, queue.ErrKeyNotFound) {
		t.Errorf("key %s's state after its runs ended: %x, %v; want it deleted", key, b, err)
	}
	if b, err := q.Get(context.Background(), runrec.ConcTailKey(key)); !errors.Is(err, queue.ErrKeyNotFound) {
		t.Errorf("key %s's line tail after its runs ended: %x, %v; want it deleted", key, b, err)
	}
	page, err := q.Scan(context.Background(), runrec.ConcLineOf(key), queue.ScanOptions{})
	if err != nil || len(page.Items) != 0 {
		t.Errorf("key %s's line after its runs ended: %d entries, %v", key, len(page.Items), err)
	}
}

// TestConcurrencyKey: 20 runs of key A with Limit 2 and 5 runs of key B
// (Limit 5). A's runs hold their slots (blocked in step 1) until the test
// opens their gates one by one, oldest first: at every point exactly the
// oldest runs have started (FIFO) and never more than 2 at once; B's runs
// all finish while A's first two hold the slots and the other 18 wait,
// pending, with Status saying why. All succeed, and the keys' records are
// gone at the end.
func TestConcurrencyKey(t *testing.T) {
	const nA, limitA, nB = 20, 2, 5
	q, g, rt := startSlotRuntime(t, "A", runtime.WithMaxConcurrentSteps(8))
	for i := range nA {
		mustSubmit(t, rt, keyed("A", limitA, i))
	}
	for i := range nB {
		mustSubmit(t, rt, keyed("B", nB, i))
	}
	for i := range nB {
		if st := waitTerminal(t, rt, fmt.Sprintf("B-%02d", i)); st.State != runtime.StateSucceeded {
			t.Fatalf("B-%02d: %v %q", i, st.State, st.Error)
		}
	}
	if got := g.startedOf("A"); len(got) != limitA {
		t.Fatalf("A's runs started while the first %d held the slots: %v", limitA, got)
	}
	st, err := rt.Status(context.Background(), "A-05")
	if err != nil {
		t.Fatal(err)
	}
	if want := "waiting for concurrency key A: 2 of 2"; st.State != runtime.StatePending || st.WaitingFor != want {
		t.Fatalf("Status of a run in line: %v, WaitingFor %q; want pending, %q", st.State, st.WaitingFor, want)
	}
	for k := range nA {
		// Runs k and k+1 hold the slots: exactly runs 0..k+1 have started.
		want := min(k+limitA, nA)
		testenv.Eventually(t, waitTimeout, fmt.Sprintf("%d of A's runs to start", want), func() bool { return len(g.startedOf("A")) >= want })
		// Runs admitted together (the first two) may start in either
		// order; later ones are admitted one by one, as a slot frees.
		started := g.startedOf("A")
		slices.Sort(started)
		for i, idx := range started {
			if idx != i {
				t.Fatalf("A's runs started: %v, not the oldest %d", g.startedOf("A"), want)
			}
		}
		if got := len(started); got != want {
			t.Fatalf("%d of A's runs started with runs %d.. holding the slots, want %d", got, k, want)
		}
		g.finish(t, rt, fmt.Sprintf("A-%02d", k))
	}
	if m := g.max("A"); m > limitA {
		t.Fatalf("%d of A's runs were active at once, limit %d", m, limitA)
	}
	checkKeyGone(t, q, "A")
	checkKeyGone(t, q, "B")
}

// TestConcurrencyCancelInLine: a run cancelled while it waits in its
// key's line leaves it: the line moves on past it, its step never runs,
// the key's records are gone once the others end; and Retry of it joins
// the line again and runs.
func TestConcurrencyCancelInLine(t *testing.T) {
	q, g, rt := startSlotRuntime(t, "K")
	for i := range 4 {
		mustSubmit(t, rt, keyed("K", 1, i))
	}
	testenv.Eventually(t, waitTimeout, "K-00 to start", func() bool { return len(g.startedOf("K")) == 1 })
	if ok, err := rt.Cancel(context.Background(), "K-02"); !ok || err != nil {
		t.Fatalf("Cancel(K-02) = %v, %v", ok, err)
	}
	if st := waitTerminal(t, rt, "K-02"); st.State != runtime.StateCancelled {
		t.Fatalf("K-02: %v", st.State)
	}
	for _, id := range []string{"K-00", "K-01", "K-03"} {
		g.finish(t, rt, id)
	}
	if got := g.startedOf("K"); fmt.Sprint(got) != "[0 1 3]" {
		t.Fatalf("K's runs started: %v, want [0 1 3]", got)
	}
	checkKeyGone(t, q, "K")

	// Retry of the cancelled run: it takes the free slot and runs.
	if err := rt.Retry(context.Background(), "K-02"); err != nil {
		t.Fatal(err)
	}
	g.finish(t, rt, "K-02")
	checkKeyGone(t, q, "K")
}

// TestConcurrencyRetryJoinsLine: Retry of a keyed run while its key's
// slots are taken puts it back in the line; it runs when a slot frees.
func TestConcurrencyRetryJoinsLine(t *testing.T) {
	q, g, rt := startSlotRuntime(t, "R")
	mustSubmit(t, rt, keyed("R", 1, 0))
	mustSubmit(t, rt, keyed("R", 1, 1))
	if ok, err := rt.Cancel(context.Background(), "R-01"); !ok || err != nil {
		t.Fatalf("Cancel(R-01) = %v, %v", ok, err)
	}
	waitTerminal(t, rt, "R-01")
	if err := rt.Retry(context.Background(), "R-01"); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, rt, "R-01", "pending in line", func(s runtime.RunStatus) bool { return s.State == runtime.StatePending })
	if want := "waiting for concurrency key R: 1 of 1"; st.WaitingFor != want || st.Retries != 1 {
		t.Fatalf("retried run in line: WaitingFor %q, Retries %d; want %q, 1", st.WaitingFor, st.Retries, want)
	}
	g.finish(t, rt, "R-00", "R-01")
	if got := g.startedOf("R"); len(got) != 2 {
		t.Fatalf("R's runs started: %v", got)
	}
	checkKeyGone(t, q, "R")
}

// TestConcurrencySlotHeldWhileWaiting: a run keeps its slot while it
// waits for a signal and while its next step is delayed (ContinueAfter):
// the next run of its key (Limit 1) starts only after it ended.
func TestConcurrencySlotHeldWhileWaiting(t *testing.T) {
	q := openQueue(t, memURL())
	var mu sync.Mutex
	firstDone, secondEarly := false, false
	r := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if s.RunID == "second" {
			secondEarly = secondEarly || !firstDone
			return steprunner.Succeed(nil), nil
		}
		switch s.Number {
		case 0:
			return steprunner.AwaitSignal("go", 0), nil
		case 1:
			return steprunner.ContinueAfter(nil, 200*time.Millisecond), nil
		}
		firstDone = true
		return steprunner.Succeed(nil), nil
	})
	rt := newRuntime(t, q, r, nil)
	startRun(t, rt)
	c := runtime.Concurrency{Key: "w", Limit: 1}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "first", Concurrency: c})
	waitStatus(t, rt, "first", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	mustSubmit(t, rt, runtime.RunSpec{RunID: "second", Concurrency: c})
	st, err := rt.Status(context.Background(), "second")
	if err != nil || st.State != runtime.StatePending || st.WaitingFor != "waiting for concurrency key w: 1 of 1" {
		t.Fatalf("second while first awaits a signal: %+v, %v", st, err)
	}
	if err := rt.Signal(context.Background(), "first", "go", nil); err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, rt, "first")
	if st := waitTerminal(t, rt, "second"); st.State != runtime.StateSucceeded {
		t.Fatalf("second: %v", st.State)
	}
	mu.Lock()
	defer mu.Unlock()
	if secondEarly {
		t.Fatal("the second run started before the first, which held the slot, ended")
	}
	checkKeyGone(t, q, "w")
}

// TestConcurrencyLimitRaise: the newest submitted run's Limit applies to
// its key: raising it starts the oldest waiting runs at once, in the
// raising submit's transaction.
func TestConcurrencyLimitRaise(t *testing.T) {
	q, g, rt := startSlotRuntime(t, "L")
	for i := range 3 {
		mustSubmit(t, rt, keyed("L", 1, i))
	}
	testenv.Eventually(t, waitTimeout, "L-00 to start", func() bool { return len(g.startedOf("L")) == 1 })
	mustSubmit(t, rt, keyed("L", 3, 3)) // L-01 and L-02 start; L-03 waits
	testenv.Eventually(t, waitTimeout, "L-01 and L-02 to start", func() bool { return len(g.startedOf("L")) == 3 })
	st, err := rt.Status(context.Background(), "L-03")
	if err != nil || st.WaitingFor != "waiting for concurrency key L: 3 of 3" {
		t.Fatalf("L-03: %+v, %v", st, err)
	}
	for i := range 4 {
		g.open(fmt.Sprintf("L-%02d", i))
	}
	for i := range 4 {
		waitTerminal(t, rt, fmt.Sprintf("L-%02d", i))
	}
	if got := g.startedOf("L"); len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Fatalf("L's runs started: %v", got)
	}
	checkKeyGone(t, q, "L")
}

// TestConcurrencyInvalid: a bad Concurrency is ErrInvalidRunSpec and
// writes nothing; a re-submit with another Concurrency is ErrSpecMismatch.
func TestConcurrencyInvalid(t *testing.T) {
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil)
	for _, c := range []runtime.Concurrency{
		{Key: "k", Limit: 0},
		{Key: "k", Limit: -1},
		{Limit: 2},
		{Key: "a/b", Limit: 1},
		{Key: " k", Limit: 1},
		{Key: "k\n", Limit: 1},
		{Key: "é", Limit: 1},
		{Key: strings.Repeat("k", 129), Limit: 1},
		{Key: "k", Limit: 1 << 31},
	} {
		_, err := rt.Submit(context.Background(), runtime.RunSpec{RunID: "bad", Concurrency: c})
		if !errors.Is(err, runtime.ErrInvalidRunSpec) {
			t.Errorf("Submit with %+v: %v, want ErrInvalidRunSpec", c, err)
		}
		if _, err := rt.Status(context.Background(), "bad"); !errors.Is(err, runtime.ErrRunNotFound) {
			t.Errorf("Submit with %+v wrote the run: %v", c, err)
		}
		if c.Key != "" {
			checkKeyGone(t, q, c.Key)
		}
	}
	page, err := q.Scan(context.Background(), []byte("workflow/"), queue.ScanOptions{})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("invalid submits wrote %d keys (%v)", len(page.Items), err)
	}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "ok", Concurrency: runtime.Concurrency{Key: strings.Repeat("k", 128), Limit: 1}})
	_, err = rt.Submit(context.Background(), runtime.RunSpec{RunID: "ok", Concurrency: runtime.Concurrency{Key: "other", Limit: 1}})
	if !errors.Is(err, runtime.ErrSpecMismatch) || !strings.Contains(err.Error(), "Concurrency") {
		t.Fatalf("re-submit with another Concurrency: %v, want ErrSpecMismatch naming it", err)
	}
}

// TestConcurrencyStartAtHoldsSlot: a run submitted with a StartAt takes
// its slot at submit (if free) and holds it while delayed; the next run
// of its key waits in line, and starts only once the first ended.
func TestConcurrencyStartAtHoldsSlot(t *testing.T) {
	q := openQueue(t, memURL())
	var mu sync.Mutex
	firstDone, secondEarly := false, false
	r := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if s.RunID == "second" {
			secondEarly = secondEarly || !firstDone
		} else {
			firstDone = true
		}
		return steprunner.Succeed(nil), nil
	})
	rt := newRuntime(t, q, r, nil)
	startRun(t, rt)
	c := runtime.Concurrency{Key: "s", Limit: 1}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "first", Concurrency: c, StartAt: time.Now().Add(300 * time.Millisecond)})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "second", Concurrency: c})
	first, err := rt.Status(context.Background(), "first")
	if err != nil {
		t.Fatal(err)
	}
	second, err := rt.Status(context.Background(), "second")
	if err != nil {
		t.Fatal(err)
	}
	if !first.State.Terminal() && (!first.Scheduled || second.State != runtime.StatePending || second.WaitingFor != "waiting for concurrency key s: 1 of 1") {
		t.Fatalf("a delayed run and the next of its key: %+v; %+v", first, second)
	}
	waitTerminal(t, rt, "first")
	waitTerminal(t, rt, "second")
	mu.Lock()
	defer mu.Unlock()
	if secondEarly {
		t.Fatal("the second run started before the delayed first one, which held the slot, ended")
	}
	checkKeyGone(t, q, "s")
}

// TestConcurrencyPausedKeepsSlot: a run paused while in line gets its
// slot when its turn comes, and keeps it (its step parked) until Resume;
// the runs after it wait.
func TestConcurrencyPausedKeepsSlot(t *testing.T) {
	q, g, rt := startSlotRuntime(t, "P")
	mustSubmit(t, rt, keyed("P", 1, 0))
	mustSubmit(t, rt, keyed("P", 1, 1))
	if err := rt.Pause(context.Background(), "P-01"); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, rt, "P-01", "paused", func(s runtime.RunStatus) bool { return s.State == runtime.StatePaused })
	if st.WaitingFor != "waiting for concurrency key P: 1 of 1" {
		t.Fatalf("paused run in line: WaitingFor %q", st.WaitingFor)
	}
	g.open("P-00")
	waitTerminal(t, rt, "P-00")
	mustSubmit(t, rt, keyed("P", 1, 2))
	// P-01 holds the slot, parked: P-02 waits for it.
	waitStatus(t, rt, "P-01", "paused with the slot", func(s runtime.RunStatus) bool { return s.State == runtime.StatePaused && s.WaitingFor == "" })
	if st, err := rt.Status(context.Background(), "P-02"); err != nil || st.WaitingFor != "waiting for concurrency key P: 1 of 1" {
		t.Fatalf("P-02 behind a paused run holding the slot: %+v, %v", st, err)
	}
	if got := g.startedOf("P"); len(got) != 1 {
		t.Fatalf("P's runs started while P-01 was paused: %v", got)
	}
	if err := rt.Resume(context.Background(), "P-01"); err != nil {
		t.Fatal(err)
	}
	g.finish(t, rt, "P-01", "P-02")
	if got := g.startedOf("P"); fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("P's runs started: %v", got)
	}
	checkKeyGone(t, q, "P")
}

// TestConcurrencyDeadlineInLine: a run whose deadline passes while it
// waits in its key's line ends Failed (ErrRunDeadline) and leaves the
// line; the run behind it gets the slot in turn.
func TestConcurrencyDeadlineInLine(t *testing.T) {
	q, g, rt := startSlotRuntime(t, "D")
	mustSubmit(t, rt, keyed("D", 1, 0))
	late := keyed("D", 1, 1)
	late.Deadline = time.Now().Add(200 * time.Millisecond)
	mustSubmit(t, rt, late)
	mustSubmit(t, rt, keyed("D", 1, 2))
	st := waitTerminal(t, rt, "D-01")
	if st.State != runtime.StateFailed || !strings.Contains(st.Error, "deadline") {
		t.Fatalf("D-01 past its deadline in line: %v %q", st.State, st.Error)
	}
	g.finish(t, rt, "D-00", "D-02")
	if got := g.startedOf("D"); fmt.Sprint(got) != "[0 2]" {
		t.Fatalf("D's runs started: %v", got)
	}
	checkKeyGone(t, q, "D")
}

// TestConcurrencySchedule: a schedule ticking every second with
// AllowOverlap whose runs take longer than a tick, under
// Concurrency{Key, Limit 1} ("at most one report at a time"): every tick
// submits its run, one holds the key's slot and the others wait in the
// key's line (pending, waiting for the key), then start one at a time,
// oldest tick first, each when the one before ends.
func TestConcurrencySchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	g := newSlotRunner("tenant-a")
	rt := newRuntime(t, q, g, nil)
	spec := runtime.RunSpec{Input: []byte("tenant-a:0"), Concurrency: runtime.Concurrency{Key: "tenant-a", Limit: 1}}
	if err := rt.SetSchedule(ctx, runtime.Schedule{Name: "report", Every: time.Second, AllowOverlap: true, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if st := mustSchedule(t, rt, "report"); st.Spec.Concurrency != spec.Concurrency {
		t.Errorf("ListSchedules: Spec.Concurrency %+v, want %+v", st.Spec.Concurrency, spec.Concurrency)
	}
	startRun(t, rt)
	var runs []runtime.RunStatus
	testenv.Eventually(t, waitTimeout, "3 ticks submitted while the first run holds the slot", func() bool {
		runs = scheduleRuns(t, rt, "report")
		return len(runs) >= 3
	})
	for i, r := range runs[:3] {
		if i == 0 {
			continue
		}
		st, err := rt.Status(ctx, r.RunID)
		if want := "waiting for concurrency key tenant-a: 1 of 1"; err != nil || st.State != runtime.StatePending || st.WaitingFor != want {
			t.Fatalf("tick run %s while %s holds the slot: %v %q, %v; want pending, %q", r.RunID, runs[0].RunID,
				st.State, st.WaitingFor, err, want)
		}
	}
	for i, r := range runs[:3] {
		testenv.Eventually(t, waitTimeout, r.RunID+" to start", func() bool { return len(g.startedOf("tenant-a")) == i+1 })
		for _, later := range runs[i+1 : 3] {
			if st, err := rt.Status(ctx, later.RunID); err != nil || st.State != runtime.StatePending {
				t.Fatalf("%s started before %s ended: %v, %v", later.RunID, r.RunID, st.State, err)
			}
		}
		g.finish(t, rt, r.RunID)
	}
	if n := g.max("tenant-a"); n != 1 {
		t.Errorf("%d runs of the schedule held the key at once, want 1", n)
	}
	if err := rt.DeleteSchedule(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	for _, r := range scheduleRuns(t, rt, "report") {
		if !r.State.Terminal() {
			g.open(r.RunID)
			waitTerminal(t, rt, r.RunID)
		}
	}
	checkKeyGone(t, q, "tenant-a")
}

// TestConcurrencyScheduleInvalid: a schedule's Spec.Concurrency is
// checked as Submit checks it: ErrInvalidSchedule wrapping
// ErrInvalidRunSpec, nothing written.
func TestConcurrencyScheduleInvalid(t *testing.T) {
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil)
	for _, c := range []runtime.Concurrency{
		{Key: "k"}, {Limit: 1}, {Key: "k", Limit: -1}, {Key: "a/b", Limit: 1}, {Key: " k", Limit: 1},
		{Key: strings.Repeat("k", runtime.MaxConcurrencyKeyLen+1), Limit: 1},
	} {
		err := rt.SetSchedule(context.Background(), runtime.Schedule{Name: "s", Every: time.Hour,
			Spec: runtime.RunSpec{Concurrency: c}})
		if !errors.Is(err, runtime.ErrInvalidSchedule) || !errors.Is(err, runtime.ErrInvalidRunSpec) {
			t.Errorf("SetSchedule with Spec.Concurrency %+v: %v, want ErrInvalidSchedule and ErrInvalidRunSpec", c, err)
		}
	}
	if all, err := rt.ListSchedules(context.Background()); err != nil || len(all) != 0 {
		t.Errorf("ListSchedules after bad input = %+v, %v", all, err)
	}
}
