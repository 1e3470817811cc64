package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/google/btree"
	"github.com/oklog/ulid/v2"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// Indexer observes every change to the tree, so that a layer above can keep
// derived in-memory indexes (for example jobs by priority). It is called
// with the engine's mutex held, for live changes, for their undo when a
// transaction function fails, and for every entry loaded or replayed at
// Open. It must not call back into the engine.
type Indexer interface {
	// Reset drops all derived state (recovery is starting over).
	Reset()
	// Apply observes key changing from old to new; nil means absent.
	Apply(key string, old, new []byte)
}

// A BulkIndexer is an Indexer that takes a snapshot's entries faster, or in
// less memory, as a batch: Open calls BeginBulk before it applies the
// entries of the snapshot it loads (all additions, in key order) and
// EndBulk after them, before it replays the WAL.
type BulkIndexer interface {
	Indexer
	BeginBulk()
	EndBulk()
}

// Options configure an Engine. Zero values mean the documented defaults.
type Options struct {
	// Bucket holds the store. Required. The engine closes it on Close.
	Bucket objstore.Bucket
	// Heartbeat is the owner-object interval for stores without an OS lock.
	// Stores with one (objstore.Locker: file://) ignore it: the lock keeps
	// other writers out, so they write no owner object and make no requests
	// while idle. Zero disables ownership checks: only for stores that
	// cannot be shared between processes (mem://).
	Heartbeat time.Duration
	// Takeover skips the liveness check of the current owner: the new
	// engine fences whoever is writing. It cannot take an OS lock held by
	// another process (Open still fails with ErrLocked).
	Takeover bool
	// SnapshotMinBytes: a snapshot is written once the WAL written since the
	// last one exceeds max(SnapshotMinBytes, size of the last snapshot).
	// Defaults to 16 MiB.
	SnapshotMinBytes int64
	// SnapshotMaxObjects: a snapshot is also written after this many WAL
	// objects, bounding recovery reads. Defaults to 2048.
	SnapshotMaxObjects int
	// WriteRetry is how long a transient object-store failure of one
	// request is retried before the call that made it fails: the writes and
	// reads of Open, large-value uploads and reads. It does not bound WAL
	// writes: the committer retries a transient failure (see retryLater)
	// until the write lands, and the store stays open meanwhile (see
	// Health). Defaults to 60s.
	WriteRetry time.Duration
	// AcceptTailLoss opens a store whose WAL ends below the sequence its
	// owner object says was durable (see TailLostError): the lost batches
	// are logged and given up, and this writer goes on from the log's end
	// (where open markers follow the loss, it fills the missing sequences
	// with markers of its own: see giveUpBuriedTail). It also opens a
	// store whose owner object is unreadable, without the check. Without
	// it Open refuses such stores.
	AcceptTailLoss bool
	// Addr and Secret, in cluster mode, are where this writer serves the
	// store's other processes and the secret their calls must carry: the
	// owner object carries both (see format.Owner), so that members find
	// and trust the writer through the store.
	Addr   string
	Secret []byte
	// Now is the clock of stall accounting (Health, StallTime). Defaults to
	// time.Now; tests inject a fake one.
	Now func() time.Time
	// Indexer, if set, observes every change.
	Indexer Indexer
	// Logger receives background errors (snapshot, garbage collection).
	// Defaults to slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.SnapshotMinBytes <= 0 {
		o.SnapshotMinBytes = 16 << 20
	}
	if o.SnapshotMaxObjects <= 0 {
		o.SnapshotMaxObjects = 2048
	}
	if o.WriteRetry <= 0 {
		o.WriteRetry = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// item is one entry of the tree: a key and its encoded value, stored in
// one allocation, the value right after the key. Sixteen bytes, where a
// string and a slice would take forty, and one allocation where they would
// take two: with millions of entries (a pending job is one), this is most
// of the engine's own memory per entry. A probe (see probe) points at a
// key alone.
//
// INVARIANT: an item in the tree owns its allocation, which nothing ever
// modifies; key() and val() alias it.
type item struct {
	p    *byte // first byte of the key (of the value if the key is empty)
	klen uint32
	vlen uint32
}

// newItem returns an item holding copies of key and val. Keys are bounded
// by the layers above and values by what a WAL frame holds
// (format.MaxFrame), both far below 4 GiB.
func newItem(key string, val []byte) item {
	if uint64(len(key)) > math.MaxUint32 || uint64(len(val)) > math.MaxUint32 {
		panic("engine: key or value over 4 GiB")
	}
	// At least one byte, so that even an empty key with an empty value has
	// a pointer: the zero item means "absent" (see val).
	buf := make([]byte, max(len(key)+len(val), 1))
	copy(buf, key)
	copy(buf[len(key):], val)
	return item{p: &buf[0], klen: uint32(len(key)), vlen: uint32(len(val))}
}

// probe returns an item for looking key up (or deleting it): it aliases
// key and has no value.
func probe(key string) item {
	return item{p: unsafe.StringData(key), klen: uint32(len(key))}
}

func (it item) key() string { return unsafe.String(it.p, it.klen) }

// val returns the value: nil for the zero item (what the tree returns for
// a missing key); never a pointer past the allocation's end.
func (it item) val() []byte {
	switch {
	case it.p == nil:
		return nil
	case it.vlen == 0:
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(it.p), it.klen)), it.vlen)
}

