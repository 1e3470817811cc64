package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// errRaced means an object vanished while recovery read it: an earlier
// writer's garbage collection ran concurrently. Recovery starts over.
var errRaced = errors.New("object deleted during recovery")

// Fencing a busy writer. A new writer claims the WAL with open-marker
// batches written create-only just above the tip it listed. One marker at
// top+1 loses, every time, to a writer that commits faster than a List and
// a PUT take: that writer takes top+1 first. So when a live writer may be
// appending (a takeover, or a retry after a lost race), the new writer
// writes a range of markers, top+1 .. top+width, in parallel, and widens
// the range on every lost attempt.
//
// Why a range is safe: the old writer writes its sequences in order, one at
// a time, and stops at the first one it finds taken (claim 2). So once every
// marker write has been resolved, the range holds a prefix of the old
// writer's batches followed by a suffix of ours: if we won sequence s, the
// old writer can never write any sequence above s. The WAL below our lowest
// marker s0 is then final and gapless, our markers s0 .. top+width are
// gapless too, and the old writer's next sequence is s0, which our marker
// holds (and its epoch key protects from collection, see epochPrefix). If
// what we won is not such a suffix (two new writers raced each other), or
// we won nothing, we list again and retry with a wider range. Markers we
// wrote but could not use stay in the WAL as empty batches, harmless to
// replay. An opener that dies (or fails) before all its marker writes are
// resolved leaves holes below the markers that landed: the recovery of the
// next opener fills them (see fillHoles).
const (
	markerWidthFirst = 16  // markers per attempt when a live writer may be appending
	markerWidthMax   = 256 // the widest attempt
	markerParallel   = 32  // marker writes in flight at once
	markerAttempts   = 20
)

// testHookListedTop, set by tests, runs after writeMarker lists the tip.
var testHookListedTop func(attempt int)

// writeMarker claims the WAL for this writer (see "Fencing a busy writer")
// and returns the first and last sequences of the markers it holds. hwm is
// the highest sequence known to have been durable (see checkTail): a WAL
// that ends below it has lost its tail.
func (e *Engine) writeMarker(ctx context.Context, hwm uint64) (first, last uint64, err error) {
	width := uint64(1)
	if e.opts.Takeover && !e.osLock {
		width = markerWidthFirst
	}
	for attempt := 0; attempt < markerAttempts; attempt++ {
		top, w, err := e.topSeq(ctx)
		if err != nil {
			return 0, 0, err
		}
		if testHookListedTop != nil {
			testHookListedTop(attempt)
		}
		if attempt == 0 {
			if err := e.checkTail(ctx, w, top, hwm); err != nil {
				return 0, 0, err
			}
		}
		won, err := e.writeMarkers(ctx, top+1, width)
		if err != nil {
			return 0, 0, err
		}
		// won[i]: we hold top+1+i. Usable if it is a non-empty suffix.
		i := slices.Index(won, true)
		if i >= 0 && !slices.Contains(won[i:], false) {
			return top + 1 + uint64(i), top + width, nil
		}
		// Another writer holds sequences in the range: look again, wider.
		width = min(max(width*2, markerWidthFirst), markerWidthMax)
		if err := sleepBackoff(ctx, attempt); err != nil {
			return 0, 0, err
		}
	}
	return 0, 0, fmt.Errorf("%w: another writer keeps appending to the WAL", ErrLocked)
}

