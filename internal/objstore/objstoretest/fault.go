package objstoretest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
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
// an outage after N writes, stalls and pauses (every request waits),
// blackholes (requests of a kind never answer) and the errors of a full
// or read-only disk as the file driver reports them. Every knob is off
// after NewFault and after Reset, and Fault then behaves exactly like the
// inner bucket. All methods are safe for concurrent use.
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
// Segment.WriteAt is not a request (it writes into the operating
// system's cache): only SetReadOnly fails it. Segment.Sync and
// SegmentReader.ReadAt have no context: a stall or blackhole holds them
// until it is lifted.
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
	pause         *time.Timer           // guarded by mu; ends the stall (Pause)
	hole          [numOps]chan struct{} // guarded by mu; non-nil: blackholed
	diskFull      bool                  // guarded by mu
	readOnly      bool                  // guarded by mu
	blocked       int                   // guarded by mu; requests held now
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
// FailAfterWrites, blackholes, SetDiskFull and SetReadOnly) to requests
// for which match returns true, for example only keys under "wal/".
// Latency, stalls and pauses apply to every request. nil (the default)
// matches every request.
func (f *Fault) SetMatch(match func(op Op, key string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.match = match
}

// Stall makes every request block, before reaching the inner bucket, until
// Unstall (or until its context ends, when it fails with the context's
// error). Requests already past the stall point are not affected. A
// Pause in progress becomes a stall without an end.
func (f *Fault) Stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopPauseLocked()
	if f.stall == nil {
		f.stall = make(chan struct{})
	}
}

// Pause stalls every request as Stall does, for d from now, then releases
// them as Unstall does; Unstall, Reset or another Pause (which sets a new
// end) may end it sooner, and Stall makes it last until Unstall. Pause
// returns at once. In a testing/synctest bubble, d is the bubble's time.
func (f *Fault) Pause(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopPauseLocked()
	if f.stall == nil {
		f.stall = make(chan struct{})
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.pause == t { // not stopped, nor replaced, meanwhile
			f.pause = nil
			f.unstallLocked()
		}
	})
	f.pause = t
}

// Unstall releases the requests blocked by Stall or Pause.
func (f *Fault) Unstall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopPauseLocked()
	f.unstallLocked()
}

// REQUIRES: f.mu held.
func (f *Fault) unstallLocked() {
	if f.stall != nil {
		close(f.stall)
		f.stall = nil
	}
}

// REQUIRES: f.mu held.
func (f *Fault) stopPauseLocked() {
	if f.pause != nil {
		f.pause.Stop()
		f.pause = nil
	}
}

// SetBlackhole makes requests of kind op (those SetMatch's function
// accepts) vanish, like requests to a server that stopped answering
// without closing its connections: they never reach the inner bucket and
// never answer until their context ends, when they fail with the
// context's error as a client that gave up would. Lifting the blackhole
// (SetBlackhole(op, false) or Reset) fails the requests held in it with a
// retryable FaultError; later requests go through. Stall and latency come
// first. Defaults to off for every kind.
//
// Requests without a context (Segment.Sync, SegmentReader.ReadAt) wait
// until the blackhole is lifted: lift it before closing an engine whose
// committer may be held in one.
func (f *Fault) SetBlackhole(op Op, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && f.hole[op] == nil:
		f.hole[op] = make(chan struct{})
	case !on && f.hole[op] != nil:
		close(f.hole[op])
		f.hole[op] = nil
	}
}

// Blocked returns how many requests are held right now by a stall, a
// pause or a blackhole. Tests wait for it to reach a count instead of
// sleeping.
func (f *Fault) Blocked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocked
}

