package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/queuex"
	"github.com/stepwell/stepwell/internal/testenv"
)

// TestLostAttemptTexts: the queue records an attempt that no worker
// settled with queuex's texts, which the runtime's run history matches
// (queuex.LostAttempt) to tell a lost attempt: a lease that ran out, a
// claim left by a process that stopped (pending again, or dead on the
// last attempt). It fails if the queue writes another text.
func TestLostAttemptTexts(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	url := testenv.MemURL(t.Name())
	opts := []Option{withClock(clk), WithLease(30 * time.Second), WithRetryBackoff(time.Second, time.Second), WithMaxAttempts(3)}
	q := openT(t, url, opts...)
	a := mustEnqueue(t, q, "q", "a", EnqueueOptions{})
	mustClaim(t, q, "q") // attempt 1: its lease runs out
	clk.Advance(31 * time.Second)
	if err := q.reapNow(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	mustClaim(t, q, "q") // attempt 2: its process stops
	q.Close(ctx)
	q = openT(t, url, opts...)
	clk.Advance(time.Minute)
	mustClaim(t, q, "q") // attempt 3, the last: its process stops
	q.Close(ctx)
	q = openT(t, url, opts...)
	j, err := q.GetJob(ctx, a.JobID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{queuex.LeaseExpired, queuex.WorkerStopped, queuex.WorkerStoppedLast}
	if j.State != JobDead || len(j.History) != len(want) {
		t.Fatalf("job %v with history %+v, want dead with %d attempts", j.State, j.History, len(want))
	}
	for i, h := range j.History {
		if h.Error != want[i] || !queuex.LostAttempt(h.Error) {
			t.Errorf("attempt %d recorded %q, want %q (queuex.LostAttempt: %v)", i+1, h.Error, want[i], queuex.LostAttempt(h.Error))
		}
	}
	// A worker's own error is not a lost attempt, even one that mentions it.
	for _, s := range []string{"", "boom", "step: lease expired", "lease expired!"} {
		if queuex.LostAttempt(s) {
			t.Errorf("LostAttempt(%q) = true", s)
		}
	}
}
