package objstoretest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

func newFault(t *testing.T, seed int64) (*objstoretest.Fault, objstore.Bucket) {
	inner := objstoretest.Open(t, objstoretest.MemURL(t))
	return objstoretest.NewFault(inner, seed), inner
}

func wantInjected(t *testing.T, err error, op objstoretest.Op, ambiguous bool) {
	t.Helper()
	var fe *objstoretest.FaultError
	if !errors.As(err, &fe) || fe.Op != op || fe.Ambiguous != ambiguous {
		t.Fatalf("error = %v; want an injected %v fault (ambiguous %v)", err, op, ambiguous)
	}
	if !objstore.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false", err)
	}
	var oe *objstore.OpError
	if !errors.As(err, &oe) || oe.Op != op.String() {
		t.Fatalf("error %v is not an *objstore.OpError for %v", err, op)
	}
}

func TestFaultAmbiguousPutWrites(t *testing.T) {
	ctx := t.Context()
	f, inner := newFault(t, 1)
	f.SetAmbiguousPutRate(1)

	err := f.Put(ctx, "k", []byte("written"), true)
	wantInjected(t, err, objstoretest.OpPut, true)
	if got, err := inner.Get(ctx, "k"); err != nil || string(got) != "written" {
		t.Fatalf("inner Get = %q, %v; the ambiguous put did not write", got, err)
	}
	// The retry of a create-only write then finds its own object.
	if err := f.Put(ctx, "k", []byte("written"), true); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("retry = %v; want ErrExists", err)
	}

	w, err := f.NewWriter(ctx, "streamed", false)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("streamed data"))
	wantInjected(t, w.Close(), objstoretest.OpPut, true)
	if got, err := inner.Get(ctx, "streamed"); err != nil || string(got) != "streamed data" {
		t.Fatalf("inner Get = %q, %v; the ambiguous writer did not write", got, err)
	}
	if got := f.Injected(); got != 2 {
		t.Errorf("Injected() = %d; want 2", got)
	}
}

func TestFaultErrorRates(t *testing.T) {
	ctx := t.Context()
	f, inner := newFault(t, 1)
	if err := inner.Put(ctx, "k", []byte("v"), false); err != nil {
		t.Fatal(err)
	}
	for op := range 4 {
		f.SetErrorRate(objstoretest.Op(op), 1)
	}
	_, err := f.Get(ctx, "k")
	wantInjected(t, err, objstoretest.OpGet, false)
	_, err = f.NewReader(ctx, "k")
	wantInjected(t, err, objstoretest.OpGet, false)
	_, err = f.List(ctx, "")
	wantInjected(t, err, objstoretest.OpList, false)
	wantInjected(t, f.Delete(ctx, "k"), objstoretest.OpDelete, false)
	wantInjected(t, f.Put(ctx, "new", []byte("x"), false), objstoretest.OpPut, false)
	w, err := f.NewWriter(ctx, "new2", false)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("x"))
	wantInjected(t, w.Close(), objstoretest.OpPut, false)

	// Failed requests never reached the inner bucket.
	objs, err := inner.List(ctx, "")
	if err != nil || len(objs) != 1 || objs[0].Key != "k" {
		t.Fatalf("inner List = %v, %v; want only k", objs, err)
	}
	f.Reset()
	if _, err := f.Get(ctx, "k"); err != nil {
		t.Fatalf("Get after Reset: %v", err)
	}
}

func TestFaultDeterministic(t *testing.T) {
	pattern := func(seed int64) string {
		f, inner := newFault(t, seed)
		inner.Put(t.Context(), "k", nil, false)
		f.SetErrorRate(objstoretest.OpGet, 0.5)
		var b strings.Builder
		for range 64 {
			if _, err := f.Get(t.Context(), "k"); err != nil {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b, c := pattern(42), pattern(42), pattern(43)
	t.Logf("seed 42: %s", a)
	if a != b {
		t.Errorf("same seed, different faults:\n%s\n%s", a, b)
	}
	if a == c {
		t.Errorf("seeds 42 and 43 gave the same faults")
	}
	if !strings.Contains(a, "x") || !strings.Contains(a, ".") {
		t.Errorf("rate 0.5 gave %s", a)
	}
}

func TestFaultFailAfterWrites(t *testing.T) {
	ctx := t.Context()
	f, inner := newFault(t, 1)
	f.FailAfterWrites(2)
	if err := f.Put(ctx, "a", []byte("1"), false); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, "nothing"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		wantInjected(t, f.Put(ctx, fmt.Sprintf("b%d", i), []byte("2"), false), objstoretest.OpPut, false)
	}
	wantInjected(t, f.Delete(ctx, "a"), objstoretest.OpDelete, false)
	if _, err := f.Get(ctx, "a"); err != nil {
		t.Fatalf("reads fail during the write outage: %v", err)
	}
	if _, err := inner.Get(ctx, "b0"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a failed write reached the bucket: %v", err)
	}
	f.FailAfterWrites(-1)
	if err := f.Put(ctx, "c", []byte("3"), false); err != nil {
		t.Fatalf("Put after the outage ended: %v", err)
	}
}

func TestFaultMatch(t *testing.T) {
	ctx := t.Context()
	f, _ := newFault(t, 1)
	f.SetErrorRate(objstoretest.OpPut, 1)
	f.SetMatch(func(op objstoretest.Op, key string) bool { return strings.HasPrefix(key, "wal/") })
	if err := f.Put(ctx, "snap/1", nil, false); err != nil {
		t.Fatalf("unmatched key failed: %v", err)
	}
	wantInjected(t, f.Put(ctx, "wal/1", nil, false), objstoretest.OpPut, false)
}

func TestFaultLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := newFault(t, 1)
		f.SetLatency(time.Second, 0)
		start := time.Now()
		if err := f.Put(t.Context(), "k", nil, false); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Put took %v; want 1s", d)
		}

		f.SetLatency(time.Hour, time.Minute)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := f.Get(ctx, "k")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get whose deadline passes during the delay = %v; want DeadlineExceeded", err)
		}
	})
}

func TestFaultStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := newFault(t, 1)
		f.Stall()
		done := make(chan error, 1)
		go func() { done <- f.Put(t.Context(), "k", []byte("v"), false) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Put returned during a stall: %v", err)
		default:
		}
		f.Unstall()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		f.Stall()
		ctx, cancel := context.WithCancel(t.Context())
		go func() { done <- f.Delete(ctx, "k") }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("stalled Delete after cancel = %v; want Canceled", err)
		}
		f.Reset() // releases the stall
		if _, err := f.Get(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
	})
}