func itemLess(a, b item) bool { return a.key() < b.key() }

func newTree() *btree.BTreeG[item] { return btree.NewG(32, itemLess) }

// batch is one group commit: the transactions applied since the previous
// batch was sealed.
type batch struct {
	seq   uint64 // assigned when sealed
	gen   uint64 // creation order, to tell the newer of two batches
	muts  []format.Mutation
	txns  uint32
	freed []string // blob keys unreferenced by this batch; deleted once durable
	done  chan struct{}
	err   error                       // set before done is closed
	wait  func(context.Context) error // waitFor, for Apply's callers
}

var batchGen atomic.Uint64

func newBatch() *batch {
	b := &batch{gen: batchGen.Add(1), done: make(chan struct{})}
	b.wait = b.waitFor
	return b
}

// Engine is a single-writer transactional ordered key-value store whose state
// lives in memory and whose durability is a WAL of group-commit batches plus
// snapshots in a bucket. See the package documentation of queue for the
// correctness argument.
type Engine struct {
	// Immutable after Open.
	bucket   objstore.Bucket
	opts     Options
	writer   string  // random identity of this open
	epoch    uint64  // sequence number of this writer's (lowest) open marker
	markEnd  uint64  // sequence of its last open marker (see writeMarker)
	openMark uint64  // the highest sequence known durable at Open (the owner's mark; see fillHoles)
	readOnly bool    // opened by OpenReadOnly: never writes
	osLock   bool    // the bucket has an OS lock (objstore.Locker)
	seg      *segLog // the writer's WAL segments; nil if the bucket has none
	log      *slog.Logger
	bgCtx    context.Context
	bgStop   context.CancelFunc
	kick     chan struct{} // wakes the committer; buffered 1
	noLinger atomic.Bool   // the committer's linger is off (SetLinger)
	lingers  uint64        // lingers begun (see lingerLocked), guarded by mu: for tests
	bg       sync.WaitGroup
	loopWG   sync.WaitGroup    // the committer alone
	walBuf   []byte            // the committer's: the previous batch's encoding, reused
	idle     *time.Timer       // the committer's: see switchWhenIdle
	spare    []format.Mutation // the committer's: a durable batch's mutations, emptied for the next open batch
	sched    [2]metrics.Sample // the committer's: goroutines running and runnable (see othersIdle)
	swept    chan struct{}     // closed when the sweep at Open ends
	follow   readerFollow      // a reader's place in the WAL
	// marked is the durable sequence last recorded in the owner object
	// (stores with an OS lock; see recordMark).
	marked atomic.Uint64
	health *health // the committer's WAL writes

	// Transactions queued for the combiner (see Apply).
	amu        sync.Mutex
	applyQ     []*applyReq // guarded by amu
	applySpare []*applyReq // guarded by amu: the previous round's, emptied
	combining  bool        // guarded by amu: a caller is applying the queue

	mu sync.Mutex
	// Under mu: the scratch key of Tx.GetKey and Tx.DeleteKey, and the
	// Tx of every transaction (see applyLocked).
	kbuf []byte
	tx   Tx
	// Guarded by mu.
	tree     *btree.BTreeG[item]
	open     *batch // accepting transactions
	inflight *batch // sealed and being written; at most one
	// dirty maps each key changed by the open or in-flight batch to the
	// newest such batch, so reads wait only for batches they observed.
	dirty      map[string]*batch
	nextSeq    uint64 // the sequence the open batch will get
	durable    uint64 // highest sequence known durable
	err        error  // terminal: set once, fails every later call
	closing    bool
	holds      int // Holds not yet released: the committer seals no batch
	snapActive bool
	walBytes   int64 // WAL bytes since the last snapshot's sequence
	walObjects int
	lastSnap   int64 // bytes of the last snapshot
	blobSeq    uint64
	stats      Stats
	// collected is the sequence up to which WAL objects have been deleted
	// (0 until the first collection, which lists the bucket); prevSnapSeq
	// is the snapshot that collection kept.
	collected uint64
	// singles lists, on buckets with segments, the sequences this writer
	// wrote as WAL objects (the marker, batches that found no segment)
	// since the last collection: the only ones it has to delete.
	singles     []uint64
	prevSnapSeq uint64
	// undeleted lists garbage whose delete failed, retried at the next
	// collection.
	undeleted []string
	// snapFails counts the snapshot writes that failed in a row; none is
	// started before snapRetryAt (see snapBackoff).
	snapFails   int
	snapRetryAt time.Time
}

