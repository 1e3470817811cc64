package queue

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
)

// Queue is an open store: a durable job queue and key-value space whose whole
// state lives in a bucket. It is safe for concurrent use. Within one
// process, every Open of the same store shares one writer (see Open).
type Queue struct {
	url  string
	opts options
	be   backend
	sh   *shared

	mu     sync.Mutex
	closed bool
}

// backend is the narrow interface between the public Queue and the engine
// that holds the state. Requests and results are plain values so that a
// remote writer can implement it later without changing the public API.
type backend interface {
	commit(ctx context.Context, ops []txnOp, o options) (TxnResult, error)
	get(ctx context.Context, key string) ([]byte, error)
	scan(ctx context.Context, prefix, after string, limit int) ([]KV, bool, error)
	// claim and claimWait claim up to n jobs; with s, only as many as they
	// can take slots of s for.
	claim(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error)
	claimWait(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error)
	// addSlots makes a Work loop's slots available to dispatched enqueues;
	// removeSlots withdraws them and stops further takes.
	addSlots(s *slots)
	removeSlots(s *slots)
	renew(id string, token uint64, o options) error
	watch(id string, token uint64) (lost, cancel <-chan struct{}, cause func() error)
	stats(ctx context.Context, queue string) (Stats, error)
	queues(ctx context.Context) ([]string, error)
	getJob(ctx context.Context, id string) (*Job, error)
	deadJobs(ctx context.Context, queue, after string, limit int) ([]*Job, string, error)
	requeueDead(ctx context.Context, id string) error
	refresh(ctx context.Context) error
	storageStats() StorageStats
	health() Health
	// heldClaims lists the claims this process holds; adopt takes over
	// such a list from the backend it replaces (cluster mode: a role
	// change keeps the claims of running jobs).
	heldClaims() []claimRef
	adopt(refs []claimRef)
	err() error
	close(ctx context.Context) error
}

// shared is one open store in this process, shared by every Queue handle
// opened on it.
type shared struct {
	key  string
	be   backend
	refs int
}

var registry = struct {
	sync.Mutex
	m map[string]*shared
}{m: map[string]*shared{}}

// Open opens the store at rawURL and makes this process its writer.
//
// Store URLs:
//
//	mem://NAME                     in-process memory; the same NAME is the
//	                               same store for the life of the process
//	file:///ABS/DIR                local disk, fsynced; an OS lock on DIR
//	                               keeps other processes out
//	s3://BUCKET?prefix=P/&region=R[&endpoint=URL&use_path_style=true]
//	gs://BUCKET?prefix=P/
//	azblob://CONTAINER?prefix=P/
//
// mem:// and file:// are built in. The cloud schemes need their driver:
// import _ "github.com/stepwell/stepwell/queue/s3" (or queue/gcs,
// queue/azblob), whose documentation lists the URL parameters. Without it
// Open fails with an error wrapping ErrInvalidURL that names the import.
//
// Within one process, opening a store that is already open returns another
// handle on the same writer (its Option values for queue defaults apply to
// the new handle; store-level options of the first Open stay in force). The
// store is closed when the last handle is closed.
//
// Across processes only one writer may be live. A second process gets
// ErrStoreLocked, unless it passes WithTakeover on a bucket store, which
// fences the first writer.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Queue, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	key, err := objstore.Canonical(rawURL)
	if err != nil {
		return nil, err
	}
	if o.readOnly {
		be, err := openLocal(ctx, rawURL, o)
		if err != nil {
			return nil, mapErr(err)
		}
		return &Queue{url: rawURL, opts: o, be: be, sh: &shared{be: be, refs: 1}}, nil
	}
	registry.Lock()
	defer registry.Unlock()
	if sh := registry.m[key]; sh != nil && sh.be.err() == nil && !o.takeover {
		sh.refs++
		return &Queue{url: rawURL, opts: o, be: sh.be, sh: sh}, nil
	}
	var be backend
	if o.cluster != nil {
		be, err = openClustered(ctx, rawURL, o)
	} else {
		be, err = openLocal(ctx, rawURL, o)
	}
	if err != nil {
		return nil, mapErr(err)
	}
	sh := &shared{key: key, be: be, refs: 1}
	registry.m[key] = sh
	return &Queue{url: rawURL, opts: o, be: be, sh: sh}, nil
}

