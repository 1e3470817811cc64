package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
	"github.com/stepwell/stepwell/internal/testenv"
)

// openFaulty opens a memory store through a fault-injecting bucket, with a
// fake clock.
func openFaulty(t *testing.T, opts ...Option) (*Queue, *objstoretest.Fault, *fakeClock) {
	t.Helper()
	var f *objstoretest.Fault
	testHookBucket = func(b objstore.Bucket) objstore.Bucket {
		f = objstoretest.NewFault(b, 1)
		return f
	}
	defer func() { testHookBucket = nil }()
	clk := newFakeClock()
	q := openT(t, testenv.MemURL(t.Name()), append([]Option{withClock(clk)}, opts...)...)
	t.Cleanup(f.Reset) // before Close (cleanups run last first)
	return q, f, clk
}

// stallUntilUnhealthy advances the fake clock until the store, whose WAL
// write is stalled, reports itself unhealthy.
func stallUntilUnhealthy(t *testing.T, q *Queue, clk *fakeClock) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the queue to report itself unhealthy", func() bool {
		clk.Advance(100 * time.Millisecond)
		return !q.Health().Healthy
	})
}

// TestStallLongerThanLeaseSpendsNoAttempt: with one attempt per job and a
// store that stalls for a minute (60 leases) on the queue's clock, no lease
// runs out and no attempt is spent: a job claimed before the stall can still
// be renewed and acknowledged, a claim made in a transaction during the
// stall (EnqueueOptions.Claim, not durable until the store answers) starts
// its lease once durable, a Claim during the stall waits for the store, and
// nothing is dead-lettered. Before: the reaper expired both claims on the
// local clock, dead-lettering them.
func TestStallLongerThanLeaseSpendsNoAttempt(t *testing.T) {
	q, f, clk := openFaulty(t, WithLease(time.Second), WithMaxAttempts(1))
	mustEnqueue(t, q, "q", "held", EnqueueOptions{})
	mustEnqueue(t, q, "q", "waiting", EnqueueOptions{})
	held := mustClaim(t, q, "q")

	f.Stall()
	var wg sync.WaitGroup
	var chained EnqueueResult
	var chainErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		chained, chainErr = q.Enqueue(t0ctx, "q", []byte("chained"), EnqueueOptions{claim: true, Priority: 1})
	}()
	stallUntilUnhealthy(t, q, clk)
	h := q.Health()
	if st := q.StorageStats().Health; st.Healthy || h.Stalled <= 0 {
		t.Fatalf("Health during the stall = %+v, StorageStats.Health %+v", h, st)
	}
	var claimed *Job
	var claimErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		claimed, claimErr = q.claimOne(t0ctx, "q")
	}()
	for range 60 {
		clk.Advance(time.Second)
		if err := q.reapNow(); err != nil {
			t.Fatal(err)
		}
	}
	f.Unstall()
	wg.Wait()
	if chainErr != nil || chained.claimed == nil {
		t.Fatalf("Enqueue with Claim across the stall: %+v, %v", chained, chainErr)
	}
	if claimErr != nil || claimed == nil || string(claimed.Payload) != "waiting" {
		t.Fatalf("Claim across the stall: %+v, %v", claimed, claimErr)
	}
	if !q.Health().Healthy {
		t.Fatalf("Health after the stall = %+v", q.Health())
	}
	if err := q.reapNow(); err != nil {
		t.Fatal(err)
	}
	if err := q.renew(held); err != nil {
		t.Fatalf("Renew of a job claimed before the stall: %v", err)
	}
	for _, j := range []*Job{held, chained.claimed, claimed} {
		if err := q.Ack(t0ctx, j); err != nil {
			t.Fatalf("Ack of %s: %v", j.Payload, err)
		}
		if j.Attempt != 1 {
			t.Fatalf("job %s: attempt %d", j.Payload, j.Attempt)
		}
	}
	if s, err := q.Stats(t0ctx, "q"); err != nil || s.Dead != 0 || s.Pending != 0 || s.Claimed != 0 {
		t.Fatalf("Stats after the stall = %+v, %v", s, err)
	}
}

