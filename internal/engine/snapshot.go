package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/btree"
	"golang.org/x/sync/errgroup"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// maybeSnapshotLocked decides, as batch b is sealed, whether to snapshot the
// state as of b.seq. The tree clone is O(1) (copy-on-write), so commits are
// not stalled; the clone is serialized in the background once b is durable.
//
// REQUIRES: e.mu held; b has just been sealed, so the tree holds exactly the
// batches up to b.seq.
func (e *Engine) maybeSnapshotLocked(b *batch) *btree.BTreeG[item] {
	if e.snapActive || e.closing || time.Now().Before(e.snapRetryAt) {
		return nil
	}
	// By bytes: the WAL since the last snapshot outweighs the snapshot, so
	// snapshot writes cost at most as much as the WAL itself. The WAL's
	// bytes are its batches' bodies before compression (what a recovery
	// decodes and applies), so that compression leaves recovery's work
	// where it was. By objects:
	// many small batches make recovery slow (one GET each); but never more
	// often than every quarter of the snapshot's size, so that a large
	// state is not rewritten for a trickle of tiny batches.
	bySize := e.walBytes >= max(e.opts.SnapshotMinBytes, e.lastSnap)
	byCount := e.walObjects >= e.opts.SnapshotMaxObjects && e.walBytes >= e.lastSnap/4
	if !bySize && !byCount {
		return nil
	}
	e.snapActive = true
	return e.tree.Clone()
}

// Snapshot writes a snapshot of the current durable state now and collects
// what it supersedes, returning once both are done. For operators and tests.
func (e *Engine) Snapshot(ctx context.Context) error {
	if e.readOnly {
		return ErrReadOnly
	}
	for {
		e.mu.Lock()
		if err := e.usableLocked(); err != nil {
			e.mu.Unlock()
			return err
		}
		pending := e.pendingLocked()
		if e.snapActive || pending != nil {
			e.mu.Unlock()
			if pending != nil {
				if err := waitBatch(ctx, pending); err != nil {
					return err
				}
			} else if err := sleepBackoff(ctx, 0); err != nil {
				return err
			}
			continue
		}
		if e.prevSnapSeq == e.durable && e.durable > 0 {
			e.mu.Unlock()
			return nil // the newest snapshot already holds this state
		}
		// Quiescent: the tree is exactly the durable state.
		e.snapActive = true
		tree, seq := e.tree.Clone(), e.durable
		e.mu.Unlock()
		e.bg.Add(1)
		done := &batch{seq: seq, done: make(chan struct{})}
		close(done.done)
		return e.writeSnapshot(done, tree)
	}
}

// writeSnapshot writes snap/<b.seq> from tree once b is durable, then deletes
// the WAL objects and snapshots it supersedes.
//
// Crash safety: the snapshot object appears atomically (create-only), and
// only after it exists are older objects deleted; a crash at any point
// leaves either the old snapshot with its full WAL tail, or the new snapshot
// (plus leftovers that recovery ignores and the next collection deletes).
func (e *Engine) writeSnapshot(b *batch, tree *btree.BTreeG[item]) (err error) {
	defer e.bg.Done()
	ok := false
	var walBytes int64
	var walObjects int
	defer func() {
		e.mu.Lock()
		e.snapActive = false
		if !ok {
			// Try again at a later batch, after a backoff.
			e.walBytes += walBytes
			e.walObjects += walObjects
			e.snapFails++
			e.snapRetryAt = time.Now().Add(snapBackoff(e.snapFails))
		} else {
			e.snapFails, e.snapRetryAt = 0, time.Time{}
		}
		e.mu.Unlock()
	}()
	e.mu.Lock()
	walBytes, walObjects = e.walBytes, e.walObjects
	e.walBytes, e.walObjects = 0, 0
	e.mu.Unlock()

	ctx := e.bgCtx
	if err := waitBatch(ctx, b); err != nil {
		return err
	}
	key := snapKey(b.seq)
	size, decoded, err := e.encodeSnapshot(ctx, key, b.seq, tree)
	if err != nil {
		if ctx.Err() == nil {
			e.mu.Lock()
			retryIn := snapBackoff(e.snapFails + 1)
			e.mu.Unlock()
			e.log.Error("stepwell: writing snapshot failed; will retry", "key", key, "retry_in", retryIn.Round(time.Second), "err", err)
		}
		return err
	}
	ok = true
	e.mu.Lock()
	e.lastSnap = decoded // compared with the WAL's decoded bytes
	e.stats.Snapshots++
	e.stats.SnapshotBytes += uint64(size)
	e.mu.Unlock()
	e.collect(ctx, b.seq)
	return nil
}

