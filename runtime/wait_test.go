package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// gateRunner runs step 0 of every run until its gate opens (a run ID's
// gate: gates[id]), then succeeds with "done:<input>"; step starts are
// reported on started.
type gateRunner struct {
	gates   map[string]chan struct{}
	started chan string
}

func newGateRunner(ids ...string) *gateRunner {
	g := &gateRunner{gates: map[string]chan struct{}{}, started: make(chan string, 64)}
	for _, id := range ids {
		g.gates[id] = make(chan struct{})
	}
	return g
}

func (g *gateRunner) RunStep(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	g.started <- s.RunID
	if gate := g.gates[s.RunID]; gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return steprunner.Outcome{}, context.Cause(ctx)
		}
	}
	return steprunner.Succeed(append([]byte("done:"), s.Payload...)), nil
}

// waitResult is what a Wait in the background returned.
type waitResult struct {
	st  runtime.RunStatus
	err error
}

func waitAsync(ctx context.Context, rt *runtime.Runtime, runID string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		st, err := rt.Wait(ctx, runID)
		ch <- waitResult{st, err}
	}()
	return ch
}

// recvWait receives a Wait's result, failing t after waitTimeout.
func recvWait(t testing.TB, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitTimeout):
		t.Fatalf("Wait did not return within %v", waitTimeout)
		return waitResult{}
	}
}

// waitTracker counts, per run, Wait's reads and the watches it armed
// (runtime.SetWaitHook), for the test's duration.
type waitTracker struct {
	mu           sync.Mutex
	reads, armed map[string]int
}

func trackWaits(t testing.TB) *waitTracker {
	w := &waitTracker{reads: map[string]int{}, armed: map[string]int{}}
	runtime.SetWaitHook(func(id string, armed bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if armed {
			w.armed[id]++
		} else {
			w.reads[id]++
		}
	})
	t.Cleanup(func() { runtime.SetWaitHook(nil) })
	return w
}

func (w *waitTracker) count(m map[string]int, id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return m[id]
}

// waitArmed waits until n watches of Waits of run id are armed: those
// Waits can only return once woken.
func (w *waitTracker) waitArmed(t testing.TB, id string, n int) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("%d Waits of %s armed", n, id), func() bool { return w.count(w.armed, id) >= n })
}

// checkBlocked fails t if the Wait has returned.
func checkBlocked(t testing.TB, ch <-chan waitResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Wait returned before the run ended: %+v, %v", r.st, r.err)
	default:
	}
}

// TestWaitReturnsAtEnd: Wait blocks while the run is active, returns its
// final status with its result once it ends, and at once for an ended run;
// a waiter on a client Runtime (nil runner) of the same Queue is woken
// too.
func TestWaitReturnsAtEnd(t *testing.T) {
	tr := trackWaits(t)
	q := openQueue(t, memURL())
	g := newGateRunner("w1")
	rt := newRuntime(t, q, g, nil)
	client := newRuntime(t, q, nil, nil)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "w1", Input: []byte("x")})
	ctx := context.Background()
	w := waitAsync(ctx, rt, "w1")
	wc := waitAsync(ctx, client, "w1")
	<-g.started
	waitStatus(t, rt, "w1", "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
	tr.waitArmed(t, "w1", 2)
	checkBlocked(t, w)
	checkBlocked(t, wc)
	close(g.gates["w1"])
	for _, r := range []waitResult{recvWait(t, w), recvWait(t, wc)} {
		if r.err != nil || r.st.State != runtime.StateSucceeded || string(r.st.Result) != "done:x" || r.st.RunID != "w1" {
			t.Fatalf("Wait = %+v, %v; want succeeded with result done:x", r.st, r.err)
		}
	}
	// Woken, not polling: each waiter read the run record when it began
	// and once it was woken by the end (a spurious wake at most besides:
	// a change of writer in member mode cannot happen here).
	if n := tr.count(tr.reads, "w1"); n > 2*3 {
		t.Fatalf("2 waiters read the run record %d times while it changed once: polling", n)
	}
	// Ended: at once, even with a ctx that is about to end.
	actx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	st, err := client.Wait(actx, "w1")
	if err != nil || st.State != runtime.StateSucceeded || string(st.Result) != "done:x" {
		t.Fatalf("Wait of an ended run = %+v, %v", st, err)
	}
}

