package objstoretest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
	"github.com/stepwell/stepwell/internal/testenv"
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

// waitBlocked waits until f holds n requests, failing the test after 10s.
func waitBlocked(t *testing.T, f *objstoretest.Fault, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d blocked requests", n), func() bool { return f.Blocked() == n })
}

func TestFaultBlackhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, inner := newFault(t, 1)
		f.SetBlackhole(objstoretest.OpPut, true)
		f.SetMatch(func(op objstoretest.Op, key string) bool { return strings.HasPrefix(key, "wal/") })

		// Other kinds and unmatched keys go through.
		if err := f.Put(t.Context(), "snap/1", []byte("s"), false); err != nil {
			t.Fatalf("unmatched Put: %v", err)
		}
		if _, err := f.Get(t.Context(), "snap/1"); err != nil {
			t.Fatalf("Get: %v", err)
		}

		// A matched request answers only when its context ends, and
		// never reaches the bucket.
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		start := time.Now()
		err := f.Put(ctx, "wal/1", []byte("w"), true)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Hour {
			t.Fatalf("blackholed Put = %v after %v; want DeadlineExceeded after 1h", err, time.Since(start))
		}
		var oe *objstore.OpError
		if !errors.As(err, &oe) || oe.Op != "put" || oe.Key != "wal/1" {
			t.Fatalf("blackholed Put error %v is not an OpError for put wal/1", err)
		}
		if _, err := inner.Get(t.Context(), "wal/1"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("a blackholed Put reached the bucket: %v", err)
		}

		// Writers too, at Close; lifting the blackhole fails what it holds.
		done := make(chan error, 2)
		go func() { done <- f.Put(context.Background(), "wal/2", nil, false) }()
		w, err := f.NewWriter(t.Context(), "wal/3", false)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- w.Close() }()
		synctest.Wait()
		if got := f.Blocked(); got != 2 {
			t.Fatalf("Blocked() = %d; want 2", got)
		}
		select {
		case err := <-done:
			t.Fatalf("a blackholed request answered: %v", err)
		default:
		}
		f.SetBlackhole(objstoretest.OpPut, false)
		for range 2 {
			wantInjected(t, <-done, objstoretest.OpPut, false)
		}
		if got := f.Blocked(); got != 0 {
			t.Fatalf("Blocked() = %d after the blackhole was lifted", got)
		}
		if err := f.Put(t.Context(), "wal/4", nil, false); err != nil {
			t.Fatalf("Put after the blackhole was lifted: %v", err)
		}

		// Reset lifts every blackhole.
		f.SetBlackhole(objstoretest.OpList, true)
		go func() {
			_, err := f.List(context.Background(), "wal/")
			done <- err
		}()
		synctest.Wait()
		f.Reset()
		wantInjected(t, <-done, objstoretest.OpList, false)
	})
}

func TestFaultPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := newFault(t, 1)
		f.Pause(3 * time.Second)
		start := time.Now()
		if err := f.Put(t.Context(), "k", []byte("v"), false); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("Put during a 3s pause took %v", d)
		}
		if _, err := f.Get(t.Context(), "k"); err != nil || time.Since(start) != 3*time.Second {
			t.Fatalf("Get after the pause: %v after %v", err, time.Since(start))
		}

		// A request whose context ends first fails with its error.
		f.Pause(time.Minute)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := f.Get(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get whose deadline passes during a pause = %v", err)
		}
		// Unstall ends a pause early.
		done := make(chan error, 1)
		go func() { done <- f.Delete(t.Context(), "k") }()
		synctest.Wait()
		f.Unstall()
		if err := <-done; err != nil || time.Since(start) != 4*time.Second {
			t.Fatalf("Delete released by Unstall: %v after %v", err, time.Since(start))
		}

		// Stall during a pause makes it last until Unstall.
		f.Pause(time.Second)
		f.Stall()
		go func() { done <- f.Put(t.Context(), "k", nil, false) }()
		time.Sleep(time.Hour)
		synctest.Wait()
		if f.Blocked() != 1 {
			t.Fatalf("the pause ended the stall that followed it: Blocked() = %d", f.Blocked())
		}
		f.Unstall()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// segmentFault returns a Fault over a file store and the Segmenter it wraps
