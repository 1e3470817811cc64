package objstoretest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
)

// Op is a kind of bucket request, as Fault's knobs see it.
type Op int

const (
	// OpGet is Get and NewReader.
	OpGet Op = iota
	// OpPut is Put and Writer.Close (a streamed write is one request, made
	// at Close).
	OpPut
	// OpList is List.
	OpList
	// OpDelete is Delete.
	OpDelete

	numOps
)

// String returns the operation's name as used in objstore.OpError.
func (o Op) String() string {
	switch o {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpList:
		return "list"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// FaultError is the cause of every error Fault injects (inside an
// *objstore.OpError). It is retryable: objstore.IsRetryable reports true.
type FaultError struct {
	// Op is the failed request's kind.
	Op Op
	// Key is the key (the prefix, for OpList).
	Key string
	// Ambiguous is set when the write really happened and only its answer
	// was replaced by this error.
	Ambiguous bool
}

// Error implements error.
func (e *FaultError) Error() string {
	if e.Ambiguous {
		return "objstoretest: injected fault after the write succeeded"
	}
	return "objstoretest: injected fault"
}

// Retryable marks the error as transient for objstore.IsRetryable.
func (e *FaultError) Retryable() bool { return true }

// Fault wraps a Bucket and injects failures: errors by request kind, added
// latency, "ambiguous" writes that succeed but report a retryable error,
// an outage after N writes, and stalls. Every knob is off after NewFault
// and after Reset, and Fault then behaves exactly like the inner bucket.
// All methods are safe for concurrent use.
//
// Random choices come from one generator seeded by NewFault's seed: a
// sequence of requests made from one goroutine fails the same way on every
// run (concurrent requests draw in scheduling order). Draws are made only
// for probabilities that are above zero. Latency jitter is not part of the
// reproducible sequence.
//
// Fault does not implement objstore.Locker; objstore.AsLocker finds the
// inner bucket's through Unwrap. Segment requests (objstore.Segmenter,
// found with objstore.AsSegmenter) are writes (OpPut) to its knobs:
// staging a segment (key "", or the reused segment's key), publishing it
// and each Segment.Sync (the segment's key), which an ambiguous fault
// reports failed after it succeeded. SyncPrefix is an OpList of the
// prefix; opening a segment to read it and each read of it are OpGets.
type Fault struct {
	inner objstore.Bucket

	mu            sync.Mutex
	rng           *rand.Rand            // guarded by mu
	errRate       [numOps]float64       // guarded by mu
	ambiguousRate float64               // guarded by mu
	latency       time.Duration         // guarded by mu
	jitter        time.Duration         // guarded by mu
	failAfter     int64                 // guarded by mu; <0: off
	writes        int64                 // guarded by mu; writes since FailAfterWrites
	match         func(Op, string) bool // guarded by mu; nil: every request
	stall         chan struct{}         // guarded by mu; non-nil while stalled
	injected      int64                 // guarded by mu
}

// NewFault returns a Fault wrapping b, with every knob off. seed makes its
// random choices reproducible; log it in randomized tests.
func NewFault(b objstore.Bucket, seed int64) *Fault {
	return &Fault{
		inner:     b,
		rng:       rand.New(rand.NewPCG(uint64(seed), 0x5745_4c4c)),
		failAfter: -1,
	}
}

// Unwrap returns the wrapped bucket.
func (f *Fault) Unwrap() objstore.Bucket { return f.inner }

// SetErrorRate makes requests of kind op fail with probability p (0 to 1),
// before reaching the inner bucket. Defaults to 0.
func (f *Fault) SetErrorRate(op Op, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errRate[op] = p
}

// SetAmbiguousPutRate makes successful writes (Put, Writer.Close) report a
// retryable error with probability p (0 to 1), after the object was really
// written. Defaults to 0.
func (f *Fault) SetAmbiguousPutRate(p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ambiguousRate = p
}

// SetLatency delays every request by fixed plus a random duration in
// [0, jitter). Defaults to none. A request whose context ends during the
// delay fails with the context's error and does not reach the inner bucket.
func (f *Fault) SetLatency(fixed, jitter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency, f.jitter = fixed, jitter
}

// FailAfterWrites lets the next n writes (Put, Writer.Close, Delete)
// through and fails every later one, until FailAfterWrites is called
// again or Reset. n < 0 turns the outage off (the default).
func (f *Fault) FailAfterWrites(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAfter, f.writes = int64(n), 0
}

// SetMatch limits injected errors (error rates, ambiguous writes,
// FailAfterWrites) to requests for which match returns true, for example
// only keys under "wal/". Latency and stalls apply to every request. nil
// (the default) matches every request.
func (f *Fault) SetMatch(match func(op Op, key string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.match = match
}

// Stall makes every request block, before reaching the inner bucket, until
// Unstall (or until its context ends, when it fails with the context's
// error). Requests already past the stall point are not affected.
func (f *Fault) Stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stall == nil {
		f.stall = make(chan struct{})
	}
}

// Unstall releases the requests blocked by Stall.
func (f *Fault) Unstall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stall != nil {
		close(f.stall)
		f.stall = nil
	}
}

// Reset turns every knob off (and releases a stall). The random generator
// keeps its state.
func (f *Fault) Reset() {
	f.Unstall()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errRate = [numOps]float64{}
	f.ambiguousRate = 0
	f.latency, f.jitter = 0, 0
	f.failAfter, f.writes = -1, 0
	f.match = nil
}

// Injected returns how many errors Fault has injected (context errors
// from latency and stalls not included).
func (f *Fault) Injected() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// chanceLocked draws against probability p.
// REQUIRES: f.mu held.
func (f *Fault) chanceLocked(p float64) bool {
	return p > 0 && f.rng.Float64() < p
}

// before runs the stall and latency knobs, then decides whether to fail the
// request. It returns the error to report, or nil to go ahead.
func (f *Fault) before(ctx context.Context, op Op, key string) error {
	f.mu.Lock()
	stall := f.stall
	delay := f.latency
	if f.jitter > 0 {
		delay += rand.N(f.jitter) // jitter need not be reproducible
	}
	f.mu.Unlock()

	if stall != nil {
		select {
		case <-stall:
		case <-ctx.Done():
			return &objstore.OpError{Op: op.String(), Key: key, Err: ctx.Err()}
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return &objstore.OpError{Op: op.String(), Key: key, Err: ctx.Err()}
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.match != nil && !f.match(op, key) {
		return nil
	}
	fail := false
	if op == OpPut || op == OpDelete {
		if f.failAfter >= 0 && f.writes >= f.failAfter {
			fail = true
		}
		f.writes++
	}
	if !fail {
		fail = f.chanceLocked(f.errRate[op])
	}
	if !fail {
		return nil
	}
	f.injected++
	return &objstore.OpError{Op: op.String(), Key: key, Err: &FaultError{Op: op, Key: key}}
}

// after decides whether a successful write reports an ambiguous error.
func (f *Fault) after(key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.match != nil && !f.match(OpPut, key) {
		return nil
	}
	if !f.chanceLocked(f.ambiguousRate) {
		return nil
	}
	f.injected++
	return &objstore.OpError{Op: OpPut.String(), Key: key, Err: &FaultError{Op: OpPut, Key: key, Ambiguous: true}}
}

// Get implements objstore.Bucket.
func (f *Fault) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.before(ctx, OpGet, key); err != nil {
		return nil, err
	}
	return f.inner.Get(ctx, key)
}

// NewReader implements objstore.Bucket.
func (f *Fault) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.before(ctx, OpGet, key); err != nil {
		return nil, err
	}
	return f.inner.NewReader(ctx, key)
}

// Put implements objstore.Bucket.
func (f *Fault) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	if err := f.before(ctx, OpPut, key); err != nil {
		return err
	}
	if err := f.inner.Put(ctx, key, data, ifNotExist); err != nil {
		return err
	}
	return f.after(key)
}