// TestCommitHonoursContextDuringStall: a commit whose ctx ends while the
// store is stalled returns ErrOutcomeUnknown, wrapping ctx's error, at
// once; the transaction commits once the store answers, and a job claimed
// for the caller that gave up is released, its attempt not counted. Before:
// the call returned only when the store answered.
func TestCommitHonoursContextDuringStall(t *testing.T) {
	q, f, _ := openFaulty(t, WithMaxAttempts(1))
	f.Stall()
	ctx, cancel := context.WithTimeout(t0ctx, 20*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := q.Commit(ctx, new(Txn).Put([]byte("k"), []byte("v")).
			Enqueue("q", []byte("p"), EnqueueOptions{JobID: "j1", claim: true}))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Commit during a stall = %v, want ErrOutcomeUnknown wrapping the deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Commit did not return when its ctx ended")
	}
	// A read of what it wrote waits for durability, and honours its ctx.
	rctx, rcancel := context.WithTimeout(t0ctx, 20*time.Millisecond)
	defer rcancel()
	if _, err := q.Get(rctx, []byte("k")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get during the stall = %v, want the deadline", err)
	}
	// More commits given up on meanwhile: each takes a commit state (they
	// are pooled), and none may take the one that the first commit's
	// follow-up still needs to release j1.
	for i := 2; i <= 4; i++ {
		cctx, ccancel := context.WithTimeout(t0ctx, 20*time.Millisecond)
		_, err := q.Commit(cctx, new(Txn).Put(fmt.Appendf(nil, "k%d", i), []byte("v")).
			Enqueue("q", []byte("p"), EnqueueOptions{JobID: fmt.Sprintf("j%d", i), claim: true}))
		ccancel()
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("commit %d during the stall = %v, want ErrOutcomeUnknown", i, err)
		}
	}
	f.Unstall()
	if v, err := q.Get(t0ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get after the stall = %q, %v", v, err)
	}
	testenv.Eventually(t, 10*time.Second, "the jobs pending again at attempt 0", func() bool {
		for i := 1; i <= 4; i++ {
			j, err := q.GetJob(t0ctx, fmt.Sprintf("j%d", i))
			if err != nil || j.State != JobPending || j.Attempt != 0 {
				return false
			}
		}
		return true
	})
	j := mustClaim(t, q, "q")
	if j == nil || j.ID != "j1" || j.Attempt != 1 {
		t.Fatalf("claim after the release: %+v", j)
	}
}

// TestCloseDuringStallHonoursContext: Close of a store that does not answer
// gives up when its ctx ends, failing the waiting commit with
// ErrOutcomeUnknown instead of hanging. Before: Close waited for the store.
func TestCloseDuringStallHonoursContext(t *testing.T) {
	q, f, clk := openFaulty(t)
	f.Stall()
	done := make(chan error, 1)
	go func() { done <- q.Put(t0ctx, []byte("k"), []byte("v")) }()
	stallUntilUnhealthy(t, q, clk)
	ctx, cancel := context.WithTimeout(t0ctx, 20*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- q.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Close during a stall = %v, want ErrOutcomeUnknown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return when its ctx ended")
	}
	if err := <-done; !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Put pending at Close = %v, want ErrOutcomeUnknown", err)
	}
}

// TestSettleWithClaimContextWaitsOutStall: a handler that settles its own
// job with its claim context (as Work handlers with ManualSettle do) gets
// the commit's outcome: the settlement does not end that context before it
// is durable. Before: the Ack ended the claim context as it was applied, so
// during a stall the commit returned ErrOutcomeUnknown.
func TestSettleWithClaimContextWaitsOutStall(t *testing.T) {
	q, f, clk := openFaulty(t)
	mustEnqueue(t, q, "q", "p", EnqueueOptions{})
	j := mustClaim(t, q, "q")
	jctx, stop := q.claimContext(t0ctx, j)
	defer stop()
	f.Stall()
	done := make(chan error, 1)
	go func() { done <- q.Ack(jctx, j) }()
	stallUntilUnhealthy(t, q, clk)
	select {
	case err := <-done:
		t.Fatalf("Ack with the claim context returned during the stall: %v", err)
	default:
	}
	if jctx.Err() != nil {
		t.Fatalf("the claim context ended before its settlement was durable: %v", context.Cause(jctx))
	}
	f.Unstall()
	if err := <-done; err != nil {
		t.Fatalf("Ack across the stall: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the claim's context to end with a lost claim", func() bool { return IsClaimLost(context.Cause(jctx)) })
}
