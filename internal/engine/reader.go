package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// OpenReadOnly loads the store in opts.Bucket without becoming its writer:
// it writes nothing (no marker, no heartbeat, no lock), so it never fences
// or blocks the live writer. Its state is the store as of the newest WAL
// object it listed; Refresh catches up. Update fails with ErrReadOnly.
func OpenReadOnly(ctx context.Context, opts Options) (*Engine, error) {
	e, err := newEngine(opts)
	if err != nil {
		return nil, err
	}
	e.readOnly = true
	if err := e.recover(ctx); err != nil {
		e.bgStop()
		return nil, err
	}
	return e, nil
}

// Refresh brings a read-only engine up to date with the WAL written since
// it last looked. If the writer's garbage collection has deleted WAL
// objects it had not read, it reloads from the newest snapshot. In a
// segment (file://) it reads the records written since, not the segment
// again. Concurrent calls run one at a time.
func (e *Engine) Refresh(ctx context.Context) error {
	if !e.readOnly {
		return errors.New("engine: Refresh is only for read-only engines")
	}
	e.follow.Lock()
	defer e.follow.Unlock()
	wal, err := e.listWAL(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	from := e.durable + 1
	e.mu.Unlock()
	if c := e.follow.cur; c != nil && c.Next() == from {
		wal.cur = c
	}
	for seq := from; ; seq++ {
		ok, err := wal.has(ctx, seq)
		if errors.Is(err, errRaced) {
			break
		}
		if err != nil {
			return err
		}
		if !ok {
			// Caught up, unless the WAL goes on past a gap: collection
			// deletes in no particular order, and a delete can fail and
			// leave a leftover, so a batch may be listed while an earlier
			// one is gone. Then a newer snapshot covers the gap (below).
			if seq > from {
				top, err := wal.top(ctx)
				if err != nil && !errors.Is(err, errRaced) {
					return err
				}
				if err == nil && top < seq {
					return nil
				}
			}
			break
		}
		b, _, err := wal.batch(ctx, seq)
		if errors.Is(err, errRaced) {
			break
		}
		if err != nil {
			return err
		}
		e.mu.Lock()
		for _, m := range b.Muts {
			e.applyRecovered(m)
		}
		e.durable = seq
		e.mu.Unlock()
	}
	e.mu.Lock()
	from = e.durable + 1
	e.mu.Unlock()
	// Nothing new in the WAL after from, unless collection deleted it after
	// a snapshot newer than our state.
	if newer, err := e.newerSnapshot(ctx, from-1); err != nil || !newer {
		return err
	}
	// Collected past us: reload from the newest snapshot. If that fails,
	// the state stays as it was (whole, as of durable) and the next
	// Refresh tries again.
	e.mu.Lock()
	defer e.mu.Unlock()
	prev := e.tree
	if err := e.recover(ctx); err != nil {
		e.tree = prev
		if ix := e.opts.Indexer; ix != nil {
			ix.Reset()
			var items []item
			prev.Ascend(func(it item) bool { items = append(items, it); return true })
			e.indexLoaded(items)
		}
		return fmt.Errorf("reloading after garbage collection: %w", err)
	}
	return nil
}

// closeReadOnly releases a read-only engine.
func (e *Engine) closeReadOnly() error {
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return nil
	}
	e.closing = true
	e.err = ErrClosed
	e.mu.Unlock()
	e.bgStop()
	return e.bucket.Close()
}

// readerFollow is a reader's place in the WAL segment it follows.
type readerFollow struct {
	sync.Mutex // held by Refresh: one at a time
	// cur is the cursor at the end of the newest segment recovery or
	// Refresh loaded: its records before cur.Next() are read.
	cur *format.SegmentCursor
}

// followChunk is the first piece a reader reads a segment in; pieces
// double from there (see format.SegmentCursor.ReadFrom).
const followChunk = 64 << 10

// follow loads segment i for a reader, in place, a piece at a time: the
// zeros after its log cost one piece, not the rest of the segment. If it
// is the segment of w.cur and the same use of the file, it reads from
// where the cursor is: only the records written since.
func (w *walSet) follow(ctx context.Context, sg objstore.Segmenter, i int) error {
	sr := &w.segs[i]
	r, err := sg.OpenSegment(ctx, sr.key)
	if errors.Is(err, objstore.ErrNotFound) {
		return errRaced // collected: a newer snapshot covers it
	}
	if err != nil {
		return err
	}
	defer r.Close()
	head := make([]byte, format.SegmentHeaderLen)
	n, err := r.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	c, ok, err := format.NewSegmentCursor(head[:n], sr.first)
	if err != nil {
		return &CorruptionError{Key: sr.key, Err: err}
	}
	if !ok { // version 1: no nonce to follow a use of the file by
		return w.loadWhole(ctx, i)
	}
	if cur := w.cur; cur != nil && cur.SameUse(c) { // same first sequence: same key
		c = *cur
	}
	sr.skip = c.N
	objs, err := c.ReadFrom(r, r.Size(), followChunk)
	if err != nil {
		return err
	}
	sr.keep(objs)
	if i == len(w.segs)-1 {
		w.e.follow.cur = &c
	}
	return nil
}
