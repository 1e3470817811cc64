package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/stepwell/stepwell/internal/testenv"
)

func TestEnqueueClaimed(t *testing.T) {
	q, clk := openJobs(t, WithMaxAttempts(2))
	older := mustEnqueue(t, q, "q", "older", EnqueueOptions{})
	r := mustEnqueue(t, q, "q", "chained", EnqueueOptions{claim: true, Headers: map[string]string{"h": "v"}})
	j := r.claimed
	if j == nil || j.ID != r.JobID || string(j.Payload) != "chained" || j.Attempt != 1 || j.State != JobClaimed || j.Headers["h"] != "v" {
		t.Fatalf("Claimed = %+v", j)
	}
	if got, err := q.GetJob(t0ctx, j.ID); err != nil || got.State != JobClaimed || got.Attempt != 1 {
		t.Fatalf("GetJob = %+v, %v", got, err)
	}
	// Nobody else gets it; the older pending job is next for a Claim.
	if c := mustClaim(t, q, "q"); c == nil || c.ID != older.JobID {
		t.Fatalf("Claim = %+v, want the older job", c)
	} else if err := q.Ack(t0ctx, c); err != nil {
		t.Fatal(err)
	}
	if c := mustClaim(t, q, "q"); c != nil {
		t.Fatalf("claimed a chained job twice: %+v", c)
	}
	// Its lease is a normal one: renewed, then expired and requeued with
	// the attempt counted.
	clk.Advance(20 * time.Second)
	if err := q.renew(j); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second)
	q.reapNow()
	if err := q.Ack(t0ctx, j); !IsClaimLost(err) {
		t.Fatalf("Ack after expiry = %v, want claim lost", err)
	}
	clk.Advance(time.Second)
	j2 := mustClaim(t, q, "q")
	if j2 == nil || j2.ID != j.ID || j2.Attempt != 2 {
		t.Fatalf("requeued chained job claimed as %+v", j2)
	}
	if err := q.Ack(t0ctx, j2); err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueClaimNotGranted(t *testing.T) {
	q, _ := openJobs(t)
	// Not due: a delayed job stays scheduled.
	if r := mustEnqueue(t, q, "q", "later", EnqueueOptions{claim: true, Delay: time.Minute}); r.claimed != nil {
		t.Fatalf("a delayed job was claimed: %+v", r.claimed)
	}
	// A ready job of higher priority goes first.
	mustEnqueue(t, q, "q", "high", EnqueueOptions{Priority: 3})
	if r := mustEnqueue(t, q, "q", "low", EnqueueOptions{claim: true, Priority: 1}); r.claimed != nil {
		t.Fatalf("claimed past a higher-priority job: %+v", r.claimed)
	}
	// Same or lower priority waiting does not stop it.
	if r := mustEnqueue(t, q, "q", "top", EnqueueOptions{claim: true, Priority: 3}); r.claimed == nil {
		t.Fatal("claim refused with only equal-priority jobs ready")
	}
	// A dedup hit enqueues nothing and claims nothing.
	mustEnqueue(t, q, "d", "first", EnqueueOptions{DedupKey: "k"})
	if r := mustEnqueue(t, q, "d", "second", EnqueueOptions{DedupKey: "k", claim: true}); !r.Duplicate || r.claimed != nil {
		t.Fatalf("dedup hit = %+v", r)
	}
	if s, _ := q.Stats(t0ctx, "q"); s.Claimed != 1 || s.Pending != 2 || s.Scheduled != 1 {
		t.Fatalf("stats = %+v, want 1 claimed, 2 pending, 1 scheduled", s)
	}
}