// encodeSnapshot writes the snapshot of tree as of seq; it returns the
// bytes written and their size before compression.
func (e *Engine) encodeSnapshot(ctx context.Context, key string, seq uint64, tree *btree.BTreeG[item]) (size, decoded int64, err error) {
	w, err := e.bucket.NewWriter(ctx, key, true)
	if err != nil {
		return 0, 0, err
	}
	sw, err := format.NewSnapshotWriter(w, &format.SnapshotMeta{
		Seq: seq, Writer: e.writer, Epoch: e.epoch, UnixNano: time.Now().UnixNano(),
	})
	if err != nil {
		_ = w.Abort()
		return 0, 0, err
	}
	tree.Ascend(func(it item) bool {
		err = sw.Add(it.key(), it.val())
		return err == nil
	})
	if err == nil {
		size, err = sw.Finish()
	}
	if err != nil {
		_ = w.Abort()
		return 0, 0, err
	}
	if err := w.Close(); err != nil && !errors.Is(err, objstore.ErrExists) {
		return 0, 0, err
	}
	return size, sw.DecodedBytes(), nil
}

// collect deletes WAL objects at or below seq and snapshots below seq.
// Failures are logged: leftovers are harmless and collected next time.
//
// The first collection after Open lists the bucket, to find leftovers of
// earlier writers; later ones delete the known range this engine wrote
// since the previous collection, without listing.
func (e *Engine) collect(ctx context.Context, seq uint64) {
	e.mu.Lock()
	from, prevSnap := e.collected, e.prevSnapSeq
	e.collected, e.prevSnapSeq = seq, seq
	singles := e.singles
	if e.seg != nil {
		// Keep those above seq for the next collection.
		i := 0
		for i < len(singles) && singles[i] <= seq {
			i++
		}
		singles, e.singles = singles[:i], slices.Clone(singles[i:])
	}
	e.mu.Unlock()
	if from > 0 {
		var doomed []string
		if e.seg != nil {
			for _, s := range singles {
				if s > from {
					doomed = append(doomed, walKey(s))
				}
			}
		} else {
			for s := from + 1; s <= seq; s++ {
				doomed = append(doomed, walKey(s))
			}
		}
		doomed = e.withoutMarkers(doomed)
		if prevSnap < seq { // never the snapshot just written
			doomed = append(doomed, snapKey(prevSnap))
		}
		if e.seg != nil {
			doomed = append(doomed, e.seg.collect(seq)...)
		}
		e.deleteGarbage(ctx, doomed)
		return
	}
	var doomed []string
	for _, p := range []struct {
		prefix string
		keep   func(uint64) bool
	}{
		{"wal/", func(s uint64) bool { return s > seq }},
		{"snap/", func(s uint64) bool { return s >= seq }},
	} {
		objs, err := e.bucket.List(ctx, p.prefix)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("stepwell: listing for garbage collection failed", "prefix", p.prefix, "err", err)
			}
			return
		}
		for _, o := range objs {
			if s, ok := parseSeqKey(p.prefix, o.Key); ok && !p.keep(s) {
				doomed = append(doomed, o.Key)
			}
			// Earlier writers' segments end below this writer's marker,
			// and seq is above it. One starting at the marker's sequence
			// holds no record (else the marker would have gone after it):
			// its writer published it and died before its first record.
			if s, ok := parseSegKey(o.Key); ok && s <= e.epoch {
				doomed = append(doomed, o.Key)
			}
		}
	}
	if e.seg != nil {
		doomed = append(doomed, e.seg.collect(seq)...)
	}
	e.deleteGarbage(ctx, e.withoutMarkers(doomed))
}