// (with the knobs).
func segmentFault(t *testing.T) (*objstoretest.Fault, objstore.Segmenter) {
	t.Helper()
	f := objstoretest.NewFault(objstoretest.Open(t, objstoretest.FileURL(t)), 1)
	sg, ok := objstore.AsSegmenter(f)
	if !ok {
		t.Fatal("no Segmenter through Fault")
	}
	return f, sg
}

// Stall and Pause hold every request, segment requests included; those
// with a context fail when it ends.
func TestFaultStallSegments(t *testing.T) {
	ctx := t.Context()
	f, sg := segmentFault(t)
	seg, err := sg.NewSegment(ctx, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	if err := seg.Publish(ctx, "wal/1.log"); err != nil {
		t.Fatal(err)
	}
	if err := seg.WriteAt([]byte("record"), 0); err != nil {
		t.Fatal(err)
	}
	r, err := sg.OpenSegment(ctx, "wal/1.log")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	reqs := map[string]func(context.Context) error{
		"NewSegment": func(ctx context.Context) error {
			s, err := sg.NewSegment(ctx, 4096)
			if err == nil {
				s.Close()
			}
			return err
		},
		"OpenSegment": func(ctx context.Context) error {
			r, err := sg.OpenSegment(ctx, "wal/1.log")
			if err == nil {
				r.Close()
			}
			return err
		},
		"SyncPrefix": func(ctx context.Context) error { return sg.SyncPrefix(ctx, "wal/") },
		"Sync":       func(context.Context) error { return seg.Sync() },
		"ReadAt": func(context.Context) error {
			_, err := r.ReadAt(make([]byte, 6), 0)
			return err
		},
	}
	withCtx := map[string]bool{"NewSegment": true, "OpenSegment": true, "SyncPrefix": true}

	f.Stall()
	cctx, cancel := context.WithCancel(ctx)
	type result struct {
		name string
		err  error
	}
	done := make(chan result, len(reqs))
	for name, req := range reqs {
		go func() { done <- result{name, req(cctx)} }()
	}
	waitBlocked(t, f, len(reqs))
	cancel()
	for range withCtx {
		if r := <-done; !withCtx[r.name] || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("%s returned %v when a stalled request's context was canceled", r.name, r.err)
		}
	}
	waitBlocked(t, f, len(reqs)-len(withCtx))
	f.Unstall()
	for range len(reqs) - len(withCtx) {
		if r := <-done; r.err != nil {
			t.Fatalf("%s after Unstall: %v", r.name, r.err)
		}
	}

	// A pause of a second holds them as long.
	f.Pause(time.Second)
	start := time.Now()
	if err := seg.Sync(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("Sync during a 1s pause returned after %v", d)
	}
}

func wantDiskErr(t *testing.T, what string, err error, op string, errno syscall.Errno) {
	t.Helper()
	var oe *objstore.OpError
	if !errors.As(err, &oe) || oe.Op != op || !errors.Is(err, errno) {
		t.Fatalf("%s = %v; want an *objstore.OpError for %q wrapping %v", what, err, op, errno)
	}
	var fe *objstoretest.FaultError
	if errors.As(err, &fe) {
		t.Fatalf("%s = %v: a disk error wraps a FaultError", what, err)
	}
	if got, want := objstore.IsRetryable(err), errno == syscall.ENOSPC; got != want {
		t.Fatalf("IsRetryable(%v) = %v; want %v", err, got, want)
	}
}