// Stats are engine counters.
type Stats struct {
	Batches      uint64 // WAL batches written by this engine (incl. marker)
	Txns         uint64 // transactions committed
	Mutations    uint64
	WALBytes     uint64
	Snapshots    uint64
	Keys         int
	DurableSeq   uint64
	Epoch        uint64
	RecoveredWAL int // WAL batches replayed at Open
	// SegmentBatches counts the batches written into WAL segments (the
	// rest of Batches were written as WAL objects).
	SegmentBatches uint64
	// WALWriteTime sums how long this engine's WAL batch writes took,
	// from the start of each write to its durability (retries included):
	// divided by the batches written since Open, their mean, the floor of
	// a commit's latency.
	WALWriteTime time.Duration
	// WALWrites counts the same writes by duration.
	WALWrites Durations
	// SegmentBytes counts the bytes of the WAL segments this engine staged
	// new (zero-filled: the preallocation); a collected segment staged
	// again writes none. SnapshotBytes counts the bytes of the snapshots it
	// wrote. Both are part of the bucket's bytes written, beside the WAL
	// batches (WALBytes).
	SegmentBytes  uint64
	SnapshotBytes uint64
}

// newEngine validates opts and returns an engine with empty state.
func newEngine(opts Options) (*Engine, error) {
	if opts.Bucket == nil {
		return nil, errors.New("engine: Options.Bucket is required")
	}
	opts.setDefaults()
	e := &Engine{
		bucket: opts.Bucket,
		opts:   opts,
		log:    opts.Logger,
		kick:   make(chan struct{}, 1),
		sched:  [2]metrics.Sample{{Name: "/sched/goroutines/running:goroutines"}, {Name: "/sched/goroutines/runnable:goroutines"}},
		tree:   newTree(),
		dirty:  map[string]*batch{},
	}
	e.health = newHealth(opts.Now, e.log)
	_, e.osLock = objstore.AsLocker(opts.Bucket)
	e.bgCtx, e.bgStop = context.WithCancel(context.Background())
	return e, nil
}

// beats reports whether this writer keeps an owner object: on bucket stores
// shared between processes, which have no OS lock.
func (e *Engine) beats() bool { return e.opts.Heartbeat > 0 && !e.osLock }

// hasOwner reports whether the store keeps an owner object: a heartbeat
// (beats), or only the durable sequence (stores with an OS lock).
func (e *Engine) hasOwner() bool { return e.beats() || e.osLock }

