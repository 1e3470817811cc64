package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
	"github.com/stepwell/stepwell/internal/testenv"
)

// writing reports whether a WAL write is in flight.
func (e *Engine) writing() bool {
	e.health.mu.Lock()
	defer e.health.mu.Unlock()
	return e.health.writing
}

// TestOutageLongerThanWriteRetryDoesNotClose: WAL writes that keep failing
// with a transient error, for many times the retry budget, do not close the
// engine: callers wait, Health reports the store unhealthy, and once the
// store answers every waiting transaction commits and the store is healthy
// again. Before: the engine closed with a WriteError after WriteRetry.
func TestOutageLongerThanWriteRetryDoesNotClose(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	f := objstoretest.NewFault(b, 7)
	const retry = 20 * time.Millisecond
	e := mustOpen(t, Options{Bucket: f, WriteRetry: retry})
	put(t, e, "before", "1")
	if h := e.Health(); !h.Healthy || h.LastError != nil {
		t.Fatalf("Health before the outage = %+v", h)
	}
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
	testenv.Eventually(t, 10*time.Second, "the store stalled for 10 times the write retry budget", func() bool {
		h := e.Health()
		return !h.Healthy && h.Stalled > 10*retry && h.LastError != nil
	})
	if err := e.Err(); err != nil {
		t.Fatalf("the engine failed during a transient outage: %v", err)
	}
	f.Reset()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d during the outage: %v", i, err)
		}
	}
	put(t, e, "after", "1")
	h := e.Health()
	if !h.Healthy || h.LastError == nil || h.Stalled != 0 {
		t.Fatalf("Health after the outage = %+v, want healthy with the last error kept", h)
	}
	if e.StallTime() <= 10*retry {
		t.Fatalf("StallTime = %v, want more than %v", e.StallTime(), 10*retry)
	}
	e.Kill()
	e2 := mustOpen(t, Options{Bucket: reopen()})
	defer e2.Close(ctx)
	if got := dump(t, e2); len(got) != 10 || got["before"] != "1" || got["after"] != "1" {
		t.Fatalf("state after the outage = %v", got)
	}
}

// TestStallAccounting: a WAL write in flight longer than the grace makes the
// store unhealthy, and its whole duration counts as stall time, on the
// engine's clock; it ends when the write lands.
func TestStallAccounting(t *testing.T) {
	ctx := context.Background()
	b, _ := memBucket(t)
	f := objstoretest.NewFault(b, 1)
	clock := testenv.NewClock()
	e := mustOpen(t, Options{Bucket: f, Now: clock.Now})
	defer e.Close(ctx)
	f.Stall()
	done := make(chan error, 1)
	go func() { done <- e.Update(ctx, func(tx *Tx) error { tx.Put("k", Inline(nil)); return nil }) }()
	testenv.Eventually(t, 10*time.Second, "the write in flight", e.writing)
	clock.Advance(stallGrace - time.Millisecond)
	if h := e.Health(); !h.Healthy || e.StallTime() != 0 {
		t.Fatalf("Health within the grace = %+v, StallTime %v", h, e.StallTime())
	}
	clock.Advance(4*time.Second + time.Millisecond - stallGrace)
	h := e.Health()
	if h.Healthy || h.Stalled != 4*time.Second || !h.Since.Equal(clock.Now().Add(-4*time.Second)) {
		t.Fatalf("Health during the stall = %+v, want unhealthy for 4s", h)
	}
	if st := e.StallTime(); st != 4*time.Second {
		t.Fatalf("StallTime = %v, want 4s", st)
	}
	f.Unstall()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if h := e.Health(); !h.Healthy || e.StallTime() != 4*time.Second {
		t.Fatalf("after the stall: Health = %+v, StallTime = %v", h, e.StallTime())
	}
}