// TestWaitManySteps: a waiter is woken by each step's settlement and
// waits on until the last one.
func TestWaitManySteps(t *testing.T) {
	q, _, _, rt := chainSetup(t, 20)
	client := newRuntime(t, q, nil, nil)
	mustSubmit(t, client, runtime.RunSpec{RunID: "steps", Input: []byte("p")})
	w := waitAsync(context.Background(), client, "steps")
	startRun(t, rt)
	r := recvWait(t, w)
	if r.err != nil || r.st.State != runtime.StateSucceeded || r.st.CurrentStep != 20 {
		t.Fatalf("Wait = %+v, %v; want succeeded at step 20", r.st, r.err)
	}
}

// TestWaitCancelled: a run cancelled from outside wakes its waiters with
// its Cancelled status.
func TestWaitCancelled(t *testing.T) {
	q := openQueue(t, memURL())
	client := newRuntime(t, q, nil, nil)
	mustSubmit(t, client, runtime.RunSpec{RunID: "c1", StartAt: time.Now().Add(time.Hour)})
	tr := trackWaits(t)
	w := waitAsync(context.Background(), client, "c1")
	tr.waitArmed(t, "c1", 1)
	if ok, err := client.Cancel(context.Background(), "c1"); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	r := recvWait(t, w)
	if r.err != nil || r.st.State != runtime.StateCancelled {
		t.Fatalf("Wait = %+v, %v; want cancelled", r.st, r.err)
	}
}