// Open recovers the store in opts.Bucket and makes this engine its writer.
func Open(ctx context.Context, opts Options) (*Engine, error) {
	e, err := newEngine(opts)
	if err != nil {
		return nil, err
	}
	e.writer = ulid.Make().String()
	e.open = newBatch()
	// Segments only where an OS lock keeps other writers out: appending in
	// place creates no object, so a successor's marker would not fence a
	// writer still appending (see Claim 2 of queue/doc.go).
	if sg, ok := objstore.AsSegmenter(e.bucket); ok && e.osLock {
		e.seg = newSegLog(sg, e.log)
	}
	if err := e.open1(ctx); err != nil {
		e.bgStop()
		return nil, err
	}
	if e.seg != nil {
		e.prepareSegment()
	}
	e.loopWG.Add(1)
	go e.commitLoop()
	if err := e.pruneEpochs(ctx); err != nil {
		e.Kill()
		return nil, err
	}
	if e.beats() {
		e.bg.Add(1)
		go e.heartbeatLoop()
	} else if e.osLock {
		e.bg.Add(1)
		go e.markLoop()
	}
	e.swept = make(chan struct{})
	e.bg.Add(1)
	go e.sweepBlobs()
	return e, nil
}

// Settled reports whether three kinds of a writer's background work have
// ended: the orphan-blob sweep Open starts (a List, and deletes if it finds
// orphans), the staging of the next WAL segment after a commit took the
// last, and (stores with an OS lock) recording the durable sequence in the
// owner object. It does not cover a snapshot or a deletion of freed blobs that a
// commit started. Tests that count an idle writer's requests poll it. A
// read-only engine has no such work: true.
func (e *Engine) Settled() bool {
	if e.readOnly {
		return true
	}
	select {
	case <-e.swept:
	default:
		return false
	}
	if e.osLock {
		e.mu.Lock()
		d := e.durable
		e.mu.Unlock()
		if e.marked.Load() < d {
			return false
		}
	}
	if e.seg == nil {
		return true
	}
	e.seg.mu.Lock()
	defer e.seg.mu.Unlock()
	return !e.seg.preparing
}

func (e *Engine) open1(ctx context.Context) error {
	if l, ok := objstore.AsLocker(e.bucket); ok {
		if err := l.Lock(); err != nil {
			if errors.Is(err, objstore.ErrLocked) {
				return fmt.Errorf("%w: %v", ErrLocked, err)
			}
			return err
		}
	}
	// The highest sequence known durable: the WAL must reach it (checkTail).
	// A bucket opener without takeover reads it while it checks liveness.
	var mark uint64
	var err error
	switch {
	case e.beats() && !e.opts.Takeover:
		mark, err = e.checkOwner(ctx)
	case e.hasOwner():
		mark, err = e.readMark(ctx)
	}
	if err != nil {
		return err
	}
	if e.seg != nil {
		// A writer that crashed may have left batches in the page cache,
		// not yet durable. This writer reads them and builds on them (its
		// marker goes after them), so they must not be lost to a power
		// failure after the marker lands: sync them first.
		if err := e.seg.sg.SyncPrefix(ctx, "wal/"); err != nil {
			return err
		}
	}
	first, last, err := e.writeMarker(ctx, mark)
	if err != nil {
		return err
	}
	e.epoch, e.markEnd, e.openMark = first, last, mark
	if e.beats() {
		// Name the new epoch in the owner object now, not after the
		// recovery below: openers that judged the old writer dead at the
		// same time (cluster members) look at it before they fence, and
		// would otherwise fence this one. It keeps the mark read above.
		if err := e.writeOwner(ctx, 0, false, mark); err != nil {
			return err
		}
	}
	// Recovery replays the WAL up to and including our markers.
	if err := e.recover(ctx); err != nil {
		e.withdrawMarkers(ctx, first, last, err)
		return err
	}
	e.nextSeq = last + 1
	e.durable = last
	e.stats.Batches = last - first + 1
	if e.beats() {
		if err := e.beat(ctx, 0, false); err != nil {
			return err
		}
	} else if e.osLock {
		if err := e.recordMark(ctx); err != nil {
			return err
		}
	}
	return nil
}

