package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// errRaced means an object vanished while recovery read it: an earlier
// writer's garbage collection ran concurrently. Recovery starts over.
var errRaced = errors.New("object deleted during recovery")

// writeMarker claims the next WAL sequence with an empty marker batch. Once
// it lands, no earlier writer can make any further batch durable (its next
// sequence is taken), so the WAL below the marker is final.
func (e *Engine) writeMarker(ctx context.Context) (uint64, error) {
	for attempt := 0; attempt < 20; attempt++ {
		top, err := e.topSeq(ctx)
		if err != nil {
			return 0, err
		}
		seq := top + 1
		data, err := format.EncodeBatch(&format.Batch{
			Seq: seq, Writer: e.writer, Epoch: seq, UnixNano: time.Now().UnixNano(), Marker: true,
			Muts: []format.Mutation{markerMutation(seq, e.writer)},
		})
		if err != nil {
			return 0, err
		}
		err = e.writeCreateOnly(ctx, walKey(seq), data)
		if err == nil {
			return seq, nil
		}
		if !errors.Is(err, ErrFenced) {
			return 0, err
		}
		// Another writer took seq first; look again.
		if err := sleepBackoff(ctx, attempt); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: another writer keeps appending to the WAL", ErrLocked)
}

// Epoch keys record, in the state, the sequence of every writer's open
// marker. Collection never deletes a marker's WAL object while its epoch key
// exists: a replaced writer may still be about to write exactly that
// sequence (its next one), and only the marker object standing there makes
// that write fail. The newest keepEpochs markers are kept.
const (
	epochPrefix = "e/"
	keepEpochs  = 64
)

func epochKey(seq uint64) string { return fmt.Sprintf("%s%020d", epochPrefix, seq) }

func markerMutation(seq uint64, writer string) format.Mutation {
	return format.Mutation{Op: format.OpPut, Key: epochKey(seq), Value: Inline([]byte(writer))}
}

// topSeq returns the highest sequence named by any snapshot or held by the
// WAL.
func (e *Engine) topSeq(ctx context.Context) (uint64, error) {
	w, err := e.listWAL(ctx)
	if err != nil {
		return 0, err
	}
	top, err := w.top(ctx)
	if err != nil {
		return 0, err
	}
	objs, err := e.bucket.List(ctx, "snap/")
	if err != nil {
		return 0, err
	}
	for _, o := range objs {
		if s, ok := parseSeqKey("snap/", o.Key); ok {
			top = max(top, s)
		}
	}
	return top, nil
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
	snapObjs, err := e.bucket.List(ctx, "snap/")
	if err != nil {
		return err
	}
	wal, err := e.listWAL(ctx)
	if err != nil {
		return err
	}
	// A writer replays up to its marker; a reader up to the newest batch
	// or snapshot listed (writers never leave gaps, so everything below it
	// exists).
	upper := e.epoch
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
		upper = top + 1
	}
	var snaps []uint64
	for _, o := range snapObjs {
		if s, ok := parseSeqKey("snap/", o.Key); ok && s < upper {
			snaps = append(snaps, s)
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
			if newer, err := e.newerSnapshot(ctx, base); err != nil {
				return err
			} else if newer {
				return errRaced
			}
			return &CorruptionError{Key: walKey(seq), Err: fmt.Errorf("%w: WAL batch missing (the log has a gap before %s)", format.ErrCorrupt, walKey(upper))}
		}
	}
	var walBytes int64
	const window = 64
	for lo := base + 1; lo < upper; lo += window {
		hi := min(lo+window, upper)
		batches := make([]*format.Batch, hi-lo)
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(16)
		for seq := lo; seq < hi; seq++ {
			g.Go(func() error {
				b, err := wal.batch(gctx, seq)
				batches[seq-lo] = b
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
			walBytes += wal.size(lo + uint64(i))
		}
	}
	e.walBytes = walBytes
	e.walObjects = int(upper - base - 1)
	e.stats.RecoveredWAL = e.walObjects
	e.durable = upper - 1
	return nil
}

func (e *Engine) newerSnapshot(ctx context.Context, than uint64) (bool, error) {
	objs, err := e.bucket.List(ctx, "snap/")
	if err != nil {
		return false, err
	}
	for _, o := range objs {
		if s, ok := parseSeqKey("snap/", o.Key); ok && s > than && (e.readOnly || s < e.epoch) {
			return true, nil
		}
	}
	return false, nil
}

func (e *Engine) readBatch(ctx context.Context, seq uint64) (*format.Batch, error) {
	key := walKey(seq)
	data, err := e.getRetry(ctx, key, deadlineFrom(e.opts.WriteRetry))
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, errRaced
	}
	if err != nil {
		return nil, err
	}
	return decodeBatch(key, seq, data)
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

// loadSnapshot reads snap/<seq> into e.tree, returning its size in bytes.
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
	meta, err := format.ReadSnapshot(cr, func(k string, v []byte) error {
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
	return cr.n, nil
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