// SetDiskFull makes the requests that need new space fail as the file://
// driver fails on a full disk: with an *objstore.OpError (the driver's Op
// and the key) wrapping an *fs.PathError (the failing system call) of
// syscall.ENOSPC. Those are Put and Writer.Close (op "put", writing the
// staged object) and NewSegment (op "segment", writing its zeros); reads,
// List, Delete (which frees space) and the segment requests that reuse
// blocks already allocated (ReuseSegment, Publish, WriteAt, Sync,
// SyncPrefix) go through, as they do on a real full disk. The request
// does not reach the inner bucket. objstore.IsRetryable reports true, as
// for the real error (see the objstore package documentation): the
// failed write left nothing behind, and a retry succeeds once space is
// freed. The PathError's Path is the key, not a file name.
// Segment.Sync on a real full disk of a file system that allocates at
// write-back (copy-on-write, thin provisioning) can fail too; the driver
// reports that as not retryable (see objstore.IsRetryable on syncs), and
// SetDiskFull does not inject it.
func (f *Fault) SetDiskFull(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.diskFull = on
}

// SetReadOnly makes every request that modifies the store fail as the
// file:// driver fails on a read-only file system (mounted read-only, or
// remounted so after an I/O error): with an *objstore.OpError wrapping an
// *fs.PathError (an *os.LinkError for Publish) of syscall.EROFS. Those
// are Put, NewWriter (which stages a file; a Writer made before fails at
// Close), Delete, NewSegment, ReuseSegment, Publish, Segment.WriteAt and
// Segment.Sync; reads, List and SyncPrefix go through. It takes
// precedence over SetDiskFull. objstore.IsRetryable reports false, as for
// the real error: a read-only file system does not heal by waiting.
func (f *Fault) SetReadOnly(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly = on
}

// Reset turns every knob off (and releases a stall, a pause and the
// requests in blackholes). The random generator keeps its state.
func (f *Fault) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopPauseLocked()
	f.unstallLocked()
	for op := range f.hole {
		if f.hole[op] != nil {
			close(f.hole[op])
			f.hole[op] = nil
		}
	}
	f.errRate = [numOps]float64{}
	f.ambiguousRate = 0
	f.latency, f.jitter = 0, 0
	f.failAfter, f.writes = -1, 0
	f.match = nil
	f.diskFull, f.readOnly = false, false
}

// Injected returns how many errors Fault has injected, disk errors and
// requests failed by lifting a blackhole included (context errors from
// latency, stalls and blackholes not).
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

// diskFunc returns the error the file driver reports for a request on a
// disk that is full (syscall.ENOSPC) or read-only (syscall.EROFS), or nil
// if that disk lets the request through. nil: no request is affected.
type diskFunc func(errno syscall.Errno) error

// driverErr is the file driver's error for a failed system call sysOp:
// the OpError for op on key, wrapping the call's PathError. The Path is the
// key (".tmp", the staging directory, for a segment not yet named): the
// Fault does not know the store's directory.
func driverErr(op, key, sysOp string, errno syscall.Errno) error {
	path := key
	if path == "" {
		path = ".tmp"
	}
	return &objstore.OpError{Op: op, Key: key, Err: &fs.PathError{Op: sysOp, Path: path, Err: errno}}
}

// Disk errors by request, as the file driver fails them (see file.go and
// file_segment.go in package objstore): on a full disk, writing the bytes
// of a staged object or a new segment's zeros; on a read-only one,
// creating the staged file (open), or whatever comes first for a request
// whose file is already open.
var (
	diskPut = func(key string) diskFunc {
		return func(errno syscall.Errno) error {
			if errno == syscall.EROFS {
				return driverErr("put", key, "open", errno)
			}
			return driverErr("put", key, "write", errno)
		}
	}
	diskWriterOpen = func(key string) diskFunc {
		return func(errno syscall.Errno) error {
			if errno == syscall.EROFS {
				return driverErr("put", key, "open", errno)
			}
			return nil // fails at Close, when the bytes are written
		}
	}
	diskWriterClose = func(key string) diskFunc {
		return func(errno syscall.Errno) error { return driverErr("put", key, "write", errno) }
	}
	diskDelete = func(key string) diskFunc {
		return func(errno syscall.Errno) error {
			if errno == syscall.EROFS {
				return driverErr("delete", key, "unlink", errno)
			}
			return nil
		}
	}
	diskNewSegment diskFunc = func(errno syscall.Errno) error {
		if errno == syscall.EROFS {
			return driverErr("segment", "", "open", errno)
		}
		return driverErr("segment", "", "write", errno)
	}
	diskReuseSegment = func(key string) diskFunc {
		return func(errno syscall.Errno) error {
			if errno == syscall.EROFS {
				return driverErr("segment", key, "open", errno)
			}
			return nil // its blocks are allocated
		}
	}
	diskPublish = func(key string) diskFunc {
		return func(errno syscall.Errno) error {
			if errno == syscall.EROFS {
				return &objstore.OpError{Op: "publish", Key: key, Err: &os.LinkError{Op: "linkat", Old: "(unnamed)", New: key, Err: errno}}
			}
			return nil
		}
	}
	diskSegWrite = func(op, name, sysOp string) diskFunc {
		return func(errno syscall.Errno) error {
			if errno == syscall.EROFS {
				return driverErr(op, name, sysOp, errno)
			}
			return nil // overwriting allocated blocks needs no space
		}
	}
)