// NewWriter implements objstore.Bucket. Faults apply at the Writer's Close.
func (f *Fault) NewWriter(ctx context.Context, key string, ifNotExist bool) (objstore.Writer, error) {
	w, err := f.inner.NewWriter(ctx, key, ifNotExist)
	if err != nil {
		return nil, err
	}
	return &faultWriter{Writer: w, f: f, ctx: ctx, key: key}, nil
}

// Delete implements objstore.Bucket.
func (f *Fault) Delete(ctx context.Context, key string) error {
	if err := f.before(ctx, OpDelete, key); err != nil {
		return err
	}
	return f.inner.Delete(ctx, key)
}

// List implements objstore.Bucket.
func (f *Fault) List(ctx context.Context, prefix string) ([]objstore.ObjectInfo, error) {
	if err := f.before(ctx, OpList, prefix); err != nil {
		return nil, err
	}
	return f.inner.List(ctx, prefix)
}

// Close implements objstore.Bucket; it closes the inner bucket. Knobs do
// not apply.
func (f *Fault) Close() error { return f.inner.Close() }

type faultWriter struct {
	objstore.Writer
	f    *Fault
	ctx  context.Context
	key  string
	done bool
}

func (w *faultWriter) Close() error {
	if w.done {
		return w.Writer.Close() // the inner writer reports the misuse
	}
	w.done = true
	if err := w.f.before(w.ctx, OpPut, w.key); err != nil {
		w.Writer.Abort()
		return err
	}
	if err := w.Writer.Close(); err != nil {
		return err
	}
	return w.f.after(w.key)
}

