package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestApplyConcurrentRollbacks applies transactions from many goroutines
// at once, as Work slots do: one combiner applies the transactions of
// others (see Apply), and each must still be its own transaction. Each
// goroutine increments its own counter, read from the live state; a third
// of its transactions also write junk and then fail with an error of
// their own. Every caller must get exactly its own error, a failed
// transaction must leave nothing (no junk, the counter as it was), the
// indexer must see exactly the tree, and a reopen the same state.
func TestApplyConcurrentRollbacks(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	ix := &mirror{m: map[string]string{}}
	e := mustOpen(t, Options{Bucket: b, Indexer: ix})
	const workers, each = 48, 60
	var ok [workers]int
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("count/%02d", g)
			for i := range each {
				fail := (g+i)%3 == 0
				mine := fmt.Errorf("worker %d, transaction %d", g, i)
				wait, err := e.Apply(ctx, func(tx *Tx) error {
					n := 0
					if v, found := tx.Get(key); found {
						d, err := Decode(v)
						if err != nil {
							return err
						}
						n, _ = strconv.Atoi(string(d.Data))
					}
					tx.Put(key, Inline([]byte(strconv.Itoa(n+1))))
					if fail {
						tx.Put(fmt.Sprintf("junk/%02d/%03d", g, i), Inline([]byte("x")))
						tx.Delete(key)
						return mine
					}
					return nil
				})
				switch {
				case fail && err != mine:
					errc <- fmt.Errorf("worker %d, transaction %d: got error %v, want its own", g, i, err)
					return
				case !fail && err != nil:
					errc <- fmt.Errorf("worker %d, transaction %d: %v", g, i, err)
					return
				case !fail:
					if err := wait(ctx); err != nil {
						errc <- err
						return
					}
					ok[g]++
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	state := dump(t, e)
	for g := range workers {
		if got, want := state[fmt.Sprintf("count/%02d", g)], strconv.Itoa(ok[g]); got != want {
			t.Fatalf("worker %d: counter %s after %s successful increments", g, got, want)
		}
	}
	for k := range state {
		if strings.HasPrefix(k, "junk/") {
			t.Fatalf("a failed transaction's write survived: %s", k)
		}
	}
	raw := rawState(t, e)
	for k := range ix.m {
		if strings.HasPrefix(k, epochPrefix) {
			delete(ix.m, k)
		}
	}
	if !maps.Equal(ix.m, raw) {
		t.Fatal("indexer mirror diverged from the tree")
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e2 := mustOpen(t, Options{Bucket: reopen()})
	defer e2.Close(ctx)
	if !maps.Equal(rawState(t, e2), raw) {
		t.Fatal("state after reopen differs")
	}
}

// TestApplyAfterCloseFailsEveryCaller: callers queued behind a combiner
// when the engine closes get ErrClosed, not a hang.
func TestApplyAfterCloseFailsEveryCaller(t *testing.T) {
	ctx := context.Background()
	b, _ := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Apply(ctx, func(tx *Tx) error { tx.Put(fmt.Sprint(g), Inline(nil)); return nil })
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Apply after Close = %v, want ErrClosed", err)
			}
		}()
	}
	wg.Wait()
}

// TestApplyInAndOutOfSynctestBubble: what Apply keeps between calls (its
// pooled requests) must not tie later callers to the goroutines of earlier
// ones. Requests used inside a testing/synctest bubble, then outside it,
// crashed the process when they carried a channel made in the bubble.
func TestApplyInAndOutOfSynctestBubble(t *testing.T) {
	ctx := context.Background()
	applyMany := func(t *testing.T, e *Engine) {
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					k := fmt.Sprintf("%02d-%02d", g, i)
					if err := e.Update(ctx, func(tx *Tx) error { tx.Put(k, Inline(nil)); return nil }); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	synctest.Test(t, func(t *testing.T) {
		b, _ := memBucket(t)
		e := mustOpen(t, Options{Bucket: b})
		applyMany(t, e)
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
	b, _ := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	defer e.Close(ctx)
	applyMany(t, e)
}

// TestApplyPanicReachesItsOwnCaller: a transaction function that panics
// while another caller combines is rolled back, its panic raised in its
// own caller's Apply, and the combiner's caller and the engine go on.
func TestApplyPanicReachesItsOwnCaller(t *testing.T) {
	ctx := context.Background()
	b, _ := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	inA, releaseA := make(chan struct{}), make(chan struct{})
	errA, panicA := make(chan error, 1), make(chan any, 1)
	go func() {
		defer func() { panicA <- recover() }()
		_, err := e.Apply(ctx, func(tx *Tx) error { // A: the combiner
			close(inA)
			<-releaseA
			tx.Put("a", []byte("1"))
			return nil
		})
		errA <- err
	}()
	<-inA
	panicB := make(chan any, 1)
	go func() {
		defer func() { panicB <- recover() }()
		_, _ = e.Apply(ctx, func(tx *Tx) error { // B: queued behind A
			tx.Put("b", []byte("1"))
			panic("B's bug")
		})
	}()
	for queued := false; !queued; {
		e.amu.Lock()
		queued = len(e.applyQ) > 0
		e.amu.Unlock()
		if !queued {
			time.Sleep(time.Millisecond)
		}
	}
	close(releaseA)
	if p := <-panicB; p != "B's bug" {
		t.Errorf("B's Apply recovered %v, want its own panic", p)
	}
	if p := <-panicA; p != nil {
		t.Fatalf("A's Apply panicked with %v", p)
	}
	if err := <-errA; err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := e.Update(ctx, func(tx *Tx) error { tx.Put("c", []byte("1")); return nil }); err != nil {
		t.Fatalf("the engine after the panic: %v", err)
	}
	err := e.View(ctx, func(r *Reader) error {
		for k, want := range map[string]bool{"a": true, "b": false, "c": true} {
			if _, ok := r.Get(k); ok != want {
				return fmt.Errorf("key %s: present %v, want %v", k, ok, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