// TestWaitContext: Wait returns ctx's error when ctx ends before the run.
func TestWaitContext(t *testing.T) {
	q := openQueue(t, memURL())
	client := newRuntime(t, q, nil, nil)
	mustSubmit(t, client, runtime.RunSpec{RunID: "ctx1", StartAt: time.Now().Add(time.Hour)})
	ctx, cancel := context.WithCancel(context.Background())
	w := waitAsync(ctx, client, "ctx1")
	checkBlocked(t, w)
	cancel()
	r := recvWait(t, w)
	if r.err != context.Canceled {
		t.Fatalf("Wait after cancel = %+v, %v; want context.Canceled", r.st, r.err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if _, err := client.Wait(dctx, "ctx1"); err != context.DeadlineExceeded {
		t.Fatalf("Wait past its deadline = %v; want context.DeadlineExceeded", err)
	}
}

// TestWaitReturnsAtClose: closing the Queue handle a Wait reads through
// ends the Wait with queue.ErrClosed (it used to block until its ctx
// ended), while a Wait through another handle of the same store goes on
// waiting, and then sees the run end.
func TestWaitReturnsAtClose(t *testing.T) {
	url := memURL()
	q1, q2 := openQueue(t, url), openQueue(t, url)
	rt1, rt2 := newRuntime(t, q1, nil, nil), newRuntime(t, q2, nil, nil)
	mustSubmit(t, rt1, runtime.RunSpec{RunID: "c1"})
	waits := trackWaits(t)
	w1 := waitAsync(context.Background(), rt1, "c1")
	w2 := waitAsync(context.Background(), rt2, "c1")
	waits.waitArmed(t, "c1", 2)
	if err := q1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := recvWait(t, w1); !errors.Is(r.err, queue.ErrClosed) {
		t.Fatalf("Wait through the closed handle = %+v, %v; want ErrClosed", r.st, r.err)
	}
	checkBlocked(t, w2)
	if ok, err := rt2.Cancel(context.Background(), "c1"); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	if r := recvWait(t, w2); r.err != nil || r.st.State != runtime.StateCancelled {
		t.Fatalf("Wait through the open handle = %+v, %v; want cancelled", r.st, r.err)
	}
}

// TestWaitNotFound: an unknown run is ErrRunNotFound, at once.
func TestWaitNotFound(t *testing.T) {
	q := openQueue(t, memURL())
	client := newRuntime(t, q, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := client.Wait(ctx, "nope"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("Wait of an unknown run = %v; want ErrRunNotFound", err)
	}
}

// TestWaitManyWaiters: many waiters of many runs, all woken by their
// runs' ends, none early.
func TestWaitManyWaiters(t *testing.T) {
	q := openQueue(t, memURL())
	const runs, perRun = 20, 5
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("many-%d", i)
	}
	g := newGateRunner(ids...)
	g.started = make(chan string, runs)
	rt := newRuntime(t, q, g, nil)
	client := newRuntime(t, q, nil, nil)
	var waits [][]<-chan waitResult
	for _, id := range ids {
		mustSubmit(t, client, runtime.RunSpec{RunID: id, Input: []byte(id)})
		var ws []<-chan waitResult
		for range perRun {
			ws = append(ws, waitAsync(context.Background(), client, id))
		}
		waits = append(waits, ws)
	}
	startRun(t, rt)
	for i, id := range ids {
		for _, w := range waits[i] {
			checkBlocked(t, w)
		}
		close(g.gates[id])
		for _, w := range waits[i] {
			r := recvWait(t, w)
			if r.err != nil || r.st.State != runtime.StateSucceeded || string(r.st.Result) != "done:"+id {
				t.Fatalf("Wait(%s) = %+v, %v", id, r.st, r.err)
			}
		}
	}
}

// TestWaitReadOnly: on a Queue opened WithReadOnly, Wait refreshes and
// reads every poll interval, and sees the run end.
func TestWaitReadOnly(t *testing.T) {
	writerOnly(t, "opens a second, read-only Queue on the store's directory")
	url := fileURL(t)
	q := openQueue(t, url)
	g := newGateRunner("ro")
	rt := newRuntime(t, q, g, nil)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "ro", Input: []byte("r")})
	<-g.started
	rq, err := queue.Open(context.Background(), url, queue.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer rq.Close(context.Background())
	reader := newRuntime(t, rq, nil, nil)
	w := waitAsync(context.Background(), reader, "ro")
	checkBlocked(t, w)
	close(g.gates["ro"])
	r := recvWait(t, w)
	if r.err != nil || r.st.State != runtime.StateSucceeded || string(r.st.Result) != "done:r" {
		t.Fatalf("read-only Wait = %+v, %v", r.st, r.err)
	}
}

// TestWaitMemberFailover: a waiter in a cluster member survives the death
// of the writer (a process of its own, SIGKILLed): it rides the member's
// long-poll, then, once the member took over, waits at the new writer and
// returns when the run ends there.
func TestWaitMemberFailover(t *testing.T) {
	url := fileURL(t)
	setWriterFlags(url, "heartbeat=200ms")
	startMemberWriter(t, url)
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	q, err := queue.Open(octx, url, append(fastQueueOpts(), clusterOpt(), queue.WithHeartbeat(200*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(ctx) }) // after Run stopped
	if r := q.Role(); r != queue.RoleMember {
		t.Fatalf("opened as %v, want a member of the writer process", r)
	}
	g := newGateRunner("f1")
	rt := newRuntime(t, q, g, nil)
	client := newRuntime(t, q, nil, nil)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "f1", Input: []byte("f")})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "f0", Input: []byte("0")})
	<-g.started
	w := waitAsync(ctx, client, "f1")
	w0 := waitAsync(ctx, client, "f0") // ends before the kill: step f0 has no gate
	if r := recvWait(t, w0); r.err != nil || r.st.State != runtime.StateSucceeded {
		t.Fatalf("Wait(f0) = %+v, %v", r.st, r.err)
	}
	waitStatus(t, client, "f1", "running", func(s runtime.RunStatus) bool { return s.State == runtime.StateRunning })
	checkBlocked(t, w)
	killMemberWriter(t, url)
	testenv.Eventually(t, waitTimeout, "the member takes over", func() bool { return q.Role() == queue.RoleWriter })
	checkBlocked(t, w)
	close(g.gates["f1"])
	r := recvWait(t, w)
	if r.err != nil || r.st.State != runtime.StateSucceeded || string(r.st.Result) != "done:f" {
		t.Fatalf("Wait across the failover = %+v, %v", r.st, r.err)
	}
}