// TestUpdateHonoursContextDuringStall: an Update whose ctx ends while its
// batch cannot be written returns ErrOutcomeUnknown (wrapping ctx's error)
// at once; the transaction stays applied and is durable once the store
// answers. Before: Update waited for the batch whatever its ctx.
func TestUpdateHonoursContextDuringStall(t *testing.T) {
	b, reopen := memBucket(t)
	f := objstoretest.NewFault(b, 1)
	e := mustOpen(t, Options{Bucket: f})
	f.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Update(ctx, func(tx *Tx) error { tx.Put("k", Inline([]byte("v"))); return nil }) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Update during a stall = %v, want ErrOutcomeUnknown wrapping the deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Update did not return when its ctx ended")
	}
	f.Unstall()
	if err := e.View(context.Background(), func(r *Reader) error {
		if v, ok := r.Get("k"); !ok || string(v) != string(Inline([]byte("v"))) {
			return errors.New("k missing after the stall")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	e2 := mustOpen(t, Options{Bucket: reopen()})
	defer e2.Close(context.Background())
	if got := dump(t, e2); got["k"] != "v" {
		t.Fatalf("after the stall: %v", got)
	}
}

// TestSnapshotRetriesBackOff: a snapshot that keeps failing is retried
// after a growing delay, not at every batch. Before: about 50 attempts
// over the 2,000 batches (one whenever the previous attempt had ended).
func TestSnapshotRetriesBackOff(t *testing.T) {
	b, _ := memBucket(t)
	f := objstoretest.NewFault(b, 1)
	f.SetMatch(func(op objstoretest.Op, key string) bool { return strings.HasPrefix(key, "snap/") })
	f.SetErrorRate(objstoretest.OpPut, 1)
	e := mustOpen(t, Options{Bucket: f, SnapshotMinBytes: 1, SnapshotMaxObjects: 1})
	defer e.Close(context.Background())
	const batches = 2000
	for i := range batches {
		put(t, e, fmt.Sprint("k", i), "v")
	}
	// Each attempt is one failed snapshot write; with a backoff starting at
	// 1s, a run of a few seconds makes a handful.
	if n := f.Injected(); n == 0 || n > 10 {
		t.Fatalf("%d snapshot attempts over %d batches, want 1 to 10", n, batches)
	}
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
}

// permanentPuts fails every WAL Put with a permission error once armed.
type permanentPuts struct {
	objstore.Bucket
	armed atomic.Bool
}

func (p *permanentPuts) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	if p.armed.Load() && strings.HasPrefix(key, "wal/") {
		return &objstore.OpError{Op: "put", Key: key, Err: os.ErrPermission}
	}
	return p.Bucket.Put(ctx, key, data, ifNotExist)
}

func (p *permanentPuts) Unwrap() objstore.Bucket { return p.Bucket }

// TestPermanentWALErrorIsFinal: an error that retrying cannot fix
// (permission denied) still fails the batch's callers with a WriteError and
// closes the engine.
func TestPermanentWALErrorIsFinal(t *testing.T) {
	b, _ := memBucket(t)
	p := &permanentPuts{Bucket: b}
	e := mustOpen(t, Options{Bucket: p})
	defer e.Kill()
	p.armed.Store(true)
	err := e.Update(context.Background(), func(tx *Tx) error { tx.Put("k", Inline(nil)); return nil })
	var we *WriteError
	if !errors.As(err, &we) || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("Update with a permanent error = %v, want a WriteError", err)
	}
	if e.Err() == nil {
		t.Fatal("the engine kept going after a permanent WAL write error")
	}
}

