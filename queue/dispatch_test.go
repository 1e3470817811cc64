package queue

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// idleSlots is how many slots the Work loops of queue have idle.
func (q *Queue) idleSlots(queue string) int {
	be := q.be
	if c, ok := be.(*clustered); ok {
		be, _ = c.current()
	}
	var t *slotTable
	switch b := be.(type) {
	case *local:
		t = &b.slotTable
	case *remote:
		t = &b.slotTable
	}
	t.smu.Lock()
	defer t.smu.Unlock()
	n := 0
	for _, s := range t.slots[queue] {
		n += s.idle()
	}
	return n
}

// parkedIdleSlots is how many idle slots the Work loops of queue have
// that are parked on their writer (see slots.parked).
func (q *Queue) parkedIdleSlots(queue string) int {
	be := q.be
	if c, ok := be.(*clustered); ok {
		be, _ = c.current()
	}
	r, ok := be.(*remote)
	if !ok {
		return 0
	}
	r.smu.Lock()
	defer r.smu.Unlock()
	n := 0
	for _, s := range r.slots[queue] {
		s.mu.Lock()
		if s.parked {
			n += s.free
		}
		s.mu.Unlock()
	}
	return n
}

// startWork runs Work on queue in the background; the returned stop ends it
// and returns its error.
func startWork(t *testing.T, q *Queue, queue string, h Handler, opts WorkOptions) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t0ctx)
	errc := make(chan error, 1)
	go func() { errc <- q.Work(ctx, queue, h, opts) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-errc })
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// An enqueue with Dispatch starts in an idle slot, claimed by the enqueue's
// own transaction: the worker commits nothing to claim it.
func TestDispatchStartsInIdleSlot(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	got := make(chan *Job, 1)
	startWork(t, q, "w", func(ctx context.Context, j *Job) error {
		got <- j
		return nil
	}, WorkOptions{Concurrency: 2})
	testenv.Eventually(t, 10*time.Second, "two idle slots", func() bool { return q.idleSlots("w") == 2 })

	before := q.StorageStats().Transactions
	r := mustEnqueue(t, q, "w", "now", EnqueueOptions{dispatch: true, Headers: map[string]string{"h": "v"}})
	if !r.dispatched || r.claimed != nil {
		t.Fatalf("result %+v, want Dispatched and no Claimed", r)
	}
	var j *Job
	select {
	case j = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("dispatched job did not run")
	}
	if j.ID != r.JobID || string(j.Payload) != "now" || j.Attempt != 1 || j.Headers["h"] != "v" {
		t.Fatalf("handler got %+v", j)
	}
	testenv.Eventually(t, 10*time.Second, "no job pending or claimed", func() bool { s, _ := q.Stats(t0ctx, "w"); return s.Pending+s.Claimed == 0 })
	// The enqueue (with its claim) and the ack: two transactions.
	if n := q.StorageStats().Transactions - before; n != 2 {
		t.Fatalf("%d transactions for a dispatched job, want 2 (enqueue+claim, ack)", n)
	}
	testenv.Eventually(t, 10*time.Second, "two idle slots", func() bool { return q.idleSlots("w") == 2 })
}