// What a transaction's earlier operations make ready counts against a
// Claim of lower priority later in it: a released job, a new job.
func TestEnqueueClaimSeesEarlierOps(t *testing.T) {
	q, _ := openJobs(t)
	mustEnqueue(t, q, "q", "high", EnqueueOptions{Priority: 5})
	j := mustClaim(t, q, "q")
	res, err := q.Commit(t0ctx, new(Txn).release(j).Enqueue("q", []byte("low"), EnqueueOptions{Priority: 1, claim: true}))
	if err != nil || res.Enqueued[0].claimed != nil {
		t.Fatalf("Release of a priority 5 job, then Enqueue priority 1 with Claim = %+v, %v; want not claimed", res, err)
	}
	res, err = q.Commit(t0ctx, new(Txn).Enqueue("r", []byte("a"), EnqueueOptions{Priority: 2}).Enqueue("r", []byte("b"), EnqueueOptions{Priority: 1, claim: true}))
	if err != nil || res.Enqueued[1].claimed != nil {
		t.Fatalf("Enqueue priority 2, then Enqueue priority 1 with Claim = %+v, %v; want not claimed", res, err)
	}
}

func TestEnqueueClaimFailedTxnGrantsNothing(t *testing.T) {
	q, _ := openJobs(t)
	txn := new(Txn).Enqueue("q", []byte("x"), EnqueueOptions{claim: true, JobID: "job-1"}).
		CompareAndPut([]byte("k"), []byte("not there"), []byte("v"))
	if _, err := q.Commit(t0ctx, txn); !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("Commit = %v, want condition failed", err)
	}
	if _, err := q.GetJob(t0ctx, "job-1"); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("job of a failed transaction exists: %v", err)
	}
	if err := q.renew(&Job{ID: "job-1", Queue: "q", token: 1}); !IsClaimLost(err) {
		t.Fatalf("a failed transaction left a lease: %v", err)
	}
}

func TestRelease(t *testing.T) {
	q, _ := openJobs(t, WithMaxAttempts(1))
	a := mustEnqueue(t, q, "q", "a", EnqueueOptions{})
	mustEnqueue(t, q, "q", "b", EnqueueOptions{})
	j := mustClaim(t, q, "q")
	if j.ID != a.JobID {
		t.Fatalf("claimed %s first", j.ID)
	}
	if err := q.release(t0ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(t0ctx, j); !IsClaimLost(err) {
		t.Fatalf("Ack after Release = %v, want claim lost", err)
	}
	if err := q.release(t0ctx, j); !IsClaimLost(err) {
		t.Fatalf("second Release = %v, want claim lost", err)
	}
	// Back in its FIFO place, with the attempt not counted: with one
	// attempt allowed, a Nack of the next claim dead-letters it, proving
	// that claim is attempt 1 again.
	again := mustClaim(t, q, "q")
	if again.ID != a.JobID || again.Attempt != 1 || len(again.History) != 0 {
		t.Fatalf("after Release claimed %+v", again)
	}
	if err := q.Nack(t0ctx, again, errors.New("boom"), 0); err != nil {
		t.Fatal(err)
	}
	if s, _ := q.Stats(t0ctx, "q"); s.Dead != 1 || s.Pending != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

// A handler that chains a job to itself runs it next in the same slot,
// ahead of older jobs, with what its handler carried along, and a stopping
// worker releases a handed-off job.
func TestWorkHandoff(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()))
	for i := range 3 {
		mustEnqueue(t, q, "w", fmt.Sprint("old", i), EnqueueOptions{})
	}
	ctx, cancel := context.WithCancel(t0ctx)
	defer cancel()
	var mu sync.Mutex
	var order []string
	errc := make(chan error, 1)
	go func() {
		errc <- q.Work(ctx, "w", func(jctx context.Context, j *Job) error {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s/%d/%v", j.Payload, j.Attempt, handoff.Carried[*Job](jctx)))
			mu.Unlock()
			p := string(j.Payload)
			if !strings.HasPrefix(p, "old0") || len(p) > len("old0+") {
				return q.Ack(jctx, j)
			}
			r, err := q.Commit(jctx, new(Txn).Ack(j).Enqueue("w", []byte(p+"+"), EnqueueOptions{claim: true}))
			if err != nil {
				return err
			}
			if c := r.Enqueued[0].claimed; c == nil || !handoff.Give(jctx, "w", c, "from "+p) {
				t.Errorf("chained job not handed off: %+v", r.Enqueued[0])
			}
			if handoff.Give(jctx, "w", r.Enqueued[0].claimed, nil) {
				t.Error("a second Handoff was accepted")
			}
			return nil
		}, WorkOptions{Concurrency: 1, manualSettle: true})
	}()
	testenv.Eventually(t, 10*time.Second, "no job pending or claimed", func() bool { s, _ := q.Stats(t0ctx, "w"); return s.Pending+s.Claimed == 0 })
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got := strings.Join(order, " ")
	if got != "old0/1/<nil> old0+/1/from old0 old0++/1/from old0+ old1/1/<nil> old2/1/<nil>" {
		t.Fatalf("run order %q, want the chain first", got)
	}
	if handoff.Give(t0ctx, "w", &Job{Queue: "w"}, nil) {
		t.Fatal("Handoff outside a worker was accepted")
	}
}

