package queue

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/stepwell/stepwell/internal/testenv"
)

// TestSettlementRefillsSlot: in one process, the settlement that frees a
// Work slot also claims the slot's next job in the same transaction, and
// the job runs there next: no claim of the loop's, no transaction of its
// own. Each job comes with the value its loop prefetches (see
// handoff.Prefetch), read with the claim, whether the loop claimed it or
// a settlement did.
func TestSettlementRefillsSlot(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	for _, run := range []string{"a", "b"} {
		if err := q.Put(t0ctx, []byte("rec/"+run), []byte("record of "+run)); err != nil {
			t.Fatal(err)
		}
		mustEnqueue(t, q, "w", run, EnqueueOptions{Headers: map[string]string{"run": run}})
	}
	var claims atomic.Int32
	testHookClaimWait = func() { claims.Add(1) }
	t.Cleanup(func() { testHookClaimWait = nil })

	type ran struct {
		payload, carried string
		claims           int32
		txns             uint64
	}
	got := make(chan ran, 4)
	ctx, cancel := context.WithCancel(handoff.WithPrefetch(t0ctx, handoff.Prefetch{Header: "run", Prefix: "rec/"}))
	defer cancel()
	done := workIn(ctx, q, "w", func(ctx context.Context, j *Job) error {
		c, _ := handoff.Carried[*Job](ctx).([]byte)
		got <- ran{string(j.Payload), string(c), claims.Load(), q.StorageStats().Transactions}
		return nil
	}, WorkOptions{Concurrency: 1, PollInterval: time.Hour})
	var runs []ran
	for range 2 {
		select {
		case r := <-got:
			runs = append(runs, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("ran %+v; a job did not run", runs)
		}
	}
	for i, want := range []string{"a", "b"} {
		if r := runs[i]; r.payload != want || r.carried != "record of "+want {
			t.Errorf("run %d: %+v, want job %s with its record prefetched", i, r, want)
		}
	}
	// One claim of the loop's (a's); b was claimed by a's settlement,
	// the one transaction between the two runs.
	if runs[1].claims != 1 || runs[1].txns != runs[0].txns+1 {
		t.Errorf("b ran after %d claims of the loop and %d transactions since a ran; want 1 and 1 (a's settlement)",
			runs[1].claims, runs[1].txns-runs[0].txns)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStoppingWorkerRefillsNothing: a settlement in a Work loop that is
// stopping claims no next job: the job stays pending for another worker,
// its attempt not counted.
func TestStoppingWorkerRefillsNothing(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	mustEnqueue(t, q, "w", "a", EnqueueOptions{})
	b := mustEnqueue(t, q, "w", "b", EnqueueOptions{}).JobID
	started, release := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(t0ctx)
	defer cancel()
	done := workIn(ctx, q, "w", func(ctx context.Context, j *Job) error {
		if string(j.Payload) == "b" {
			t.Error("b ran in a stopping worker")
		}
		close(started)
		<-release
		return nil
	}, WorkOptions{Concurrency: 1, PollInterval: time.Hour})
	<-started
	cancel() // the loop stops; a's settlement comes after
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j, err := q.GetJob(t0ctx, b)
	if err != nil || j.State != JobPending || j.Attempt != 0 {
		t.Fatalf("b after the worker stopped: %+v, %v; want pending, no attempt", j, err)
	}
}

// TestClusterClaimsPrefetch: a member's claims, the Work loop's and a
// settlement's refill, come with the value the loop prefetches, read by
// the writer with the claim; one kept as a blob is read apart.
func TestClusterClaimsPrefetch(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url, WithLargeValueThreshold(1024))
	m := openMember(t, url, WithLargeValueThreshold(1024))
	recs := map[string]string{"a": "record of a", "b": "record of b", "c": strings.Repeat("c", 4096)}
	for _, run := range []string{"a", "b", "c"} {
		if err := w.Put(t0ctx, []byte("rec/"+run), []byte(recs[run])); err != nil {
			t.Fatal(err)
		}
		mustEnqueue(t, w, "w", run, EnqueueOptions{Headers: map[string]string{"run": run}})
	}
	got := make(chan [2]string, 4)
	ctx, cancel := context.WithCancel(handoff.WithPrefetch(t0ctx, handoff.Prefetch{Header: "run", Prefix: "rec/"}))
	defer cancel()
	done := workIn(ctx, m, "w", func(ctx context.Context, j *Job) error {
		c, _ := handoff.Carried[*Job](ctx).([]byte)
		got <- [2]string{string(j.Payload), string(c)}
		return nil
	}, WorkOptions{Concurrency: 1, PollInterval: time.Hour})
	for _, want := range []string{"a", "b", "c"} {
		select {
		case r := <-got:
			if r[0] != want || r[1] != recs[want] {
				t.Errorf("ran %q with %d bytes carried, want %q with its record (%d bytes)", r[0], len(r[1]), want, len(recs[want]))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("job %q did not run", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRefillGivenBackWhenCallerGivesUp: a settlement whose caller stops
// waiting before its WAL write lands (ErrOutcomeUnknown) still claimed the
// slot's next job in its transaction; once the write lands, nobody runs
// that job, so it is given back: pending again, its attempt not counted.
func TestRefillGivenBackWhenCallerGivesUp(t *testing.T) {
	q, f, _ := openFaulty(t)
	mustEnqueue(t, q, "v", "j", EnqueueOptions{})
	j := mustClaim(t, q, "v")
	k := mustEnqueue(t, q, "v", "k", EnqueueOptions{}).JobID

	f.Stall()
	puts := q.StorageStats().Puts
	ctx, cancel := context.WithCancel(settlingSlot(t0ctx, "v", j.ID))
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := q.Commit(ctx, new(Txn).Ack(j))
		res <- err
	}()
	// Applied (the ack and k's claim) and on its way to the store.
	testenv.Eventually(t, 10*time.Second, "the settlement's WAL write to start", func() bool { return q.StorageStats().Puts > puts })
	l := q.be.(*local)
	l.lmu.Lock()
	_, claimed := l.leases[k]
	l.lmu.Unlock()
	if !claimed {
		t.Fatal("the settlement did not claim k for the slot")
	}
	cancel()
	if err := <-res; !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Commit = %v, want ErrOutcomeUnknown", err)
	}
	f.Unstall()
	testenv.Eventually(t, 10*time.Second, "j done or gone, k pending again", func() bool {
		jj, err1 := q.GetJob(t0ctx, j.ID)
		jk, err2 := q.GetJob(t0ctx, k)
		jDone := errors.Is(err1, ErrJobNotFound) || err1 == nil && jj.State == JobDone
		return jDone && err2 == nil && jk.State == JobPending
	})
	if jk, err := q.GetJob(t0ctx, k); err != nil || jk.State != JobPending || jk.Attempt != 0 {
		t.Fatalf("k = %+v, %v: want pending, no attempt counted", jk, err)
	}
}

// workIn runs q.Work in the background; its error comes on the channel.
func workIn(ctx context.Context, q *Queue, queue string, h Handler, opts WorkOptions) <-chan error {
	done := make(chan error, 1)
	go func() { done <- q.Work(ctx, queue, h, opts) }()
	return done
}

// settlingSlot returns ctx carrying the Work slot of a handler running
// jobID of queue that is settling it (see handoff.Settling), as a Work
// loop's handler is once it returned.
func settlingSlot(ctx context.Context, queue, jobID string) context.Context {
	ctx = handoff.With(ctx, &handoff.Slot[*Job]{Queue: queue, JobID: jobID})
	handoff.Settling[*Job](ctx)
	return ctx
}

// TestAckFirstDoesNotRefill: a handler that settles its job and works on
// (Ack first) claims no next job with that settlement: the job would wait
// for the handler to return, its lease running and not renewed, and could
// lose an attempt it never ran. It stays pending for the loop (here: the
// only slot is busy), and runs once the handler returns, as attempt 1.
func TestAckFirstDoesNotRefill(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()), WithLease(300*time.Millisecond))
	mustEnqueue(t, q, "w", "a", EnqueueOptions{})
	b := mustEnqueue(t, q, "w", "b", EnqueueOptions{}).JobID
	acked, release := make(chan struct{}), make(chan struct{})
	ranB := make(chan uint32, 1)
	ctx, cancel := context.WithCancel(t0ctx)
	defer cancel()
	done := workIn(ctx, q, "w", func(ctx context.Context, j *Job) error {
		if string(j.Payload) == "b" {
			ranB <- j.Attempt
			return nil
		}
		if err := q.Ack(ctx, j); err != nil {
			return err
		}
		close(acked)
		<-release // works on, past b's lease
		return nil
	}, WorkOptions{Concurrency: 1, PollInterval: time.Hour})
	<-acked
	time.Sleep(400 * time.Millisecond) // longer than a lease
	if j, err := q.GetJob(t0ctx, b); err != nil || j.State != JobPending || j.Attempt != 0 {
		t.Errorf("b while a's handler works on after its Ack: %+v, %v; want pending, no attempt", j, err)
	}
	close(release)
	select {
	case attempt := <-ranB:
		if attempt != 1 {
			t.Errorf("b ran as attempt %d, want 1", attempt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b did not run")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