func TestDispatchNotGranted(t *testing.T) {
	clk := newFakeClock()
	q := openT(t, testenv.MemURL(t.Name()), withClock(clk))
	release := make(chan struct{})
	var ran []string
	var mu sync.Mutex
	startWork(t, q, "w", func(ctx context.Context, j *Job) error {
		mu.Lock()
		ran = append(ran, string(j.Payload))
		mu.Unlock()
		if string(j.Payload) == "block" {
			<-release
		}
		return nil
	}, WorkOptions{Concurrency: 1, PollInterval: time.Hour})
	testenv.Eventually(t, 10*time.Second, "one idle slot", func() bool { return q.idleSlots("w") == 1 })

	// No Work loop serves the queue.
	if r := mustEnqueue(t, q, "other", "x", EnqueueOptions{dispatch: true}); r.dispatched {
		t.Fatal("dispatched to a queue no worker serves")
	}
	// Not due yet.
	if r := mustEnqueue(t, q, "w", "later", EnqueueOptions{dispatch: true, Delay: time.Minute}); r.dispatched {
		t.Fatal("dispatched a delayed job")
	}
	if n := q.idleSlots("w"); n != 1 {
		t.Fatalf("%d idle slots after a refused dispatch, want 1", n)
	}
	// Another job became ready (the delayed one, due under the fake clock;
	// the loop sleeps on its poll interval): dispatch does not overtake it.
	clk.Advance(2 * time.Minute)
	if r := mustEnqueue(t, q, "w", "behind", EnqueueOptions{dispatch: true, Priority: 5}); r.dispatched {
		t.Fatal("dispatch overtook a ready job")
	}
	// Both run once the loop wakes, in the loop's order: priority first.
	testenv.Eventually(t, 10*time.Second, "two jobs run", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 2 })
	if fmt.Sprint(ran) != "[behind later]" {
		t.Fatalf("ran %v", ran)
	}

	// A busy slot: the job waits for the worker.
	mustEnqueue(t, q, "w", "block", EnqueueOptions{dispatch: true})
	testenv.Eventually(t, 10*time.Second, "three jobs run", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 3 })
	if r := mustEnqueue(t, q, "w", "queued", EnqueueOptions{dispatch: true}); r.dispatched {
		t.Fatal("dispatched with no idle slot")
	}
	// A dedup hit takes no slot and starts nothing.
	close(release)
	testenv.Eventually(t, 10*time.Second, "four jobs run", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 4 })
	testenv.Eventually(t, 10*time.Second, "one idle slot", func() bool { return q.idleSlots("w") == 1 })
	mustEnqueue(t, q, "w", "blocker2", EnqueueOptions{Delay: time.Hour, DedupKey: "k"})
	if r := mustEnqueue(t, q, "w", "dup", EnqueueOptions{dispatch: true, DedupKey: "k"}); r.dispatched || !r.Duplicate {
		t.Fatalf("dedup hit: %+v", r)
	}
	// A failed transaction gives its slot back.
	if _, err := q.Commit(t0ctx, new(Txn).Enqueue("w", []byte("x"), EnqueueOptions{dispatch: true}).
		CompareAndPut([]byte("k"), []byte("nope"), []byte("v"))); err == nil {
		t.Fatal("the condition should have failed")
	}
	if n := q.idleSlots("w"); n != 1 {
		t.Fatalf("%d idle slots after a failed dispatch, want 1", n)
	}
	if s, _ := q.Stats(t0ctx, "w"); s.Pending != 0 || s.Scheduled != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Dispatched jobs and the loop's own claims share the slots: never more
// than Concurrency handlers at once, and every job runs exactly once.
func TestDispatchRespectsConcurrency(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	const conc, jobs = 3, 300
	var running, peak atomic.Int32
	var mu sync.Mutex
	seen := map[string]int{}
	startWork(t, q, "w", func(ctx context.Context, j *Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		seen[j.ID]++
		mu.Unlock()
		if j.Payload[len(j.Payload)-1] == '0' {
			time.Sleep(time.Millisecond) // hold a slot now and then
		}
		return nil
	}, WorkOptions{Concurrency: conc})
	var wg sync.WaitGroup
	var dispatched atomic.Int32
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs / 8 {
				r, err := q.Enqueue(t0ctx, "w", []byte(fmt.Sprint(g, i)), EnqueueOptions{dispatch: true})
				if err != nil {
					t.Error(err)
					return
				}
				if r.dispatched {
					dispatched.Add(1)
				}
				time.Sleep(time.Millisecond) // let the slots drain at times
			}
		}()
	}
	wg.Wait()
	total := jobs / 8 * 8
	testenv.Eventually(t, 10*time.Second, "every job seen", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == total })
	testenv.Eventually(t, 10*time.Second, "no job pending or claimed", func() bool { s, _ := q.Stats(t0ctx, "w"); return s.Pending+s.Claimed == 0 })
	if p := peak.Load(); p > conc {
		t.Fatalf("%d handlers ran at once, concurrency is %d", p, conc)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %s ran %d times", id, n)
		}
	}
	// How many were dispatched depends on timing (typically half or more;
	// fewer under the race detector); TestDispatchStartsInIdleSlot pins
	// the dispatch itself down.
	t.Logf("%d of %d jobs dispatched", dispatched.Load(), total)
}

