package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// The owner object is how bucket stores (which have no OS lock) tell whether
// a writer is live: the writer rewrites it every Heartbeat interval with an
// incremented beat counter. An opener that finds it compares two reads taken
// a few intervals apart: if the bytes changed, someone is beating, so the
// store is locked. No clocks are compared, so clock skew between machines
// cannot make a live writer look dead. Safety never depends on this check:
// the WAL sequence fences a writer that was wrongly judged dead. Stores with
// an OS lock (file://) have no owner object: the lock already keeps a second
// writer out, and an idle writer makes no requests (see beats), except at
// most one switch of a nearly full WAL segment 2 ms after its last commit
// under light load (see segLog.rotateIdle).
const ownerKey = "owner"

// livenessWindow is how long an opener watches the owner object.
func (e *Engine) livenessWindow() time.Duration {
	return 2*e.opts.Heartbeat + e.opts.Heartbeat/2
}

// checkOwner returns ErrLocked if the owner object shows a live writer;
// otherwise the durable sequence it records (see readMark), from the last
// read, so that Open need not read it again. A stale owner object that
// does not decode is refused (see unreadableOwner); one that changed
// while watched is a live writer's, whatever the bytes first read.
func (e *Engine) checkOwner(ctx context.Context) (mark uint64, err error) {
	first, err := e.bucket.Get(ctx, ownerKey)
	if errors.Is(err, objstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if o, err := format.DecodeOwner(first); err == nil && o.Closed {
		return o.Durable, nil
	}
	t := time.NewTimer(e.livenessWindow())
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	second, err := e.bucket.Get(ctx, ownerKey)
	if errors.Is(err, objstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	o, derr := format.DecodeOwner(second)
	if bytes.Equal(first, second) || derr == nil && o.Closed {
		// Stale (its writer stopped beating) or released.
		if derr != nil {
			return 0, e.unreadableOwner(derr)
		}
		return o.Durable, nil
	}
	return 0, fmt.Errorf("%w: its heartbeat is live (open with takeover to fence it)", ErrLocked)
}

// beat writes the owner object: heartbeat n, and the durable sequence.
func (e *Engine) beat(ctx context.Context, n uint64, closed bool) error {
	e.mu.Lock()
	d := e.durable
	e.mu.Unlock()
	return e.writeOwner(ctx, n, closed, d)
}

func (e *Engine) writeOwner(ctx context.Context, n uint64, closed bool, durable uint64) error {
	data, err := format.EncodeOwner(&format.Owner{Writer: e.writer, Epoch: e.epoch, Beat: n, Closed: closed, Durable: durable,
		Addr: e.opts.Addr, Secret: e.opts.Secret})
	if err != nil {
		return err
	}
	return e.bucket.Put(ctx, ownerKey, data, false)
}

// ReadOwner returns the store's owner object, or nil if it has none: who
// writes the store, how far its log reached, and in cluster mode where it
// serves and the secret of its epoch.
func ReadOwner(ctx context.Context, b objstore.Bucket) (*format.Owner, error) {
	data, err := b.Get(ctx, ownerKey)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	o, err := format.DecodeOwner(data)
	if err != nil {
		return nil, &CorruptionError{Key: ownerKey, Err: err}
	}
	return o, nil
}

// HasStore reports whether b holds a store's own objects: an owner object
// that decodes (see ReadOwner), a WAL object or segment, or a snapshot.
// Other objects do not count (a directory of other files, or one that
// holds a store in a subdirectory, holds none). Every writer's Open writes
// a WAL object, and collection deletes WAL objects only below a snapshot,
// so a store that a writer opened holds one of them. It lists only where
// they can be (sequences are 20 digits, the first '0' or '1'), so a bucket
// or directory of many other objects is not walked; it writes nothing. A
// bucket that does not exist holds none.
func HasStore(ctx context.Context, b objstore.Bucket) (bool, error) {
	own, err := ReadOwner(ctx, b)
	var ce *CorruptionError
	switch {
	case errors.As(err, &ce): // an object named "owner", not a store's
	case err != nil:
		return false, err
	case own != nil:
		return true, nil
	}
	for _, prefix := range []string{"wal/0", "snap/0", "wal/1", "snap/1"} {
		objs, err := b.List(ctx, prefix)
		if errors.Is(err, objstore.ErrNotFound) { // no such bucket
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, o := range objs {
			_, wal := parseSeqKey("wal/", o.Key)
			_, seg := parseSegKey(o.Key)
			_, snap := parseSeqKey("snap/", o.Key)
			if wal || seg || snap {
				return true, nil
			}
		}
	}
	return false, nil
}

// ownedByNewer reports whether the owner object names a writer with a newer
// epoch than ours (a takeover happened).
func (e *Engine) ownedByNewer(ctx context.Context) (bool, error) {
	data, err := e.bucket.Get(ctx, ownerKey)
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	o, err := format.DecodeOwner(data)
	if err != nil {
		return false, &CorruptionError{Key: ownerKey, Err: err}
	}
	return o.Epoch > e.epoch, nil
}

// nextSeqTaken reports whether the WAL holds a batch another writer wrote
// at the sequence this one would write next. When this writer is idle,
// that is exactly where a writer that took over put its open marker:
// create-only, never rewritten, and kept while its epoch key is (the 64
// newest opens; see pruneEpochs). An object there that is not a batch
// counts too: our write of that sequence would fail on it just the same.
func (e *Engine) nextSeqTaken(ctx context.Context) (bool, error) {
	e.mu.Lock()
	next := e.nextSeq
	e.mu.Unlock()
	data, err := e.bucket.Get(ctx, walKey(next))
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	b, err := format.DecodeBatch(data)
	return err != nil || b.Writer != e.writer, nil // ours: a commit raced the check
}

// heartbeatLoop rewrites the owner object every interval and, every third
// beat, checks that no newer writer has taken over (an idle fenced writer
// would otherwise never learn of it, since it makes no WAL writes). The
// checks alternate between two signs of a takeover:
//   - the owner object names a newer epoch. Both writers keep rewriting
//     it, so this check can miss: when the store's latency nears the
//     interval, every read may come right after our own write.
//   - the WAL holds another writer's batch at our next sequence
//     (nextSeqTaken), which nothing overwrites. This one misses only once
//     64 more writers have opened the store since (see pruneEpochs: an
//     Open whose markers landed counts, even if it died or failed).
func (e *Engine) heartbeatLoop() {
	defer e.bg.Done()
	ctx := e.bgCtx
	tick := time.NewTicker(e.opts.Heartbeat)
	defer tick.Stop()
	var warn rateLog
	for n := uint64(1); ; n++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		if n%3 == 0 {
			check, what := e.ownedByNewer, "the owner object"
			if n%6 == 0 {
				check, what = e.nextSeqTaken, "the next WAL batch"
			}
			newer, err := check(ctx)
			if newer {
				e.fail(fmt.Errorf("%w: a newer writer owns the store", ErrFenced))
				return
			}
			if err != nil && ctx.Err() == nil {
				warn.warn(e.log, time.Now(), "stepwell: checking for a newer writer failed", "read", what, "err", err)
			}
		}
		if err := e.beat(ctx, n, false); err != nil && ctx.Err() == nil {
			warn.warn(e.log, time.Now(), "stepwell: heartbeat write failed", "err", err)
		}
	}
}

// release marks the store free on a clean Close, unless a newer writer owns
// it. The owner object alone cannot tell: it may hold our own last beat,
// written over a newer writer's, and marking the store free then would let
// the next opener skip the liveness check and fence that writer. So the
// WAL at our next sequence is checked too.
func (e *Engine) release(ctx context.Context) error {
	newer, err := e.ownedByNewer(ctx)
	if err != nil || newer {
		return nil
	}
	if taken, err := e.nextSeqTaken(ctx); err != nil || taken {
		return nil
	}
	return e.beat(ctx, 0, true)
}

// rateLog logs a background loop's failures at WARN, at most one line per
// warnEvery: during a store outage the heartbeat fails at every beat, and
// the WAL writer's own warning already says the store is down. Each line
// counts the failures it stands for. Not safe for concurrent use.
type rateLog struct {
	last       time.Time
	suppressed int
}

func (r *rateLog) warn(log *slog.Logger, now time.Time, msg string, args ...any) {
	if !r.last.IsZero() && now.Sub(r.last) < warnEvery {
		r.suppressed++
		return
	}
	log.Warn(msg, append(args, "failures_since_last_warning", r.suppressed+1)...)
	r.last, r.suppressed = now, 0
}
