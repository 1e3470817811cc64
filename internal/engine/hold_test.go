package engine

import (
	"context"
	"runtime"
	"sync/atomic"
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

// lingerAfterBatchOf8 opens an engine whose writes take 10ms (fake time
// in a synctest bubble), with its linger on or off, that has just written
// a batch of 8 transactions (see batchOf8).
func lingerAfterBatchOf8(t *testing.T, on bool) *Engine {
	t.Helper()
	b, _ := memBucket(t)
	e := mustOpen(t, Options{Bucket: &slowPut{Bucket: b, d: 10 * time.Millisecond}})
	e.SetLinger(on)
	batchOf8(t, e)
	return e
}

// batchOf8 commits a batch of 8 transactions (a hold, then 8), so that
// the committer lingers after it (lingerMinTxns).
func batchOf8(t *testing.T, e *Engine) {
	t.Helper()
	ctx := context.Background()
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
}

// A lone commit after a batch of lingerMinTxns or more is written at once,
// linger on or off, when nothing else runs: no other goroutine can add to
// its batch before the write.
func TestLingerEndsWhenNothingRuns(t *testing.T) {
	for _, on := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			e := lingerAfterBatchOf8(t, on)
			defer e.Close(ctx)
			start := time.Now()
			if err := e.Update(ctx, func(tx *Tx) error { tx.Put("z", Inline([]byte("v"))); return nil }); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took != 10*time.Millisecond { // fake time: exactly the waits
				t.Errorf("linger %v: a lone commit after a batch of 8 took %v, want the write's 10ms alone", on, took)
			}
		})
	}
}

// With the linger on, a commit after a batch of lingerMinTxns or more
// waits (up to half the last write, at most lingerMax) while other
// goroutines run, and shares its write with the one they commit; with it
// off, it is written at once, alone: the committer does not linger, and
// the other goroutine's commit, made once that write has begun, takes a
// write of its own. In a synctest bubble, where the linger's clock stands
// still while goroutines run, its yields bound it.
func TestSetLinger(t *testing.T) {
	for _, on := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			e := lingerAfterBatchOf8(t, on)
			defer e.Close(ctx)
			before := e.Stats().Batches
			e.mu.Lock()
			lingers := e.lingers
			e.mu.Unlock()
			sp := e.opts.Bucket.(*slowPut)
			puts := sp.puts.Load()
			other := make(chan error, 1)
			var zDone atomic.Bool // z's Update returned (a failure must not leave the loop spinning)
			go func() {
				// Running: work that ends in a commit, once the committer
				// lingers (on) or once its write has begun (off), however
				// late a loaded machine runs it.
				for !e.lingerBegun(lingers) && sp.puts.Load() == puts && !zDone.Load() {
					runtime.Gosched()
				}
				other <- e.Update(ctx, func(tx *Tx) error { tx.Put("y", Inline([]byte("v"))); return nil })
			}()
			err := e.Update(ctx, func(tx *Tx) error { tx.Put("z", Inline([]byte("v"))); return nil })
			zDone.Store(true)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-other; err != nil {
				t.Fatal(err)
			}
			want := uint64(2)
			if on {
				want = 1
			}
			if got := e.Stats().Batches - before; got != want {
				t.Errorf("linger %v: the two commits took %d writes, want %d", on, got, want)
			}
			e.mu.Lock()
			lingered := e.lingers - lingers
			e.mu.Unlock()
			wantLingers := uint64(0)
			if on {
				wantLingers = 1
			}
			if lingered != wantLingers {
				t.Errorf("linger %v: the committer lingered %d times, want %d", on, lingered, wantLingers)
			}
		})
	}
}

// lingerBegun reports whether the committer began a linger since it had
// begun n.
func (e *Engine) lingerBegun(n uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lingers > n
}

// slowPut makes every Put take d (fake time in a synctest bubble).
type slowPut struct {
	objstore.Bucket
	d    time.Duration
	puts atomic.Int64 // Puts begun
}

func (s *slowPut) Put(ctx context.Context, key string, data []byte, createOnly bool) error {
	s.puts.Add(1)
	time.Sleep(s.d)
	return s.Bucket.Put(ctx, key, data, createOnly)
}