func TestFaultDiskFull(t *testing.T) {
	ctx := t.Context()
	f, sg := segmentFault(t)
	if err := f.Put(ctx, "old", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	seg, err := sg.NewSegment(ctx, 4096) // staged before the disk filled
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	w, err := f.NewWriter(ctx, "streamed", true)
	if err != nil {
		t.Fatal(err)
	}
	f.SetDiskFull(true)

	wantDiskErr(t, "Put", f.Put(ctx, "new", []byte("y"), true), "put", syscall.ENOSPC)
	w.Write([]byte("data"))
	wantDiskErr(t, "Writer.Close", w.Close(), "put", syscall.ENOSPC)
	_, err = sg.NewSegment(ctx, 4096)
	wantDiskErr(t, "NewSegment", err, "segment", syscall.ENOSPC)
	for _, key := range []string{"new", "streamed"} {
		if _, err := f.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("a write that failed for a full disk left %s: %v", key, err)
		}
	}
	// Reads, deletes and writes into allocated blocks go through.
	if _, err := f.List(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := seg.Publish(ctx, "wal/1.log"); err != nil {
		t.Fatal(err)
	}
	if err := seg.WriteAt([]byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	if err := seg.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if got := f.Injected(); got != 3 {
		t.Errorf("Injected() = %d; want 3", got)
	}

	// SetMatch limits it; once space is freed, the same request succeeds.
	f.SetMatch(func(op objstoretest.Op, key string) bool { return key == "new" })
	wantDiskErr(t, "matched Put", f.Put(ctx, "new", []byte("y"), true), "put", syscall.ENOSPC)
	if err := f.Put(ctx, "other", nil, true); err != nil {
		t.Fatalf("unmatched Put on a full disk: %v", err)
	}
	f.SetDiskFull(false)
	if err := f.Put(ctx, "new", []byte("y"), true); err != nil {
		t.Fatalf("retry after space was freed: %v", err)
	}
}

func TestFaultReadOnly(t *testing.T) {
	ctx := t.Context()
	f, sg := segmentFault(t)
	if err := f.Put(ctx, "old", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	seg, err := sg.NewSegment(ctx, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	published, err := sg.NewSegment(ctx, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer published.Close()
	if err := published.Publish(ctx, "wal/1.log"); err != nil {
		t.Fatal(err)
	}
	w, err := f.NewWriter(ctx, "streamed", false)
	if err != nil {
		t.Fatal(err)
	}
	f.SetDiskFull(true) // read-only takes precedence
	f.SetReadOnly(true)

	wantDiskErr(t, "Put", f.Put(ctx, "new", []byte("y"), false), "put", syscall.EROFS)
	_, err = f.NewWriter(ctx, "new", false)
	wantDiskErr(t, "NewWriter", err, "put", syscall.EROFS)
	w.Write([]byte("data"))
	wantDiskErr(t, "Close of a Writer made before", w.Close(), "put", syscall.EROFS)
	wantDiskErr(t, "Delete", f.Delete(ctx, "old"), "delete", syscall.EROFS)
	_, err = sg.NewSegment(ctx, 4096)
	wantDiskErr(t, "NewSegment", err, "segment", syscall.EROFS)
	_, err = sg.ReuseSegment(ctx, "wal/1.log")
	wantDiskErr(t, "ReuseSegment", err, "segment", syscall.EROFS)
	wantDiskErr(t, "Publish", seg.Publish(ctx, "wal/2.log"), "publish", syscall.EROFS)
	wantDiskErr(t, "WriteAt", published.WriteAt([]byte("r"), 0), "write", syscall.EROFS)
	wantDiskErr(t, "Sync", published.Sync(), "sync", syscall.EROFS)

	// Reads go through; nothing was changed.
	if got, err := f.Get(ctx, "old"); err != nil || string(got) != "x" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if objs, err := f.List(ctx, ""); err != nil || len(objs) != 2 {
		t.Fatalf("List = %v, %v; want old and wal/1.log", objs, err)
	}
	if err := sg.SyncPrefix(ctx, "wal/"); err != nil {
		t.Fatal(err)
	}
	f.Reset()
	if err := f.Put(ctx, "new", []byte("y"), false); err != nil {
		t.Fatalf("Put after Reset: %v", err)
	}
}
