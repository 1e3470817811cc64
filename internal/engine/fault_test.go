package engine

import (
	"context"
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