// withoutMarkers drops the WAL keys of open markers that must be kept (see
// epochPrefix).
func (e *Engine) withoutMarkers(keys []string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := keys[:0]
	for _, k := range keys {
		if s, ok := parseSeqKey("wal/", k); ok && e.tree.Has(probe(epochKey(s))) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// pruneEpochs forgets the open markers no replaced writer can write next,
// and those of all but the keepEpochs writers that opened last, letting
// collection delete their WAL objects.
//
// A writer's next sequence follows what it wrote last: a batch (which has
// no epoch key), or the last marker of the range it won. So a marker that
// follows a marker of the same writer (its epoch key names the writer) is
// nobody's next sequence: of a run of one writer's markers (a range, or
// the holes a new writer filled, see fillHoles) only the first is kept,
// and this writer's own epoch. An opener's marker writes land out of order,
// so an object collected mid-run may yet be won by a racing opener's late
// write; such an opener finds the snapshot that preceded the collection
// above its markers, and fails (see recoverOnce).
func (e *Engine) pruneEpochs(ctx context.Context) error {
	return e.Update(ctx, func(tx *Tx) error {
		// This writer's own markers above its epoch are a run after it:
		// only the lowest is where a replaced writer would write next
		// (see writeMarker).
		type start struct{ key, writer string }
		var starts []start
		var inRun []string
		var prev uint64
		var prevWriter []byte
		tx.Ascend(epochPrefix, "", func(k string, v []byte) bool {
			s, ok := parseSeqKey(epochPrefix, k)
			if ok && s != e.epoch && prevWriter != nil && s == prev+1 && bytes.Equal(v, prevWriter) {
				inRun = append(inRun, k)
			} else {
				starts = append(starts, start{k, string(v)})
			}
			prev, prevWriter = s, bytes.Clone(v)
			return true
		})
		for _, k := range inRun {
			tx.Delete(k)
		}
		// The run starts of the keepEpochs writers that opened last (by
		// their newest key): a count of keys would let one writer's
		// fillers, alternating with a dead opener's markers, push out
		// the fence of a writer it replaced at once.
		newest := map[string]bool{}
		for i := len(starts) - 1; i >= 0 && len(newest) < keepEpochs; i-- {
			newest[starts[i].writer] = true
		}
		for _, st := range starts {
			if !newest[st.writer] {
				tx.Delete(st.key)
			}
		}
		return nil
	})
}

// deleteKeys deletes keys, 8 at a time, and returns those it could not
// delete (logged; a missing key counts as deleted).
func (e *Engine) deleteKeys(ctx context.Context, keys []string) (failed []string) {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, k := range keys {
		g.Go(func() error {
			err := e.bucket.Delete(gctx, k)
			if err != nil && !errors.Is(err, objstore.ErrNotFound) {
				if gctx.Err() == nil {
					e.log.Warn("stepwell: delete failed; will retry at a later collection", "key", k, "err", err)
				}
				mu.Lock()
				failed = append(failed, k)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return failed
}

// deleteGarbage deletes WAL objects, segments and snapshots that a
// durable snapshot made garbage, with those whose delete failed at an
// earlier collection, and keeps the failures for the next one.
func (e *Engine) deleteGarbage(ctx context.Context, doomed []string) {
	e.mu.Lock()
	doomed = append(doomed, e.undeleted...)
	e.undeleted = nil
	e.mu.Unlock()
	slices.Sort(doomed)
	failed := e.deleteKeys(ctx, slices.Compact(doomed))
	e.mu.Lock()
	e.undeleted = append(e.undeleted, failed...)
	if len(e.undeleted) > maxUndeleted {
		// Deletes keep failing (a policy denying them, an outage): stop
		// carrying them, and have the next collection list the bucket
		// instead, which finds every leftover.
		e.undeleted, e.collected = nil, 0
	}
	e.mu.Unlock()
}

// snapBackoff is how long to wait before the next snapshot after fails
// failed ones in a row: 1s doubling up to 5 minutes, with jitter (the
// result is in [d/2, d]).
func snapBackoff(fails int) time.Duration {
	d := min(time.Second<<min(fails-1, 9), 5*time.Minute)
	return d/2 + rand.N(d/2+1)
}

// maxUndeleted bounds the failed deletes kept for the next collection.
const maxUndeleted = 1024