// withdrawMarkers deletes this writer's open markers, first .. last, after
// its recovery failed (cause), on a store with an OS lock, so that an Open
// that fails leaves the store as it found it: a refused store, opened
// again and again, keeps its WAL and its error (see queue/doc.go, claim 1).
//
// The markers go before recovery because on a bucket the WAL below them
// is final only once they land (a replaced writer may still be
// appending), and there they stay: they fence that writer, whose next
// write must fail. Under an OS lock nobody else can write: the lock keeps
// every other writer out, and the last holder's process is gone (its
// page-cache writes synced before our marker, see open1). So the marker
// fences no one, nothing was built on it (recovery failed; the owner
// object is only rewritten after recovery), and deleting it is safe. Not
// after ErrFenced: under a lock that would mean a writer the lock did not
// keep out, and its log is left alone. A delete that fails is logged: the
// marker stays, an empty batch, harmless to replay.
func (e *Engine) withdrawMarkers(ctx context.Context, first, last uint64, cause error) {
	if !e.osLock || e.readOnly || errors.Is(cause, ErrFenced) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.WriteRetry)
	defer cancel()
	for s := last + 1; s > first; s-- { // from the top: a marker left never stands above a hole
		if err := e.bucket.Delete(ctx, walKey(s-1)); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			e.log.Warn("stepwell: could not withdraw the open marker of an Open that failed; it stays in the WAL, an empty batch",
				"key", walKey(s-1), "err", err)
		}
	}
}

// Writer returns this engine's writer identity.
func (e *Engine) Writer() string { return e.writer }

// Epoch returns the sequence number of this engine's open marker.
func (e *Engine) Epoch() uint64 { return e.epoch }

// Err returns the terminal error, if the engine has failed or closed.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Keys = e.tree.Len()
	s.DurableSeq = e.durable
	s.Epoch = e.epoch
	if e.seg != nil {
		s.SegmentBytes = e.seg.zeroed.Load()
	}
	return s
}

// failLocked makes err the engine's terminal error and fails every
// transaction that is not yet durable.
//
// REQUIRES: e.mu held.
func (e *Engine) failLocked(err error) {
	if e.err != nil {
		return
	}
	e.err = err
	for _, b := range []*batch{e.inflight, e.open} {
		if b != nil {
			b.err = err
			close(b.done)
		}
	}
	e.inflight, e.open = nil, nil
	clear(e.dirty)
	e.bgStop()
	e.wake()
}

func (e *Engine) fail(err error) {
	e.mu.Lock()
	e.failLocked(err)
	e.mu.Unlock()
}

// Close flushes every accepted transaction, stops background work, marks the
// store free (bucket stores) and closes the bucket. It is safe to call more
// than once. If ctx ends while the store is stalled (see Health), Close stops
// waiting for the flush: callers still waiting get ErrOutcomeUnknown (their
// batch may or may not have landed), and so does Close.
func (e *Engine) Close(ctx context.Context) error {
	if e.readOnly {
		return e.closeReadOnly()
	}
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		e.loopWG.Wait()
		e.bg.Wait()
		return nil
	}
	e.closing = true
	failed := e.err
	e.mu.Unlock()
	e.wake()
	drainErr := e.drain(ctx)
	if drainErr != nil {
		failed = drainErr
	}
	e.mu.Lock()
	e.failLocked(ErrClosed)
	e.mu.Unlock()
	e.bg.Wait()
	if e.seg != nil {
		e.seg.close()
	}
	var err error
	switch {
	case failed != nil:
	case e.beats():
		err = e.release(ctx)
	case e.osLock:
		err = e.recordMark(ctx)
	}
	if cerr := e.bucket.Close(); err == nil {
		err = cerr
	}
	if drainErr != nil {
		return drainErr
	}
	if failed != nil && !errors.Is(failed, ErrClosed) {
		return failed
	}
	return err
}

// drain waits for the committer to write the open batch and exit. If ctx
// ends while the store is stalled, it fails the engine instead (which
// stops the write in flight) and returns that error.
func (e *Engine) drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { e.loopWG.Wait(); close(done) }()
	var tick <-chan time.Time
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			// A healthy store drains in a moment: give up only on a stalled
			// one, so that a done ctx does not drop what would land.
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			tick = t.C
			ctx = context.Background()
		case <-tick:
		}
		if tick != nil && !e.Health().Healthy {
			err := fmt.Errorf("%w: closed while the store was unreachable (%w)", ErrOutcomeUnknown, ErrClosed)
			e.fail(err)
			<-done
			return err
		}
	}
}

// Kill stops the engine as a crash would: nothing pending is flushed, the
// owner object is not released. For tests.
func (e *Engine) Kill() {
	e.mu.Lock()
	e.closing = true
	e.failLocked(errors.New("engine killed"))
	e.mu.Unlock()
	e.wake()
	e.loopWG.Wait()
	e.bg.Wait()
	if e.seg != nil {
		e.seg.close()
	}
	_ = e.bucket.Close()
}

func (e *Engine) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}
