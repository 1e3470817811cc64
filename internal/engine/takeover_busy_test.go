package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
	"github.com/stepwell/stepwell/internal/testenv"
)

// TestTakeoverOfBusyWriter (issue 17): a second engine opening with
// Takeover succeeds against a writer that commits continuously, fences it,
// and holds every commit it acknowledged. Every request takes a few
// milliseconds, as on an object store: the busy writer has a WAL write in
// flight nearly all the time, so an open marker put at the sequence after
// the last one listed lands on a sequence the busy writer has already
// taken (or is about to take, its write being already on its way), every
// time, and Open used to give up with ErrLocked ("another writer keeps
// appending to the WAL") after about 12s.
//
// The heartbeat is an hour, so neither engine ever checks for a newer
// writer: the old one can only learn of the takeover from a WAL write.
func TestTakeoverOfBusyWriter(t *testing.T) {
	ctx := context.Background()
	const (
		latency    = 2 * time.Millisecond
		committers = 16
		openLimit  = 10 * time.Second
		fenceLimit = 10 * time.Second
	)
	b, reopen := memBucket(t)
	fa := objstoretest.NewFault(b, 1)
	fa.SetLatency(latency, latency/2)
	a := mustOpen(t, Options{Bucket: fa, Heartbeat: time.Hour})
	defer a.Close(ctx)

	var acks atomic.Int64
	acked := make([][]string, committers) // per committer, in order
	errs := make([]error, committers)     // why each committer stopped
	var wg sync.WaitGroup
	for g := range committers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := fmt.Sprintf("busy/%02d/%06d", g, i)
				if err := a.Update(ctx, func(tx *Tx) error { tx.Put(k, Inline([]byte(k))); return nil }); err != nil {
					errs[g] = err
					return
				}
				acked[g] = append(acked[g], k)
				acks.Add(1)
			}
		}()
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	testenv.Eventually(t, 10*time.Second, "the writer wrote 50 batches", func() bool { return a.Stats().Batches >= 50 })

	before := a.Stats()
	ackedBefore := acks.Load()
	fb := objstoretest.NewFault(reopen(), 2)
	fb.SetLatency(latency, latency/2)
	start := time.Now()
	octx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, err := Open(octx, Options{Bucket: fb, Heartbeat: time.Hour, Takeover: true})
	took := time.Since(start)
	ackedDuring := acks.Load() - ackedBefore
	if err != nil {
		t.Fatalf("Open with takeover of a busy writer failed after %v (it had written %d batches, %.0f/s, and acknowledged %d commits during Open): %v",
			took.Round(time.Millisecond), a.Stats().Batches-before.Batches,
			float64(a.Stats().Batches-before.Batches)/took.Seconds(), ackedDuring, err)
	}
	defer c.Close(ctx)
	if took > openLimit {
		t.Errorf("Open with takeover took %v, want at most %v", took, openLimit)
	}

	select {
	case <-stopped:
	case <-time.After(fenceLimit):
		t.Fatalf("the replaced writer still commits %v after the takeover", fenceLimit)
	}
	for g, err := range errs {
		if !errors.Is(err, ErrFenced) {
			t.Errorf("committer %d of the replaced writer stopped with %v, want ErrFenced", g, err)
		}
	}
	if !errors.Is(a.Err(), ErrFenced) {
		t.Errorf("replaced writer: Err = %v, want ErrFenced", a.Err())
	}
	after := a.Stats()
	// The takeover happened while the old writer was writing: it made
	// batches durable after Open began, and the new writer has them.
	if after.Batches <= before.Batches || ackedDuring == 0 {
		t.Errorf("replaced writer wrote %d batches and acknowledged %d commits after Open began: no work was in flight",
			after.Batches-before.Batches, ackedDuring)
	}
	state := dump(t, c)
	n := 0
	for g := range acked {
		for _, k := range acked[g] {
			n++
			if state[k] != k {
				t.Fatalf("acknowledged commit %s (committer %d) missing after the takeover: %q", k, g, state[k])
			}
		}
	}
	if c.Epoch() <= after.DurableSeq {
		t.Errorf("new writer's marker at %d, not above the replaced writer's last durable batch %d", c.Epoch(), after.DurableSeq)
	}
	put(t, c, "after-takeover", "1")
	t.Logf("takeover in %v; old writer: %d batches (%.0f/s while Open ran), %d commits acknowledged (%d during Open), last durable %d; new writer's marker at %d, %d batches replayed, %d keys",
		took.Round(time.Millisecond), after.Batches-before.Batches,
		float64(after.Batches-before.Batches)/took.Seconds(), n, ackedDuring, after.DurableSeq,
		c.Epoch(), c.Stats().RecoveredWAL, len(state))
}