// Close releases this handle. When it is the last handle on its store, every
// accepted transaction is flushed, background work stops and the store is
// released for other processes. Close is safe to call more than once. If
// ctx ends while the store does not answer (see Health), Close stops
// waiting for the flush and returns ErrOutcomeUnknown, as do the calls
// still waiting for their transactions.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	registry.Lock()
	q.sh.refs--
	last := q.sh.refs == 0
	if last && registry.m[q.sh.key] == q.sh {
		delete(registry.m, q.sh.key)
	}
	registry.Unlock()
	if !last {
		return nil
	}
	return mapErr(q.be.close(ctx))
}

// checkOpen returns ErrClosed for a closed handle.
func (q *Queue) checkOpen() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	return nil
}

// Refresh brings a Queue opened WithReadOnly up to date with what the
// writer has committed since. It reads what was written since the last
// Refresh: new WAL objects, or on file:// the new records of the WAL
// segment being written. Concurrent calls run one at a time. On a writable
// Queue it does nothing.
func (q *Queue) Refresh(ctx context.Context) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	return mapErr(q.be.refresh(ctx))
}

// Err returns why the store stopped working for good, or nil while it
// works (or waits out an outage: see Health). Only these are final:
// ErrFenced (another writer took over), a CorruptionError, a WriteError
// (an error retrying cannot fix) and ErrClosed.
func (q *Queue) Err() error { return mapErr(q.be.err()) }

// Health says whether the store answers the writer. While it does not (a
// WAL write keeps failing with a transient error, or has been in flight
// for over a second), commits wait and the writer retries with backoff,
// logging a warning at most every 30s; no new jobs are claimed; leases do
// not run out; and once the store answers, everything resumes by itself.
// An outage of any length closes nothing (see Err for what does).
type Health struct {
	// Healthy is false while the store is stalled.
	Healthy bool
	// Since is when Healthy last changed: when the stall began, or when
	// the last one ended (the Open time if none).
	Since time.Time
	// LastError is the last failed WAL write attempt's error (kept after
	// the store heals); nil if none failed since Open.
	LastError error
	// Stalled is how long the current stall has lasted (0 when healthy).
	Stalled time.Duration
}

// Health reports whether the store answers this process's writes. A
// read-only Queue, which writes nothing, is always healthy.
func (q *Queue) Health() Health { return q.be.health() }

// StorageStats counts the object-store requests this process has made on
// the store since it was opened, and the engine's work.
type StorageStats struct {
	Puts, Gets, Lists, Deletes, Heads int64
	BytesWritten, BytesRead           int64

	WALBatches uint64 // WAL batches written (including the open marker)
	// WALSegmentBatches counts the WAL batches written as records of WAL
	// segments (file:// stores) rather than as objects of their own.
	WALSegmentBatches uint64
	Transactions      uint64 // transactions committed
	Mutations         uint64 // key changes committed
	WALBytes          uint64
	Snapshots         uint64 // snapshots written
	Keys              int    // keys in the state (all spaces)
	// WALWriteTime sums how long WAL batch writes took, each from its start
	// to its durability: WALWriteTime / (WALBatches - 1, the open marker)
	// is the mean commit latency.
	WALWriteTime time.Duration
	// Health is the store's health, as Queue.Health reports it.
	Health Health
	// ClusterCalls counts the calls this process made to the cluster's
	// writer as a member (see WithCluster). A member makes no object-store
	// requests of its own: the counts above are zero for it.
	ClusterCalls int64
}

// StorageStats returns the store's request and commit counters.
func (q *Queue) StorageStats() StorageStats { return q.be.storageStats() }

// local is the in-process backend: this process is the writer.
type local struct {
	eng      *engine.Engine
	counting *objstore.Counting
	opts     options // of the first Open: store-level settings, reaper defaults
	now      func() time.Time
	// ix is guarded by the engine's mutex (see index.go).
	ix        *jobIndex
	nextToken atomic.Uint64

	lmu    sync.Mutex
	leases map[string]*lease // guarded by lmu

	smu   sync.Mutex
	slots map[string][]*slots // Work loops by queue, guarded by smu

	members memberSet // cluster members holding claims (cluster mode)

	stop chan struct{}
	wg   sync.WaitGroup
}