// A worker that is stopping takes no dispatched job; the job waits for the
// next worker with its attempt uncounted.
func TestDispatchToStoppedWorker(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	stop := startWork(t, q, "w", func(ctx context.Context, j *Job) error { return nil }, WorkOptions{Concurrency: 1})
	testenv.Eventually(t, 10*time.Second, "one idle slot", func() bool { return q.idleSlots("w") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if r := mustEnqueue(t, q, "w", "after", EnqueueOptions{dispatch: true}); r.dispatched {
		t.Fatal("dispatched to a stopped worker")
	}
	if j := mustClaim(t, q, "w"); j == nil || j.Attempt != 1 {
		t.Fatalf("claimed %+v", j)
	}
}

// A claim of the Work loop that finds the slot it needs taken by a
// dispatched enqueue must wake when the slot comes back: the ready job it
// could not claim gets no other signal (the poll interval here is an hour).
func TestDispatchTakenSlotWakesClaim(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	release := make(chan struct{})
	ran := make(chan string, 4)
	var armed atomic.Bool
	testHookClaimWait = func() {
		if st, _ := q.Stats(t0ctx, "w"); st.Pending > 0 || !armed.CompareAndSwap(true, false) {
			return
		}
		// Between the loop's idle check and its claim: a dispatched
		// enqueue takes the only slot, then a plain job becomes ready.
		if r := mustEnqueue(t, q, "w", "dispatched", EnqueueOptions{dispatch: true}); !r.dispatched {
			t.Error("not dispatched")
		}
		mustEnqueue(t, q, "w", "plain", EnqueueOptions{})
	}
	t.Cleanup(func() { testHookClaimWait = nil })
	startWork(t, q, "w", func(ctx context.Context, j *Job) error {
		ran <- string(j.Payload)
		if string(j.Payload) == "dispatched" {
			<-release
		}
		return nil
	}, WorkOptions{Concurrency: 1, PollInterval: time.Hour})
	testenv.Eventually(t, 10*time.Second, "one idle slot", func() bool { return q.idleSlots("w") == 1 })
	armed.Store(true)
	// Wakes the loop; the hook fires on the claim after this job ran.
	mustEnqueue(t, q, "w", "wake", EnqueueOptions{})
	for got := ""; got != "dispatched"; {
		select {
		case got = <-ran:
			if got == "plain" {
				t.Fatal("plain ran before the dispatched job's slot came back")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the dispatched job did not run")
		}
	}
	close(release)
	deadline := time.After(10 * time.Second)
	for seen := map[string]bool{}; !seen["plain"]; {
		select {
		case got := <-ran:
			seen[got] = true
		case <-deadline:
			t.Fatal("the ready job waited for the poll interval after the slot came back")
		}
	}
}

// A claim whose large payload cannot be read gives back the slots it took:
// Work returns the error instead of waiting forever for them.
func TestDispatchClaimResolveFailurePutsSlots(t *testing.T) {
	dir := t.TempDir()
	q := openT(t, "file://"+dir, WithLargeValueThreshold(1024))
	payload := []byte(strings.Repeat("unreadable-payload ", 200))
	if _, err := q.Enqueue(t0ctx, "w", payload, EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	removed := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, _ := os.ReadFile(p); bytes.Equal(b, payload) {
			os.Remove(p)
			removed++
		}
		return nil
	})
	if removed != 1 {
		t.Fatalf("removed %d payload objects, want 1", removed)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- q.Work(t0ctx, "w", func(context.Context, *Job) error { return nil }, WorkOptions{Concurrency: 2})
	}()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Work returned nil after a failed payload read")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Work hung after a failed payload read (slots leaked)")
	}
}

// A member's dispatched enqueue takes a slot only from a loop parked on
// its writer (its queue had nothing to claim): a loop that is claiming
// jobs would get its slot back unused a round trip later, after waking
// for nothing. One process takes any idle slot (its claims are not a
// round trip away). TestClusterMemberDispatch covers the parked loop end
// to end.
func TestMemberDispatchTakesOnlyParkedSlots(t *testing.T) {
	var tbl slotTable
	s := &slots{queue: "w", total: 1, free: 1, freed: make(chan struct{}, 1), done: make(chan struct{})}
	tbl.addSlots(s)
	ops := []txnOp{{Kind: opEnqueue, Queue: "w", Dispatch: true}}
	now := time.Now()
	if got := tbl.takeSlots(ops, now, true); got != nil {
		t.Fatalf("a member took the slot of a loop that is not parked: %v", got)
	}
	s.park(true)
	got := tbl.takeSlots(ops, now, true)
	if got[0] != s {
		t.Fatalf("a member did not take the idle slot of a parked loop: %v", got)
	}
	s.put()
	s.park(false)
	if got := tbl.takeSlots(ops, now, false); got[0] != s {
		t.Fatalf("one process did not take an idle slot: %v", got)
	}
	s.put()
	if s.idle() != 1 {
		t.Fatalf("%d idle slots after the puts, want 1", s.idle())
	}
}