// writeMarkers writes marker batches at from .. from+n-1, create-only, and
// reports which of them this writer holds. Each carries its own epoch key:
// which one will be the lowest we hold is not known until all are resolved.
func (e *Engine) writeMarkers(ctx context.Context, from, n uint64) ([]bool, error) {
	won := make([]bool, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(markerParallel)
	for i := range n {
		seq := from + i
		data, err := format.EncodeBatch(&format.Batch{
			Seq: seq, Writer: e.writer, Epoch: seq, UnixNano: time.Now().UnixNano(), Marker: true,
			Muts: []format.Mutation{markerMutation(seq, e.writer)},
		})
		if err != nil {
			return nil, err
		}
		g.Go(func() error {
			err := e.writeCreateOnly(gctx, walKey(seq), data)
			switch {
			case err == nil:
				won[i] = true
			case errors.Is(err, ErrFenced): // another writer holds seq
			case errors.Is(err, errGoneAfterConflict):
				// Held by another writer, and collected since: a snapshot
				// covers seq. Failing Open here, with the other markers
				// in flight, would leave holes (see fillHoles).
			default:
				return err
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return won, nil
}

// Epoch keys record, in the state, the sequence of every writer's open
// marker. Collection never deletes a marker's WAL object while its epoch key
// exists: a replaced writer may still be about to write exactly that
// sequence (its next one), and only the marker object standing there makes
// that write fail. The markers of the keepEpochs writers that opened last
// are kept (see pruneEpochs).
const (
	epochPrefix = "e/"
	keepEpochs  = 64
)

func epochKey(seq uint64) string { return fmt.Sprintf("%s%020d", epochPrefix, seq) }

func markerMutation(seq uint64, writer string) format.Mutation {
	return format.Mutation{Op: format.OpPut, Key: epochKey(seq), Value: Inline([]byte(writer))}
}

// topSeq returns the highest sequence named by any snapshot or held by the
// WAL, and the WAL it listed. The WAL is listed first: collection deletes
// WAL objects only once the snapshot covering them exists, so the snapshot
// listing then sees any such snapshot.
func (e *Engine) topSeq(ctx context.Context) (uint64, *walSet, error) {
	w, err := e.listWAL(ctx)
	if err != nil {
		return 0, nil, err
	}
	top, err := w.top(ctx)
	if err != nil {
		return 0, nil, err
	}
	objs, err := e.bucket.List(ctx, "snap/")
	if err != nil {
		return 0, nil, err
	}
	for _, o := range objs {
		if s, ok := parseSeqKey("snap/", o.Key); ok {
			top = max(top, s)
		}
	}
	return top, w, nil
}

// fillHoles closes the holes in the WAL listed in w, between the snapshot
// base and this writer's last marker top, that an opener left there, and
// reports whether it found any: its markers are written in parallel (see
// writeMarker), so an opener that dies, or whose Open fails, while they
// are in flight leaves the sequences of the markers that did not land
// empty below those that did. Nobody wrote them, but a write may still
// come: the dead opener's own request, or the old writer's next batch if
// it is alive (the lowest hole is its next sequence). Recovery can neither
// skip them nor replay them, and would report the WAL as corrupt at every
// Open from then on. So each hole gets a marker of this writer,
// create-only: whatever lands there first, our marker or that write, is
// final, and recovery, listing again, finds the WAL below our markers
// gapless. A marker, with its epoch key, so that collection keeps it while
// a replaced writer may be about to write that sequence (see epochPrefix):
// which filler that is depends on which writes won, so each has one, and
// pruning keeps the first of each run (see pruneEpochs).
//
// Not such holes, left alone for recovery to report as lost batches:
//   - a hole with a committed batch (not a marker) anywhere above it: the
//     writer of that batch recovered through it (or wrote it) before it
//     committed;
//   - a hole at or below the owner object's durable mark read at Open
//     (openMark): a batch was durable there.
//
// The caller has checked that no newer writer replaced this one (a
// snapshot above our markers, listed after the WAL): that writer's
// collection would make holes of what it deleted.
//
// Stores with an OS lock need none of this: a single opener at a time, and
// no request of a dead one still on its way.
func (e *Engine) fillHoles(ctx context.Context, w *walSet, base, top uint64) (bool, error) {
	if e.readOnly || e.osLock || len(w.segs) > 0 {
		return false, nil
	}
	var holes []uint64
	for s := base + 1; s < top; s++ {
		if _, ok := w.singles[s]; !ok {
			holes = append(holes, s)
		}
	}
	if len(holes) == 0 || holes[0] <= e.openMark {
		return false, nil
	}
	// Every batch above the lowest hole must be a marker.
	var leave, raced atomic.Bool
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for s := holes[0] + 1; s <= top; s++ {
		if _, ok := w.singles[s]; !ok {
			continue
		}
		g.Go(func() error {
			if leave.Load() || raced.Load() {
				return nil
			}
			b, _, err := e.readBatch(gctx, s)
			if errors.Is(err, errRaced) {
				raced.Store(true) // collected meanwhile
				return nil
			}
			if err != nil {
				return err
			}
			if !b.Marker {
				leave.Store(true)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			return false, nil // for recovery to report
		}
		return false, err
	}
	if raced.Load() {
		return false, errRaced
	}
	if leave.Load() {
		return false, nil
	}
	e.log.Warn("stepwell: closing holes an opener that died left in the WAL", "holes", len(holes),
		"first", walKey(holes[0]), "last", walKey(holes[len(holes)-1]))
	for i := 0; i < len(holes); {
		j := i + 1
		for j < len(holes) && holes[j] == holes[j-1]+1 {
			j++
		}
		if _, err := e.writeMarkers(ctx, holes[i], uint64(j-i)); err != nil {
			return false, err
		}
		i = j
	}
	return true, nil
}

// recover loads the newest valid snapshot below the epoch and replays the
// WAL after it, up to the marker.
func (e *Engine) recover(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := e.recoverOnce(ctx)
		if !errors.Is(err, errRaced) || attempt >= 10 {
			return err
		}
	}
}

func (e *Engine) recoverOnce(ctx context.Context) error {
	e.follow.cur = nil // a reader starts over: it loads a new state
	// A reader checks the log's end against the owner object's mark, read
	// before the listings: the writer records a sequence only once it is
	// durable, so whatever the listings show must reach it.
	var mark uint64
	if e.readOnly && e.hasOwner() {
		var err error
		if mark, err = e.readMark(ctx); err != nil {
			return err
		}
	}
	snapObjs, err := e.bucket.List(ctx, "snap/")
	if err != nil {
		return err
	}
	wal, err := e.listWAL(ctx)
	if err != nil {
		return err
	}
	// A writer replays up to its last marker; a reader up to the newest
	// batch or snapshot listed (writers never leave gaps, so everything
	// below it exists).
	upper := e.markEnd + 1
	if e.readOnly {
		top, err := wal.top(ctx)
		if err != nil {
			return err
		}
		for _, o := range snapObjs {
			if s, ok := parseSeqKey("snap/", o.Key); ok {
				top = max(top, s)
			}
		}
		if err := e.checkTail(ctx, wal, top, mark); err != nil {
			return err
		}
		upper = top + 1
	}
	var snaps []uint64
	for _, o := range snapObjs {
		s, ok := parseSeqKey("snap/", o.Key)
		switch {
		case !ok:
		case s < upper:
			snaps = append(snaps, s)
		case !e.readOnly:
			// Our markers were above every snapshot when we wrote them:
			// this one is a newer writer's, which replaced us. Its
			// collection may have made room for our own late marker
			// writes, so a WAL that looks whole must not be trusted.
			return fmt.Errorf("%w: a newer writer's snapshot %s is above this writer's markers", ErrFenced, o.Key)
		}
	}
	slices.Sort(snaps)

	var base uint64
	var snapErr error // the newest snapshot's corruption, if we fell back
	e.tree = newTree()
	if ix := e.opts.Indexer; ix != nil {
		ix.Reset()
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		n, err := e.loadSnapshot(ctx, snaps[i])
		if err == nil {
			base = snaps[i]
			e.lastSnap = n
			break
		}
		var ce *CorruptionError
		if !errors.As(err, &ce) {
			return err
		}
		e.log.Error("stepwell: snapshot is corrupt, trying an older one", "key", ce.Key, "err", ce.Err)
		if snapErr == nil {
			snapErr = err
		}
		e.tree = newTree()
		if ix := e.opts.Indexer; ix != nil {
			ix.Reset()
		}
	}

	// The WAL after the snapshot must be contiguous up to the marker.
	for seq := base + 1; seq < upper; seq++ {
		ok, err := wal.has(ctx, seq)
		if err != nil {
			return err
		}
		if !ok {
			if snapErr != nil {
				return fmt.Errorf("%w (and the WAL it superseded is gone: %s missing)", snapErr, walKey(seq))
			}
			// Listed after the WAL: a writer collects only below a snapshot
			// it wrote first.
			newer, replaced, err := e.snapshotsAbove(ctx, base)
			switch {
			case err != nil:
				return err
			case replaced:
				return fmt.Errorf("%w: a newer writer's snapshot is above this writer's markers", ErrFenced)
			case newer:
				return errRaced
			}
			if filled, err := e.fillHoles(ctx, wal, base, upper-1); err != nil {
				return err
			} else if filled {
				return errRaced // list again
			}
			// Above a writer's epoch are its own markers.
			limit, known := upper, mark
			if !e.readOnly {
				limit, known = e.epoch, e.openMark
			}
			lost, next, err := e.buriedTail(ctx, wal, seq, limit, known)
			switch {
			case err != nil:
				return err
			case lost == nil:
				return &CorruptionError{Key: walKey(seq), Err: fmt.Errorf("%w: WAL batch missing (the log has a gap: the next batch it holds is %s)", format.ErrCorrupt, walKey(next))}
			case e.readOnly || !e.opts.AcceptTailLoss:
				return lost
			}
			if err := e.giveUpBuriedTail(ctx, wal, lost, limit); err != nil {
				return err
			}
			return errRaced // list again
		}
	}
	var walBytes int64
	const window = 64
	for lo := base + 1; lo < upper; lo += window {
		hi := min(lo+window, upper)
		batches := make([]*format.Batch, hi-lo)
		sizes := make([]int64, hi-lo)
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(16)
		for seq := lo; seq < hi; seq++ {
			g.Go(func() error {
				b, raw, err := wal.batch(gctx, seq)
				batches[seq-lo], sizes[seq-lo] = b, raw
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		for i, b := range batches {
			for _, m := range b.Muts {
				e.applyRecovered(m)
			}
			walBytes += sizes[i]
		}
	}
	e.walBytes = walBytes
	e.walObjects = int(upper - base - 1)
	e.stats.RecoveredWAL = e.walObjects // earlier writers' batches
	if !e.readOnly {
		e.stats.RecoveredWAL -= int(e.markEnd - e.epoch + 1)
	}
	e.durable = upper - 1
	return nil
}

// buriedTail tells a lost tail from a gap in the middle of the log, given
// seq, the lowest batch missing above the snapshot recovery loaded, and
// limit, where this opener's own markers start (a reader: one past the
// log's end). It returns the lowest sequence at or above seq the WAL
// holds (limit if none), and, if the loss is a lost tail, its
// TailLostError.
//
// A writer's open marker is a WAL object (never a segment record), so
// after a restart the newest batches are followed by the marker of the
// Open that restarted, and by those of any Opens since (on bucket stores
// the markers of a failed Open stay). Losing those batches (a file://
// segment deleted or truncated, a bucket's newest WAL objects deleted)
// leaves a log that does not end early, as checkTail sees it, but has a
// gap with only empty open markers above it. That is the same loss: every
// batch with content after seq-1 is gone. So it is one if seq is at or
// below mark, the highest sequence known to have been durable at Open (a
// batch was written there, as in fillHoles), and every batch the WAL holds
// from seq up to limit is an open marker. Anything else (a batch with
// content, or an unreadable one, above the gap; a gap above mark) stays a
// gap for recovery to report.
func (e *Engine) buriedTail(ctx context.Context, w *walSet, seq, limit, mark uint64) (*TailLostError, uint64, error) {
	next := limit  // the lowest batch the WAL holds above seq
	durable := seq // the highest batch missing at or below mark
	for s := seq + 1; s < limit; s++ {
		ok, err := w.has(ctx, s)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			if s <= mark {
				durable = s
			}
			continue
		}
		next = min(next, s)
		if seq > mark {
			return nil, next, nil // a gap above the mark: not a lost tail
		}
		b, _, err := w.batch(ctx, s)
		var ce *CorruptionError
		switch {
		case errors.As(err, &ce):
			return nil, next, nil
		case err != nil:
			return nil, 0, err
		case !b.Marker:
			return nil, next, nil
		}
	}
	if seq > mark {
		return nil, next, nil
	}
	lost := e.tailLost(w, seq-1, durable)
	if next < limit {
		lost.markers = next
	}
	return lost, next, nil
}

// giveUpBuriedTail accepts the loss of a tail that open markers hide (see
// buriedTail; Options.AcceptTailLoss): it writes a marker of this writer
// into every sequence missing below limit, create-only, as fillHoles does,
// so that the log the caller lists again is whole and replays what
// survived, then the markers. Whatever lands in a hole first (a filler, or
// a late write of the batch that was there) is final. The fillers are
// garbage once a snapshot covers them, like any marker (see pruneEpochs).
func (e *Engine) giveUpBuriedTail(ctx context.Context, w *walSet, lost *TailLostError, limit uint64) error {
	e.log.Error("stepwell: accepting the loss of the WAL's tail (Options.AcceptTailLoss)",
		"end", lost.End, "durable", lost.Durable, "lost_batches", lost.Missing(), "err", lost)
	var holes []uint64
	for s := lost.End + 1; s < limit; s++ {
		ok, err := w.has(ctx, s)
		if err != nil {
			return err
		}
		if !ok {
			holes = append(holes, s)
		}
	}
	for i := 0; i < len(holes); {
		j := i + 1
		for j < len(holes) && holes[j] == holes[j-1]+1 {
			j++
		}
		if _, err := e.writeMarkers(ctx, holes[i], uint64(j-i)); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func (e *Engine) newerSnapshot(ctx context.Context, than uint64) (bool, error) {
	newer, _, err := e.snapshotsAbove(ctx, than)
	return newer, err
}

// snapshotsAbove lists the snapshots and reports whether one is above than
// (for a writer: up to its last marker), and, for a writer, whether one is
// above its last marker: a newer writer's, which replaced this one.
func (e *Engine) snapshotsAbove(ctx context.Context, than uint64) (newer, replaced bool, err error) {
	objs, err := e.bucket.List(ctx, "snap/")
	if err != nil {
		return false, false, err
	}
	for _, o := range objs {
		s, ok := parseSeqKey("snap/", o.Key)
		switch {
		case !ok:
		case !e.readOnly && s > e.markEnd:
			replaced = true
		case s > than:
			newer = true
		}
	}
	return newer, replaced, nil
}

// readBatch reads and decodes the WAL object of batch seq; it also returns
// the length of its body before compression (format.BatchBodyLen).
func (e *Engine) readBatch(ctx context.Context, seq uint64) (*format.Batch, int64, error) {
	key := walKey(seq)
	data, err := e.getRetry(ctx, key, deadlineFrom(e.opts.WriteRetry))
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, 0, errRaced
	}
	if err != nil {
		return nil, 0, err
	}
	b, err := decodeBatch(key, seq, data)
	return b, int64(format.BatchBodyLen(data)), err
}

// decodeBatch decodes the WAL object data of batch seq, found at key, and
// checks it.
func decodeBatch(key string, seq uint64, data []byte) (*format.Batch, error) {
	b, err := format.DecodeBatch(data)
	if err != nil {
		return nil, &CorruptionError{Key: key, Err: err}
	}
	if b.Seq != seq {
		return nil, &CorruptionError{Key: key, Err: fmt.Errorf("%w: batch says sequence %d, want %d", format.ErrCorrupt, b.Seq, seq)}
	}
	for i, m := range b.Muts {
		if m.Op == format.OpPut {
			if _, err := Decode(m.Value); err != nil {
				return nil, &CorruptionError{Key: key, Err: fmt.Errorf("%w: mutation %d: %v", format.ErrCorrupt, i, err)}
			}
		}
	}
	return b, nil
}

func deadlineFrom(d time.Duration) time.Time { return time.Now().Add(d) }

// applyRecovered applies a replayed mutation (single-threaded, at Open).
func (e *Engine) applyRecovered(m format.Mutation) {
	var old item
	key, val := m.Key, []byte(nil)
	switch m.Op {
	case format.OpPut:
		it := newItem(m.Key, m.Value)
		old, _ = e.tree.ReplaceOrInsert(it)
		key, val = it.key(), it.val()
	case format.OpDelete:
		var had bool
		if old, had = e.tree.Delete(probe(m.Key)); !had {
			return
		}
	}
	if ix := e.opts.Indexer; ix != nil {
		ix.Apply(key, old.val(), val)
	}
}

// loadSnapshot reads snap/<seq> into e.tree, returning its size in bytes
// before compression (about: its entries' keys and values).
func (e *Engine) loadSnapshot(ctx context.Context, seq uint64) (int64, error) {
	key := snapKey(seq)
	r, err := e.bucket.NewReader(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return 0, errRaced
	}
	if err != nil {
		return 0, err
	}
	defer r.Close()
	cr := &countingReader{r: r}
	// The entries arrive in key order. Inserted in that order, a B-tree
	// splits full nodes in two and never fills the left halves again:
	// every node ends half empty, with the capacity of a full one. In
	// reverse order the halves split off are fresh, tight allocations, and
	// the tree takes about half the memory.
	var items []item
	var decoded int64 // about the snapshot's size before compression
	meta, err := format.ReadSnapshot(cr, func(k string, v []byte) error {
		decoded += int64(len(k) + len(v) + 8)
		if _, err := Decode(v); err != nil {
			return &CorruptionError{Key: key, Err: fmt.Errorf("%w: value of %q: %v", format.ErrCorrupt, k, err)}
		}
		items = append(items, newItem(k, v))
		return nil
	})
	if err == nil {
		for i := len(items) - 1; i >= 0; i-- {
			e.tree.ReplaceOrInsert(items[i])
		}
		e.indexLoaded(items)
	}
	if err != nil {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			return 0, err
		}
		if errors.Is(err, format.ErrCorrupt) {
			return 0, &CorruptionError{Key: key, Err: err}
		}
		if errors.Is(err, objstore.ErrNotFound) {
			return 0, errRaced
		}
		return 0, err
	}
	if meta.Seq != seq {
		return 0, &CorruptionError{Key: key, Err: fmt.Errorf("%w: snapshot says sequence %d", format.ErrCorrupt, meta.Seq)}
	}
	return max(cr.n, decoded), nil
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// indexLoaded applies a loaded snapshot's entries to the indexer.
func (e *Engine) indexLoaded(items []item) {
	ix := e.opts.Indexer
	if ix == nil {
		return
	}
	bulk, _ := ix.(BulkIndexer)
	if bulk != nil {
		bulk.BeginBulk()
	}
	for _, it := range items {
		ix.Apply(it.key(), nil, it.val())
	}
	if bulk != nil {
		bulk.EndBulk()
	}
}
