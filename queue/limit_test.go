package queue

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func enqueueN(t *testing.T, q *Queue, queue string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := q.Enqueue(context.Background(), queue, []byte("p"), EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func claimN(t *testing.T, q *Queue, queue string, n int) []*Job {
	t.Helper()
	jobs, err := q.Claim(context.Background(), queue, ClaimOptions{Max: n})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func TestLimitMaxRunning(t *testing.T) {
	ctx := context.Background()
	q := openT(t, "mem://"+t.Name())
	if err := q.SetLimit(ctx, "q", Limit{MaxRunning: 2}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "q", 5)
	jobs := claimN(t, q, "q", 5)
	if len(jobs) != 2 {
		t.Fatalf("claimed %d jobs under MaxRunning 2", len(jobs))
	}
	if more := claimN(t, q, "q", 1); len(more) != 0 {
		t.Fatalf("claimed %d more at MaxRunning", len(more))
	}
	s, err := q.Stats(ctx, "q")
	if err != nil || !s.Throttled || s.Limit != (Limit{MaxRunning: 2}) || s.Pending != 3 || s.Claimed != 2 {
		t.Fatalf("Stats = %+v, %v", s, err)
	}
	// Held-back jobs spend no attempt; a settled claim makes room.
	if err := q.Ack(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
	next := claimN(t, q, "q", 5)
	if len(next) != 1 || next[0].Attempt != 1 {
		t.Fatalf("after an ack: %d jobs (attempt %d)", len(next), next[0].Attempt)
	}
	// Removal: every pending job can be claimed.
	if err := q.SetLimit(ctx, "q", Limit{}); err != nil {
		t.Fatal(err)
	}
	if got := claimN(t, q, "q", 5); len(got) != 2 {
		t.Fatalf("after removal: %d jobs, want 2", len(got))
	}
	if m, err := q.Limits(ctx); err != nil || len(m) != 0 {
		t.Fatalf("Limits after removal = %v, %v", m, err)
	}
	// Another queue is never affected.
	enqueueN(t, q, "other", 3)
	if got := claimN(t, q, "other", 3); len(got) != 3 {
		t.Fatalf("other queue: %d jobs", len(got))
	}
}

func TestLimitRate(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	q, err := Open(ctx, "mem://"+t.Name(), withClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	if err := q.SetLimit(ctx, "q", Limit{PerSecond: 10, Burst: 3}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "q", 20)
	// A new bucket is empty.
	if got := claimN(t, q, "q", 20); len(got) != 0 {
		t.Fatalf("claimed %d from an empty bucket", len(got))
	}
	clock.Advance(99 * time.Millisecond)
	if got := claimN(t, q, "q", 20); len(got) != 0 {
		t.Fatalf("claimed %d before the first token", len(got))
	}
	clock.Advance(time.Millisecond)
	if got := claimN(t, q, "q", 20); len(got) != 1 {
		t.Fatalf("claimed %d at the first token, want 1", len(got))
	}
	if s, _ := q.Stats(ctx, "q"); !s.Throttled {
		t.Fatalf("Stats = %+v, want Throttled", s)
	}
	// Idle for long: at most Burst at once.
	clock.Advance(time.Hour)
	if got := claimN(t, q, "q", 20); len(got) != 3 {
		t.Fatalf("claimed %d after an hour, want Burst 3", len(got))
	}
	// Then PerSecond: 5 in 500ms.
	total := 0
	for i := 0; i < 50; i++ {
		clock.Advance(10 * time.Millisecond)
		total += len(claimN(t, q, "q", 20))
	}
	if total != 5 {
		t.Fatalf("claimed %d in 500ms at 10/s, want 5", total)
	}
	// A changed limit keeps its tokens (none now), up to its new Burst.
	if err := q.SetLimit(ctx, "q", Limit{PerSecond: 1}); err != nil {
		t.Fatal(err)
	}
	if m, err := q.Limits(ctx); err != nil || m["q"] != (Limit{PerSecond: 1, Burst: 1}) {
		t.Fatalf("Limits = %v, %v (Burst 0 with a rate is 1)", m, err)
	}
	clock.Advance(999 * time.Millisecond)
	if got := claimN(t, q, "q", 20); len(got) != 0 {
		t.Fatalf("claimed %d before 1s at 1/s", len(got))
	}
	clock.Advance(time.Millisecond)
	if got := claimN(t, q, "q", 20); len(got) != 1 {
		t.Fatalf("claimed %d at 1s at 1/s", len(got))
	}
}

// TestLimitClaimAtEnqueue checks the claims made in the transaction that
// enqueues a job (the runtime's chaining and dispatch): a limit that is
// full refuses them, and the job stays pending.
func TestLimitClaimAtEnqueue(t *testing.T) {
	ctx := context.Background()
	q := openT(t, "mem://"+t.Name())
	if err := q.SetLimit(ctx, "q", Limit{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	r1, err := q.Enqueue(ctx, "q", []byte("a"), EnqueueOptions{claim: true})
	if err != nil || r1.claimed == nil {
		t.Fatalf("first claim at enqueue: %+v, %v", r1, err)
	}
	r2, err := q.Enqueue(ctx, "q", []byte("b"), EnqueueOptions{claim: true})
	if err != nil || r2.claimed != nil {
		t.Fatalf("a claim at enqueue over MaxRunning 1 was granted: %+v, %v", r2, err)
	}
	// Chaining: the settlement that acks the running job may claim the
	// next one (the ack frees its place first).
	res, err := q.Commit(ctx, new(Txn).Ack(r1.claimed).Enqueue("q", []byte("c"), EnqueueOptions{claim: true, Priority: 1}))
	if err != nil || res.Enqueued[0].claimed == nil {
		t.Fatalf("chained claim after an ack: %+v, %v", res, err)
	}
	s, _ := q.Stats(ctx, "q")
	if s.Claimed != 1 || s.Pending != 1 {
		t.Fatalf("Stats = %+v", s)
	}
}

// TestLimitRolledBackClaimGivesBackItsToken: a claim at enqueue in a
// transaction that fails takes no token for good.
func TestLimitRolledBackClaimGivesBackItsToken(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	q, err := Open(ctx, "mem://"+t.Name(), withClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	if err := q.SetLimit(ctx, "q", Limit{PerSecond: 1}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	_, err = q.Commit(ctx, new(Txn).Enqueue("q", nil, EnqueueOptions{claim: true}).CompareAndPut([]byte("k"), []byte("x"), []byte("y")))
	if !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("Commit = %v", err)
	}
	r, err := q.Enqueue(ctx, "q", nil, EnqueueOptions{claim: true})
	if err != nil || r.claimed == nil {
		t.Fatalf("the rolled-back claim kept its token: %+v, %v", r, err)
	}
}

func TestLimitInvalid(t *testing.T) {
	ctx := context.Background()
	q := openT(t, "mem://"+t.Name())
	before := q.StorageStats().WALBatches
	for _, l := range []Limit{
		{PerSecond: -1}, {PerSecond: math.NaN()}, {PerSecond: math.Inf(1)}, {PerSecond: math.Inf(-1)},
		{PerSecond: 1e-9}, {PerSecond: 2e9}, {Burst: -1, PerSecond: 1}, {MaxRunning: -1},
		{Burst: 5}, {MaxRunning: MaxLimitCount + 1},
	} {
		if err := q.SetLimit(ctx, "q", l); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("SetLimit(%+v) = %v, want ErrInvalidLimit", l, err)
		}
	}
	if err := q.SetLimit(ctx, "", Limit{MaxRunning: 1}); !errors.Is(err, ErrEmptyQueueName) {
		t.Errorf("SetLimit of an empty name = %v", err)
	}
	if err := q.SetLimit(ctx, string(make([]byte, MaxKeySize+1)), Limit{MaxRunning: 1}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("SetLimit of a long name = %v", err)
	}
	if m, err := q.Limits(ctx); err != nil || len(m) != 0 {
		t.Fatalf("Limits after bad input = %v, %v", m, err)
	}
	if st := q.StorageStats(); st.WALBatches != before {
		t.Fatalf("bad input wrote %d batches", st.WALBatches-before)
	}
}

// TestLimitSurvivesReopen: the limit comes back from the store, and its
// token bucket starts empty: a restart admits no burst.
func TestLimitSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	url, clock, q := openFileWithClock(t)
	want := Limit{MaxRunning: 2, PerSecond: 1, Burst: 5}
	if err := q.SetLimit(ctx, "q", want); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "q", 5)
	clock.Advance(time.Hour) // the bucket fills up to Burst
	if got := claimN(t, q, "q", 5); len(got) != 2 {
		t.Fatalf("claimed %d at MaxRunning 2", len(got))
	}
	q.be.(*local).eng.Kill() // a crash: its claims are requeued at the next open
	q2, err := Open(ctx, url, withClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close(ctx)
	if m, err := q2.Limits(ctx); err != nil || m["q"] != want {
		t.Fatalf("Limits after reopen = %v, %v", m, err)
	}
	checkBucketStartsEmpty(t, q2, clock, "reopen")
}

// checkBucketStartsEmpty checks that q, just after when, claims nothing
// from queue "q" (at PerSecond 1, with free MaxRunning slots): its token
// bucket starts empty; and one a second later.
func checkBucketStartsEmpty(t *testing.T, q *Queue, clock *fakeClock, when string) {
	t.Helper()
	if got := claimN(t, q, "q", 5); len(got) != 0 {
		t.Fatalf("claimed %d right after %s: the bucket must start empty", len(got), when)
	}
	clock.Advance(time.Second)
	if got := claimN(t, q, "q", 5); len(got) != 1 {
		t.Fatalf("claimed %d a second after %s at 1/s, want 1", len(got), when)
	}
}

// TestLimitClusterFailover: a member sets and reads limits through the
// writer, and after the writer dies the next one counts the claims it
// adopted (MaxRunning still holds) and starts with an empty token bucket,
// though the dead writer's bucket had tokens left: no burst after a crash.
func TestLimitClusterFailover(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	const hb = 400 * time.Millisecond
	clock := newFakeClock()
	w := openMember(t, url, WithHeartbeat(hb), WithLease(time.Minute), withClock(clock))
	m := openMember(t, url, WithHeartbeat(hb), WithLease(time.Minute), withClock(clock))
	if m.Role() != RoleMember {
		t.Fatalf("role %v", m.Role())
	}
	want := Limit{MaxRunning: 2, PerSecond: 1, Burst: 5}
	if err := m.SetLimit(ctx, "q", want); err != nil {
		t.Fatal(err)
	}
	if err := m.SetLimit(ctx, "q", Limit{PerSecond: -1}); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("SetLimit of a bad limit from a member = %v", err)
	}
	for _, q := range []*Queue{w, m} {
		if l, err := q.Limits(ctx); err != nil || len(l) != 1 || l["q"] != want {
			t.Fatalf("Limits = %v, %v", l, err)
		}
	}
	enqueueN(t, m, "q", 5)
	clock.Advance(time.Hour) // the writer's bucket fills: 5 tokens
	held := claimN(t, m, "q", 5)
	if len(held) != 2 {
		t.Fatalf("member claimed %d at MaxRunning 2", len(held))
	}
	if s, err := m.Stats(ctx, "q"); err != nil || !s.Throttled || s.Limit != want {
		t.Fatalf("member Stats = %+v, %v", s, err)
	}
	killWriter(t, w) // its bucket had 3 tokens left
	waitRole(t, m, RoleWriter, 30*hb)
	if got := claimN(t, m, "q", 5); len(got) != 0 {
		t.Fatalf("the next writer claimed %d with 2 adopted claims at MaxRunning 2", len(got))
	}
	if err := m.Ack(ctx, held[0]); err != nil {
		t.Fatal(err)
	}
	checkBucketStartsEmpty(t, m, clock, "the takeover")
}

// TestLimitWakesWaitingClaim: a claim that waits (Work, Claim with Wait)
// wakes when a claim ends or a token comes, not at its poll interval.
func TestLimitWakesWaitingClaim(t *testing.T) {
	ctx := context.Background()
	q, err := Open(ctx, "mem://"+t.Name(), WithPollInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	if err := q.SetLimit(ctx, "q", Limit{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "q", 2)
	first := claimN(t, q, "q", 1)
	got := make(chan []*Job, 1)
	go func() {
		jobs, _ := q.Claim(ctx, "q", ClaimOptions{Wait: true})
		got <- jobs
	}()
	time.Sleep(20 * time.Millisecond) // let it wait (the test passes either way)
	if err := q.Ack(ctx, first[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case jobs := <-got:
		if len(jobs) != 1 {
			t.Fatalf("waiting claim got %d", len(jobs))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting claim did not wake when the claim ended")
	}
	// The rate: a waiting claim wakes at the next token.
	if err := q.SetLimit(ctx, "q", Limit{PerSecond: 20}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, q, "q", 1)
	jobs, err := q.Claim(ctx, "q", ClaimOptions{Wait: true})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("waiting claim under a rate: %d, %v", len(jobs), err)
	}
}
