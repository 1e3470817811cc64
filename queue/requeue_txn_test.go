package queue

import (
	"errors"
	"testing"

	"github.com/stepwell/stepwell/internal/queuex"
)

// requireJobState is requireJobStates with the states listed (tests only).
func (t *Txn) requireJobState(id string, states ...State) *Txn {
	return t.requireJobStates(id, queuex.StateSet(states...))
}

// TestTxnRequeueDead: a transaction requeues a dead job together with its
// other writes, and a failed RequeueDead (job not dead, or unknown) fails
// the whole transaction. Fails if the op is not applied atomically.
func TestTxnRequeueDead(t *testing.T) {
	q, _ := openJobs(t, WithMaxAttempts(1))
	r := mustEnqueue(t, q, "q", "payload", EnqueueOptions{})
	j := mustClaim(t, q, "q")
	if err := q.DeadLetter(t0ctx, j, "boom"); err != nil {
		t.Fatal(err)
	}
	// Not dead: the put in the same transaction is not applied.
	other := mustEnqueue(t, q, "q", "other", EnqueueOptions{})
	_, err := q.Commit(t0ctx, new(Txn).Put([]byte("k"), []byte("v")).RequeueDead(other.JobID))
	if !errors.Is(err, ErrNotDead) {
		t.Fatalf("RequeueDead of a pending job = %v, want ErrNotDead", err)
	}
	if _, err := q.Commit(t0ctx, new(Txn).Put([]byte("k"), []byte("v")).RequeueDead("nope")); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("RequeueDead of an unknown job = %v, want ErrJobNotFound", err)
	}
	if _, err := q.Get(t0ctx, []byte("k")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("a failed transaction wrote its put: %v", err)
	}
	if _, err := q.CancelJob(t0ctx, other.JobID); err != nil {
		t.Fatal(err)
	}
	// Dead: requeued with the put, with a fresh budget, its payload and its
	// history.
	txn := new(Txn).requireJobState(r.JobID, JobDead).Put([]byte("k"), []byte("v")).RequeueDead(r.JobID)
	if _, err := q.Commit(t0ctx, txn); err != nil {
		t.Fatal(err)
	}
	if v, err := q.Get(t0ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("put = %q, %v", v, err)
	}
	j = mustClaim(t, q, "q")
	if j == nil || j.ID != r.JobID || j.Attempt != 1 || string(j.Payload) != "payload" || len(j.History) != 1 {
		t.Fatalf("requeued job = %+v", j)
	}
}