// TestSegmentSyncFailureFallsBackToObject: a failed segment sync is not
// retried in place (after a failed fsync the file's content is unknown):
// the segment is abandoned and the batch written as a WAL object. The
// engine keeps committing, and recovery reads the store whether or not the
// failed record reached the segment (here it did: the fault reports a sync
// that happened as failed). Before: the engine closed.
func TestSegmentSyncFailureFallsBackToObject(t *testing.T) {
	ctx := context.Background()
	open, f, e := faultySegmentWriter(t)
	put(t, e, "a", "1")
	f.SetMatch(func(op objstoretest.Op, key string) bool { return strings.HasSuffix(key, segSuffix) })
	f.SetAmbiguousPutRate(1) // the sync happens, its answer is lost
	put(t, e, "b", "2")
	singles, _ := walObjects(t, open())
	if len(singles) < 2 { // the marker and b's batch
		t.Fatalf("WAL objects after a failed sync: %v, want b's batch among them", singles)
	}
	f.Reset()
	for i := range 20 {
		put(t, e, fmt.Sprint("c", i), "3")
	}
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e2 := mustOpen(t, Options{Bucket: open()})
	defer e2.Close(ctx)
	got := dump(t, e2)
	if got["a"] != "1" || got["b"] != "2" || got["c19"] != "3" || len(got) != 22 {
		t.Fatalf("after a failed sync: %v", got)
	}
}

// TestRetryLater: a full or read-only disk is waited out like a network
// error; a failing disk or a permission error is final.
func TestRetryLater(t *testing.T) {
	wrap := func(errno syscall.Errno) error {
		return &objstore.OpError{Op: "put", Key: "wal/1", Err: &os.PathError{Op: "write", Path: "/x", Err: errno}}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wrap(syscall.ENOSPC), true},
		{wrap(syscall.EROFS), true},
		{wrap(syscall.EDQUOT), true},
		{wrap(syscall.ECONNRESET), true},
		{wrap(syscall.EIO), false},
		{wrap(syscall.EACCES), false},
		{&objstore.OpError{Op: "put", Key: "wal/1", Err: context.DeadlineExceeded}, true},
		{&objstore.OpError{Op: "put", Key: "wal/1", Err: context.Canceled}, false},
	} {
		if got := retryLater(c.err); got != c.want {
			t.Errorf("retryLater(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestRateLogBoundsWarnings: a failure at every heartbeat during a long
// outage logs one line per warnEvery, each counting the failures it
// stands for.
func TestRateLogBoundsWarnings(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var r rateLog
	start := time.Unix(1000, 0)
	for i := range 60 { // two minutes of failures, one every 2s
		r.warn(log, start.Add(time.Duration(i)*2*time.Second), "heartbeat write failed")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines for 2 minutes of failures, want 4 (one per %v):\n%s", len(lines), warnEvery, buf.String())
	}
	if !strings.Contains(lines[1], "failures_since_last_warning=15") {
		t.Errorf("second line %q does not count the 15 failures it stands for", lines[1])
	}
}

// TestFailDuringWALWrite: an engine that fails while a WAL write is in
// flight (its heartbeat found a newer writer, or Close gave up on a
// stalled store) tells that batch's waiters then, unacknowledged. When the
// write lands afterwards, the committer stops without telling them again:
// before, it closed the batch's channel a second time and the process
// panicked.
//
// The write is a segment record on file:// (its system call runs to its
// end whatever the engine's context says; an object PUT is cancelled).
func TestFailDuringWALWrite(t *testing.T) {
	ctx := context.Background()
	_, f, e := faultySegmentWriter(t)
	put(t, e, "k0", "v0") // publishes the segment: the next write is a record in it
	f.Stall()
	done := make(chan error, 1)
	go func() { done <- e.Update(ctx, func(tx *Tx) error { tx.Put("k", Inline([]byte("v"))); return nil }) }()
	testenv.Eventually(t, 10*time.Second, "the write in flight", e.writing)
	e.fail(fmt.Errorf("%w: a newer writer owns the store", ErrFenced))
	if err := <-done; !errors.Is(err, ErrFenced) {
		t.Fatalf("Update whose batch was in flight when the engine failed: %v, want ErrFenced", err)
	}
	f.Unstall() // the write lands now
	if err := e.Close(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("Close of the failed engine: %v, want ErrFenced", err)
	}
	if err := e.Update(ctx, func(tx *Tx) error { tx.Put("k2", Inline(nil)); return nil }); err == nil {
		t.Fatal("an Update after the failure succeeded")
	}
}