func TestWorkStoppingReleasesHandoff(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()), WithMaxAttempts(1))
	mustEnqueue(t, q, "w", "first", EnqueueOptions{})
	ctx, cancel := context.WithCancel(t0ctx)
	errc := make(chan error, 1)
	var runs []string
	go func() {
		errc <- q.Work(ctx, "w", func(jctx context.Context, j *Job) error {
			runs = append(runs, string(j.Payload))
			r, err := q.Commit(jctx, new(Txn).Ack(j).Enqueue("w", []byte("next"), EnqueueOptions{claim: true}))
			if err != nil {
				return err
			}
			cancel() // the worker stops before it would run the handoff
			handoff.Give(jctx, "w", r.Enqueued[0].claimed, nil)
			return nil
		}, WorkOptions{Concurrency: 1, manualSettle: true})
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if strings.Join(runs, ",") != "first" {
		t.Fatalf("runs %v: a stopping worker ran the handoff", runs)
	}
	j := mustClaim(t, q, "w")
	if j == nil || string(j.Payload) != "next" || j.Attempt != 1 {
		t.Fatalf("released handoff claimed as %+v, want attempt 1", j)
	}
}

// A handed-off job whose lease ran out while the handler that handed it off
// was still running has been requeued by the reaper (and may be claimed by
// another worker): the slot must not run it. It used to: the handler was
// called for a job this process no longer held.
func TestWorkHandoffLostWhileWaiting(t *testing.T) {
	q, clk := openJobs(t)
	mustEnqueue(t, q, "w", "first", EnqueueOptions{})
	runs := make(chan string, 8) // payload/attempt/held, per handler call
	handler := func(jctx context.Context, j *Job) error {
		runs <- fmt.Sprintf("%s/%d/held=%v", j.Payload, j.Attempt, q.renew(j) == nil)
		if string(j.Payload) != "first" || j.Attempt != 1 {
			return nil
		}
		r, err := q.Enqueue(jctx, "w", []byte("next"), EnqueueOptions{claim: true})
		if err != nil || r.claimed == nil || !handoff.Give(jctx, "w", r.claimed, nil) {
			t.Errorf("Enqueue with Claim = %+v, %v, or Handoff refused", r, err)
			return nil
		}
		// The handler runs on past the lease of the job it handed off (and
		// its own); the reaper requeues both.
		clk.Advance(31 * time.Second)
		if err := q.reapNow(); err != nil {
			t.Error(err)
		}
		return nil
	}
	wctx, stop := context.WithCancel(t0ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- q.Work(wctx, "w", handler, WorkOptions{manualSettle: true}) }()
	// Both jobs are retried after their backoff (at most 1s); then each
	// runs once more, under a fresh claim.
	testenv.Eventually(t, 10*time.Second, "two scheduled jobs", func() bool { s, _ := q.Stats(t0ctx, "w"); return s.Scheduled == 2 })
	clk.Advance(2 * time.Second)
	var got []string
	for len(got) < 3 {
		select {
		case r := <-runs:
			got = append(got, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("runs %v, want 3", got)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(runs)
	for r := range runs {
		got = append(got, r)
	}
	for _, r := range got {
		if strings.HasSuffix(r, "held=false") {
			t.Fatalf("runs %v: the handler ran a job whose claim was lost", got)
		}
	}
}
