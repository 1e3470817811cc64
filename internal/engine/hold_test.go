package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
)

// Transactions applied under a Hold share one WAL write, even though the
// committer is idle when the first is applied; the release starts it.
func TestHoldSharesOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b, _ := memBucket(t)
		e := mustOpen(t, Options{Bucket: b})
		defer e.Close(ctx)
		before := e.Stats().Batches
		release := e.Hold()
		put := func(k string) func(context.Context) error {
			wait, err := e.Apply(ctx, func(tx *Tx) error { tx.Put(k, Inline([]byte("v"))); return nil })
			if err != nil {
				t.Fatal(err)
			}
			return wait
		}
		w1 := put("a")
		synctest.Wait() // an idle committer would write "a" now, alone
		w2 := put("b")
		synctest.Wait()
		if n := e.Stats().Batches - before; n != 0 {
			t.Fatalf("%d batches written under the hold", n)
		}
		release()
		release() // a second call does nothing
		for _, w := range []func(context.Context) error{w1, w2} {
			if err := w(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.Stats().Batches - before; n != 1 {
			t.Fatalf("the two transactions took %d WAL writes, want 1", n)
		}
		// Released: the next transaction is written at once.
		if err := e.Update(ctx, func(tx *Tx) error { tx.Put("c", Inline([]byte("v"))); return nil }); err != nil {
			t.Fatal(err)
		}
	})
}

// Close writes what was applied under a hold released during the close.
func TestHoldReleasedDuringClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b, reopen := memBucket(t)
		e := mustOpen(t, Options{Bucket: b})
		release := e.Hold()
		wait, err := e.Apply(ctx, func(tx *Tx) error { tx.Put("k", Inline([]byte("v"))); return nil })
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- e.Close(ctx) }()
		synctest.Wait()
		release()
		if err := wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		e2 := mustOpen(t, Options{Bucket: reopen()})
		defer e2.Close(ctx)
		if err := e2.View(ctx, func(r *Reader) error {
			if _, ok := r.Get("k"); !ok {
				t.Error("the held transaction was lost by Close")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// With the linger off, the committer writes what is open at once, even
// after a batch of lingerMinTxns or more; with it on, it waits (up to half
// the last write) for as many as the last batch held.
func TestSetLinger(t *testing.T) {
	for _, on := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			b, _ := memBucket(t)
			e := mustOpen(t, Options{Bucket: &slowPut{Bucket: b, d: 10 * time.Millisecond}})
			defer e.Close(ctx)
			e.SetLinger(on)
			// A batch of 8: a hold, then 8 transactions.
			release := e.Hold()
			var waits []func(context.Context) error
			for i := range 8 {
				w, err := e.Apply(ctx, func(tx *Tx) error { tx.Put(string(rune('a'+i)), Inline([]byte("v"))); return nil })
				if err != nil {
					t.Fatal(err)
				}
				waits = append(waits, w)
			}
			release()
			for _, w := range waits {
				if err := w(ctx); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if err := e.Update(ctx, func(tx *Tx) error { tx.Put("z", Inline([]byte("v"))); return nil }); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start) // fake time: exactly the waits
			want := 10 * time.Millisecond
			if on {
				want += 5 * time.Millisecond // half the last write
			}
			if took != want {
				t.Errorf("linger %v: a lone commit after a batch of 8 took %v, want %v", on, took, want)
			}
		})
	}
}

// slowPut makes every Put take d (fake time in a synctest bubble).
type slowPut struct {
	objstore.Bucket
	d time.Duration
}

func (s *slowPut) Put(ctx context.Context, key string, data []byte, createOnly bool) error {
	time.Sleep(s.d)
	return s.Bucket.Put(ctx, key, data, createOnly)
}