func (w *faultWriter) Abort() error {
	w.done = true
	return w.Writer.Abort()
}

// WrapSegmenter implements objstore.SegmentWrapper: segment requests get
// the knobs too.
func (f *Fault) WrapSegmenter(s objstore.Segmenter) objstore.Segmenter {
	return &faultSegmenter{inner: s, f: f}
}

type faultSegmenter struct {
	inner objstore.Segmenter
	f     *Fault
}

func (s *faultSegmenter) NewSegment(ctx context.Context, size int64) (objstore.Segment, error) {
	if err := s.f.before(ctx, OpPut, ""); err != nil {
		return nil, err
	}
	seg, err := s.inner.NewSegment(ctx, size)
	if err != nil {
		return nil, err
	}
	return &faultSegment{Segment: seg, f: s.f}, nil
}

func (s *faultSegmenter) ReuseSegment(ctx context.Context, key string) (objstore.Segment, error) {
	if err := s.f.before(ctx, OpPut, key); err != nil {
		return nil, err
	}
	seg, err := s.inner.ReuseSegment(ctx, key)
	if err != nil {
		return nil, err
	}
	return &faultSegment{Segment: seg, f: s.f}, nil
}

func (s *faultSegmenter) SyncPrefix(ctx context.Context, prefix string) error {
	if err := s.f.before(ctx, OpList, prefix); err != nil {
		return err
	}
	return s.inner.SyncPrefix(ctx, prefix)
}

func (s *faultSegmenter) OpenSegment(ctx context.Context, key string) (objstore.SegmentReader, error) {
	if err := s.f.before(ctx, OpGet, key); err != nil {
		return nil, err
	}
	r, err := s.inner.OpenSegment(ctx, key)
	if err != nil {
		return nil, err
	}
	return &faultSegReader{SegmentReader: r, f: s.f, key: key}, nil
}

type faultSegReader struct {
	objstore.SegmentReader
	f   *Fault
	key string
}

func (r *faultSegReader) ReadAt(p []byte, off int64) (int, error) {
	if err := r.f.before(context.Background(), OpGet, r.key); err != nil {
		return 0, err
	}
	return r.SegmentReader.ReadAt(p, off)
}

type faultSegment struct {
	objstore.Segment
	f   *Fault
	key string
}

func (s *faultSegment) Publish(ctx context.Context, key string) error {
	if err := s.f.before(ctx, OpPut, key); err != nil {
		return err
	}
	if err := s.Segment.Publish(ctx, key); err != nil {
		return err
	}
	s.key = key
	return s.f.after(key)
}

func (s *faultSegment) Sync() error {
	if err := s.f.before(context.Background(), OpPut, s.key); err != nil {
		return err
	}
	if err := s.Segment.Sync(); err != nil {
		return err
	}
	return s.f.after(s.key)
}
