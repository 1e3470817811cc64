package engine

import (
	"context"
	"errors"
	"fmt"
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
// objects it had not read, it reloads from the newest snapshot.
func (e *Engine) Refresh(ctx context.Context) error {
	if !e.readOnly {
		return errors.New("engine: Refresh is only for read-only engines")
	}
	wal, err := e.listWAL(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	from := e.durable + 1
	e.mu.Unlock()
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
		b, err := wal.batch(ctx, seq)
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
	// Collected past us: reload from the newest snapshot.
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.recover(ctx); err != nil {
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