// before runs the stall and latency knobs, then decides whether to fail the
// request (holding it first if it is blackholed). It returns the error to
// report, or nil to go ahead. disk says how a full or read-only disk fails
// the request (nil: it does not).
func (f *Fault) before(ctx context.Context, op Op, key string, disk diskFunc) error {
	f.mu.Lock()
	stall := f.stall
	delay := f.latency
	if f.jitter > 0 {
		delay += rand.N(f.jitter) // jitter need not be reproducible
	}
	f.mu.Unlock()

	if stall != nil {
		if err := f.hold(ctx, stall); err != nil {
			return &objstore.OpError{Op: op.String(), Key: key, Err: err}
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
	if f.match != nil && !f.match(op, key) {
		f.mu.Unlock()
		return nil
	}
	if hole := f.hole[op]; hole != nil {
		f.mu.Unlock()
		if err := f.hold(ctx, hole); err != nil {
			return &objstore.OpError{Op: op.String(), Key: key, Err: err}
		}
		// Lifted: the request was lost.
		f.mu.Lock()
		f.injected++
		f.mu.Unlock()
		return &objstore.OpError{Op: op.String(), Key: key, Err: &FaultError{Op: op, Key: key}}
	}
	defer f.mu.Unlock()
	if err := f.diskErrLocked(disk); err != nil {
		return err
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

// hold blocks until release is closed (nil) or ctx ends (its error),
// counting the request in Blocked meanwhile.
func (f *Fault) hold(ctx context.Context, release <-chan struct{}) error {
	f.mu.Lock()
	f.blocked++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.blocked--
		f.mu.Unlock()
	}()
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// diskErrLocked returns the error of a full or read-only disk for a
// request that such a disk fails, counting it as injected.
//
// REQUIRES: f.mu held.
func (f *Fault) diskErrLocked(disk diskFunc) error {
	if disk == nil {
		return nil
	}
	var err error
	switch {
	case f.readOnly:
		err = disk(syscall.EROFS)
	case f.diskFull:
		err = disk(syscall.ENOSPC)
	}
	if err != nil {
		f.injected++
	}
	return err
}

// diskOnly fails a request that only the disk knobs apply to (not a
// request to the store, or checked again later by before).
func (f *Fault) diskOnly(op Op, key string, disk diskFunc) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.match != nil && !f.match(op, key) {
		return nil
	}
	return f.diskErrLocked(disk)
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
	if err := f.before(ctx, OpGet, key, nil); err != nil {
		return nil, err
	}
	return f.inner.Get(ctx, key)
}

// NewReader implements objstore.Bucket.
func (f *Fault) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.before(ctx, OpGet, key, nil); err != nil {
		return nil, err
	}
	return f.inner.NewReader(ctx, key)
}

// Put implements objstore.Bucket.
func (f *Fault) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	if err := f.before(ctx, OpPut, key, diskPut(key)); err != nil {
		return err
	}
	if err := f.inner.Put(ctx, key, data, ifNotExist); err != nil {
		return err
	}
	return f.after(key)
}

// NewWriter implements objstore.Bucket. Faults apply at the Writer's Close,
// except SetReadOnly's, which fails NewWriter as the file driver does.
func (f *Fault) NewWriter(ctx context.Context, key string, ifNotExist bool) (objstore.Writer, error) {
	if err := f.diskOnly(OpPut, key, diskWriterOpen(key)); err != nil {
		return nil, err
	}
	w, err := f.inner.NewWriter(ctx, key, ifNotExist)
	if err != nil {
		return nil, err
	}
	return &faultWriter{Writer: w, f: f, ctx: ctx, key: key}, nil
}

// Delete implements objstore.Bucket.
func (f *Fault) Delete(ctx context.Context, key string) error {
	if err := f.before(ctx, OpDelete, key, diskDelete(key)); err != nil {
		return err
	}
	return f.inner.Delete(ctx, key)
}

// List implements objstore.Bucket.
func (f *Fault) List(ctx context.Context, prefix string) ([]objstore.ObjectInfo, error) {
	if err := f.before(ctx, OpList, prefix, nil); err != nil {
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
	if err := w.f.before(w.ctx, OpPut, w.key, diskWriterClose(w.key)); err != nil {
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
	if err := s.f.before(ctx, OpPut, "", diskNewSegment); err != nil {
		return nil, err
	}
	seg, err := s.inner.NewSegment(ctx, size)
	if err != nil {
		return nil, err
	}
	return &faultSegment{Segment: seg, f: s.f}, nil
}

func (s *faultSegmenter) ReuseSegment(ctx context.Context, key string) (objstore.Segment, error) {
	if err := s.f.before(ctx, OpPut, key, diskReuseSegment(key)); err != nil {
		return nil, err
	}
	seg, err := s.inner.ReuseSegment(ctx, key)
	if err != nil {
		return nil, err
	}
	return &faultSegment{Segment: seg, f: s.f}, nil
}

func (s *faultSegmenter) SyncPrefix(ctx context.Context, prefix string) error {
	if err := s.f.before(ctx, OpList, prefix, nil); err != nil {
		return err
	}
	return s.inner.SyncPrefix(ctx, prefix)
}

func (s *faultSegmenter) OpenSegment(ctx context.Context, key string) (objstore.SegmentReader, error) {
	if err := s.f.before(ctx, OpGet, key, nil); err != nil {
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
	if err := r.f.before(context.Background(), OpGet, r.key, nil); err != nil {
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
	if err := s.f.before(ctx, OpPut, key, diskPublish(key)); err != nil {
		return err
	}
	if err := s.Segment.Publish(ctx, key); err != nil {
		return err
	}
	s.key = key
	return s.f.after(key)
}

// name is the segment's name in the file driver's errors.
func (s *faultSegment) name() string {
	if s.key != "" {
		return s.key
	}
	return "(unpublished segment)"
}

func (s *faultSegment) WriteAt(p []byte, off int64) error {
	if err := s.f.diskOnly(OpPut, s.key, diskSegWrite("write", s.name(), "write")); err != nil {
		return err
	}
	return s.Segment.WriteAt(p, off)
}

// WriteAtSync fails as WriteAt would, then as Sync would; a failure of
// the sync part comes after the bytes were written (not made durable), as
// a failed fdatasync after a write would leave them.
func (s *faultSegment) WriteAtSync(p []byte, off int64) error {
	if err := s.f.diskOnly(OpPut, s.key, diskSegWrite("write", s.name(), "write")); err != nil {
		return err
	}
	if err := s.f.before(context.Background(), OpPut, s.key, diskSegWrite("sync", s.name(), "fdatasync")); err != nil {
		if werr := s.Segment.WriteAt(p, off); werr != nil {
			return werr
		}
		return err
	}
	if err := s.Segment.WriteAtSync(p, off); err != nil {
		return err
	}
	return s.f.after(s.key)
}

func (s *faultSegment) Sync() error {
	if err := s.f.before(context.Background(), OpPut, s.key, diskSegWrite("sync", s.name(), "fdatasync")); err != nil {
		return err
	}
	if err := s.Segment.Sync(); err != nil {
		return err
	}
	return s.f.after(s.key)
}
