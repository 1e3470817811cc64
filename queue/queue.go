package queue

import (
	"context"
	"sync"
	"sync/atomic"

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

	closed atomic.Bool // set once, by Close

	// wmu guards watching: the key watches made through this handle and
	// not yet cancelled, which Close fires (see watchKey).
	wmu      sync.Mutex
	watching map[*keyWatch]struct{}
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
// Across processes only one writer may be live. With WithCluster, every
// other process that opens the store in cluster mode becomes a member
// that forwards its operations to the writer, and takes over when the
// writer dies (see "Cluster mode" in the package documentation). Without
// it, a second process gets ErrStoreLocked, unless it passes WithTakeover
// on a bucket store, which fences the first writer. A cluster-mode Open
// waits (until ctx ends) for a writer that cannot be reached yet, and
// fails with ErrStoreLocked if the live writer is not in cluster mode.
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
		be, err := openLocal(ctx, rawURL, o, nil)
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
		be, err = openLocal(ctx, rawURL, o, nil)
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
// still waiting for their transactions. In cluster mode, a writer that
// another fenced is a member (see Role), and its Close returns nil.
func (q *Queue) Close(ctx context.Context) error {
	if q.closed.Swap(true) {
		return nil
	}
	q.fireWatching()
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
	if q.closed.Load() {
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
