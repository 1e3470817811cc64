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

// local is the single-process backend: this process holds the state and
// is the store's writer (or, opened WithReadOnly, reads it). In cluster
// mode it is also the writer's side, serving the members
// (cluster_writer.go). backend.go lists every backend.
//
// The package's files follow the life of a job: enqueue.go, claim.go,
// lease.go, settle.go, reaper.go, inspect.go; kv.go is the key-value
// space and commit.go the stages of a transaction. Cluster mode is in the
// cluster_*.go files, described in CLUSTER.md.
//
// # Lock order
//
// A goroutine that holds one of these may take only those below it:
//
//	registry (Open, Close)
//	clustered.mu (the role: which backend is current)
//	the engine's lock (inside Apply, Update, View: the index, ix)
//	slotTable.smu (the Work loops' slots), then slots.mu
//	local.lmu (leases)
//	memberSet.mu (members' pending events)
//	remote.bmu, batcher.mu (commits, reads and renewals waiting for a call), remote.cmu (a member's claims)
//	watchSet.mu (key watches, watch.go)
//
// Nothing calls into the engine, or blocks on I/O, while holding lmu,
// smu or a memberSet's, remote's or slots' lock. A claim's watchers
// (claimWatch) are told with lmu or remote.cmu held: they only cancel a
// context. A renewer's lock (a Work loop's lease renewals) is taken with
// none of these held, and takes none.
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
	// serving: the writer serves its members (see serveAdopted); until
	// then no adopted claim expires. Guarded by lmu.
	serving bool

	slotTable // the Work loops' slots

	members memberSet // cluster members holding claims (cluster mode)

	watches *watchSet // key watches (watch.go)

	stop chan struct{}
	wg   sync.WaitGroup
}

// testHookBucket, when set by a test, wraps the bucket of every store
// opened (to inject faults).
var testHookBucket func(objstore.Bucket) objstore.Bucket

// openLocal opens the store at rawURL. ws is its key watches (nil: new
// ones; a clustered store's outlive each backend).
func openLocal(ctx context.Context, rawURL string, o options, ws *watchSet) (*local, error) {
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
		leases: map[string]*lease{}, members: memberSet{closing: make(chan struct{})}, stop: make(chan struct{}),
		watches: ws}
	if l.watches == nil {
		l.watches = newWatchSet()
	}
	l.nextToken.Store(uint64(time.Now().UnixNano()))
	heartbeat := o.heartbeat
	if u.Scheme == "mem" {
		heartbeat = 0 // a memory store cannot be shared between processes
	}
	if o.readOnly {
		// The heartbeat tells the reader that the store has an owner
		// object, whose durable sequence the log must reach.
		eng, err := engine.OpenReadOnly(ctx, engine.Options{Bucket: counting, Heartbeat: heartbeat, Logger: o.logger, Indexer: l.ix,
			WriteRetry: o.writeRetry})
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

// adopt confirms the claims of this process's running jobs: a writer that
// took over has the claims of the state already (see adoptClaim).
func (l *local) adopt(refs []claimRef) { l.confirmHeld(refs) }