// testHookBucket, when set by a test, wraps the bucket of every store
// opened (to inject faults).
var testHookBucket func(objstore.Bucket) objstore.Bucket

func openLocal(ctx context.Context, rawURL string, o options) (*local, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	bucket, err := objstore.Open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	if testHookBucket != nil {
		bucket = testHookBucket(bucket)
	}
	counting := objstore.NewCounting(bucket)
	l := &local{counting: counting, opts: o, now: o.now, ix: newJobIndex(o.now),
		leases: map[string]*lease{}, stop: make(chan struct{})}
	l.nextToken.Store(uint64(time.Now().UnixNano()))
	heartbeat := o.heartbeat
	if u.Scheme == "mem" {
		heartbeat = 0 // a memory store cannot be shared between processes
	}
	if o.readOnly {
		// The heartbeat tells the reader that the store has an owner
		// object, whose durable sequence the log must reach.
		eng, err := engine.OpenReadOnly(ctx, engine.Options{Bucket: counting, Heartbeat: heartbeat, Logger: o.logger, Indexer: l.ix})
		if err != nil {
			_ = bucket.Close()
			return nil, err
		}
		l.eng = eng
		return l, nil
	}
	eng, err := engine.Open(ctx, engine.Options{
		Bucket:             counting,
		Heartbeat:          heartbeat,
		Takeover:           o.takeover,
		AcceptTailLoss:     o.acceptTailLoss,
		SnapshotMinBytes:   o.snapshotBytes,
		SnapshotMaxObjects: o.snapshotObjs,
		WriteRetry:         o.writeRetry,
		Now:                o.now,
		Logger:             o.logger,
		Indexer:            l.ix,
		Addr:               o.clusterAddr,
		Secret:             o.clusterSecret,
	})
	if err != nil {
		_ = bucket.Close()
		return nil, err
	}
	l.eng = eng
	if l.ix.corrupt != nil {
		eng.Kill()
		return nil, l.ix.corrupt
	}
	if err := l.requeueClaimed(ctx); err != nil {
		eng.Close(ctx)
		return nil, err
	}
	l.wg.Add(1)
	go l.reaperLoop()
	return l, nil
}

func (l *local) err() error { return l.eng.Err() }

func (l *local) refresh(ctx context.Context) error {
	if !l.opts.readOnly {
		return nil
	}
	return l.eng.Refresh(ctx)
}

func (l *local) close(ctx context.Context) error {
	if !l.opts.readOnly {
		close(l.stop)
		l.wg.Wait()
	}
	err := l.eng.Close(ctx)
	if errors.Is(err, engine.ErrClosed) && !errors.Is(err, engine.ErrOutcomeUnknown) {
		return nil
	}
	return err
}

func (l *local) storageStats() StorageStats {
	c := l.counting.Counts()
	s := l.eng.Stats()
	return StorageStats{
		Puts: c.Puts, Gets: c.Gets, Lists: c.Lists, Deletes: c.Deletes, Heads: c.Heads,
		BytesWritten: c.BytesWritten, BytesRead: c.BytesRead,
		WALBatches: s.Batches, WALSegmentBatches: s.SegmentBatches, Transactions: s.Txns, Mutations: s.Mutations,
		WALBytes: s.WALBytes, Snapshots: s.Snapshots, Keys: s.Keys, WALWriteTime: s.WALWriteTime, Health: l.health(),
	}
}

func (l *local) heldClaims() []claimRef {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	var refs []claimRef
	for id, ls := range l.leases {
		if ls.holder == "" {
			refs = append(refs, claimRef{ID: id, Token: ls.token, Queue: ls.queue})
		}
	}
	return refs
}

// adopt does nothing: a writer that took over has the claims of the
// state already (see adoptClaim).
func (l *local) adopt([]claimRef) {}

func (l *local) health() Health {
	h := l.eng.Health()
	return Health{Healthy: h.Healthy, Since: h.Since, LastError: h.LastError, Stalled: h.Stalled}
}
