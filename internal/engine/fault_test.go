package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

// TestFaultInjection commits from many goroutines through a bucket that
// fails requests at random, delays them, and reports some successful writes
// as failed. Every acknowledged commit must survive a reopen on the healthy
// bucket.
func TestFaultInjection(t *testing.T) {
	for _, seed := range []int64{time.Now().UnixNano(), 1, 2} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			ctx := context.Background()
			b, reopen := memBucket(t)
			f := objstoretest.NewFault(b, seed)
			f.SetErrorRate(objstoretest.OpPut, 0.1)
			f.SetErrorRate(objstoretest.OpGet, 0.05)
			f.SetErrorRate(objstoretest.OpList, 0.05)
			f.SetErrorRate(objstoretest.OpDelete, 0.2)
			f.SetAmbiguousPutRate(0.1)
			f.SetLatency(0, time.Millisecond)
			var e *Engine
			var err error
			for attempt := 0; attempt < 20; attempt++ { // Open itself may hit faults
				if e, err = Open(ctx, Options{Bucket: f, SnapshotMaxObjects: 8, WriteRetry: 5 * time.Second}); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("Open under faults kept failing: %v", err)
			}
			var mu sync.Mutex
			acked := map[string]bool{}
			failed := 0
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 40; i++ {
						k := fmt.Sprintf("g%02d-%03d", g, i)
						err := e.Update(ctx, func(tx *Tx) error { tx.Put(k, Inline([]byte(k))); return nil })
						mu.Lock()
						if err == nil {
							acked[k] = true
						} else {
							failed++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			e.Close(ctx)
			t.Logf("%d acknowledged, %d failed, %d faults injected, %d snapshots", len(acked), failed, f.Injected(), e.Stats().Snapshots)
			if f.Injected() == 0 {
				t.Fatal("no faults were injected")
			}
			e2 := mustOpen(t, Options{Bucket: reopen()})
			defer e2.Close(ctx)
			state := dump(t, e2)
			for k := range acked {
				if state[k] != k {
					t.Fatalf("acknowledged key %s lost (state has %q)", k, state[k])
				}
			}
		})
	}
}

// TestOutageFailsCallersAndLosesNothing: when WAL writes keep failing past
// the retry budget, the engine closes, every caller in the failed batch gets
// the error, and nothing it did not acknowledge is in the store.
func TestOutageFailsCallersAndLosesNothing(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	f := objstoretest.NewFault(b, 7)
	e := mustOpen(t, Options{Bucket: f, WriteRetry: 100 * time.Millisecond})
	put(t, e, "before", "1")
	f.FailAfterWrites(0)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.Update(ctx, func(tx *Tx) error { tx.Put(fmt.Sprint("during", i), Inline(nil)); return nil })
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var we *WriteError
		if !errors.As(err, &we) {
			t.Fatalf("caller %d during the outage: %v, want a WriteError", i, err)
		}
	}
	if err := e.Update(ctx, func(tx *Tx) error { return nil }); err == nil {
		t.Fatal("engine still accepts transactions after a failed write")
	}
	// Reads that saw the failed batch's data fail too.
	e.Kill()
	f.Reset()
	e2 := mustOpen(t, Options{Bucket: reopen()})
	defer e2.Close(ctx)
	state := dump(t, e2)
	if state["before"] != "1" || len(state) != 1 {
		t.Fatalf("state after the outage = %v, want only the acknowledged key", state)
	}
}
