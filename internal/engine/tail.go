package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// # Where the log ends
//
// Recovery can tell a gap inside the WAL (a missing batch below the newest
// one present), but not a lost tail: the newest batches deleted, or a WAL
// segment truncated or deleted, leave a log that looks complete and ends
// early. So the writer records how far the log reached, off the commit
// path, in the owner object (format.Owner.Durable): on bucket stores with
// every heartbeat, on stores with an OS lock (file://) at most once per
// markInterval while commits go on, and at Open and a clean Close. An
// opener that finds the WAL ending below that mark refuses the store with
// a TailLostError naming what is missing, unless told to accept the loss
// (Options.AcceptTailLoss). The mark lags the log by up to one interval, so
// losing only the batches of its last interval goes unseen, as does losing
// the owner object with them. An owner object that is there but does not
// decode was damaged (objects appear whole or not at all): a writer's Open
// refuses it as corruption (see unreadableOwner), for opening would
// rewrite it and hide a loss for good.
//
// After a restart the open markers of later Opens (WAL objects, never
// segment records) follow the newest batches: losing those batches then
// leaves a gap below markers, not an early end. Recovery tells that from a
// gap in the middle of the log and reports it as a lost tail too (see
// buriedTail).

// markInterval bounds how often a writer on a store with an OS lock
// rewrites the owner object while commits go on.
const markInterval = time.Second

// ErrTailLost is wrapped by TailLostError, which wraps format.ErrCorrupt
// too: the store needs an operator.
var ErrTailLost = errors.New("the WAL ends before batches known to have been durable")

// TailLostError reports a WAL that ends below the highest sequence known to
// have been durable: acknowledged batches are gone. Not retryable: open with
// the option that accepts the loss, or put the missing objects back.
type TailLostError struct {
	End uint64 // the last sequence the store holds (WAL or snapshot) before the loss
	// Durable is the highest sequence known to have been durable, or,
	// where open markers follow the loss, the highest one missing.
	Durable uint64
	// Segments is set if the store writes batches into WAL segments
	// (file://); Segment then names the newest one left, which held the
	// missing batches unless a newer one was deleted ("" if none is left).
	Segments bool
	Segment  string
	// markers, if not 0, is where the open markers that follow the loss
	// start: the log did not end early, it holds nothing but empty open
	// markers after the missing batches (see buriedTail).
	markers uint64
}

func (e *TailLostError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: the log ends at sequence %d but %d was durable: %d batch(es) missing (%s",
		ErrTailLost, e.End, e.Durable, e.Missing(), walKey(e.End+1))
	if e.Missing() > 1 {
		fmt.Fprintf(&b, " to %s", walKey(e.Durable))
	}
	b.WriteString(")")
	if e.markers != 0 {
		fmt.Fprintf(&b, "; only empty open markers of later opens follow it, from %s", walKey(e.markers))
	}
	switch {
	case e.Segment != "":
		fmt.Fprintf(&b, "; the store writes batches into WAL segments: %s is the newest (truncated?), or a newer one was deleted", e.Segment)
	case e.Segments:
		b.WriteString("; the store writes batches into WAL segments, and the one that held them was deleted")
	}
	return b.String()
}

// Missing returns how many batches are missing.
func (e *TailLostError) Missing() uint64 { return e.Durable - e.End }

func (e *TailLostError) Unwrap() []error { return []error{ErrTailLost, format.ErrCorrupt} }

// readMark returns the highest sequence the owner object says was durable
// (0 if there is none). An owner object that is there but does not decode
// is refused at a writer's Open (see unreadableOwner).
func (e *Engine) readMark(ctx context.Context) (uint64, error) {
	data, err := e.getRetry(ctx, ownerKey, deadlineFrom(e.opts.WriteRetry))
	if errors.Is(err, objstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	o, err := format.DecodeOwner(data)
	if err != nil {
		return 0, e.unreadableOwner(err)
	}
	return o.Durable, nil
}

// unreadableOwner returns the error of an Open that found the owner object
// there but undecodable (err): a CorruptionError naming it. Such an object
// was damaged, not left by a crash: the bucket makes every object, the
// owner object included, appear whole or not at all (file:// writes it
// into a synced temporary file and renames it). The durable sequence it
// held is what detects a lost tail (see checkTail), and a writer that
// opened regardless would rewrite it with the end of whatever log it
// found, hiding such a loss for good. Options.AcceptTailLoss opens the
// store anyway (logged at ERROR): its log's end is not checked. A reader
// writes nothing, so it loses no evidence: it logs the damage and opens
// without the check.
func (e *Engine) unreadableOwner(err error) error {
	switch {
	case e.readOnly:
		e.log.Warn("stepwell: the owner object is unreadable; cannot check the WAL's end against it", "key", ownerKey, "err", err)
		return nil
	case e.opts.AcceptTailLoss:
		e.log.Error("stepwell: the owner object is unreadable; opening without checking the WAL's end against it (Options.AcceptTailLoss)",
			"key", ownerKey, "err", err)
		return nil
	}
	return &CorruptionError{Key: ownerKey, Err: fmt.Errorf("%w (it records how far the WAL reached, which cannot be checked without it: "+
		"put a good copy back, or open with the option that accepts tail loss)", err)}
}

// checkTail returns a TailLostError if the WAL, ending at top, ends below
// mark; with Options.AcceptTailLoss it logs the loss instead.
func (e *Engine) checkTail(ctx context.Context, w *walSet, top, mark uint64) error {
	if top >= mark {
		return nil
	}
	lost := e.tailLost(w, top, mark)
	if e.readOnly {
		// Collection may have raced the listing: a snapshot written since
		// covers what was deleted.
		if newer, err := e.newerSnapshot(ctx, top); err != nil {
			return err
		} else if newer {
			return errRaced
		}
	}
	if e.opts.AcceptTailLoss && !e.readOnly {
		e.log.Error("stepwell: accepting the loss of the WAL's tail (Options.AcceptTailLoss)",
			"end", top, "durable", mark, "lost_batches", lost.Missing(), "err", lost)
		return nil
	}
	return lost
}

// tailLost returns the TailLostError of a WAL w that holds sequences up to
// end but lost those up to durable.
func (e *Engine) tailLost(w *walSet, end, durable uint64) *TailLostError {
	lost := &TailLostError{End: end, Durable: durable}
	if _, ok := objstore.AsSegmenter(e.bucket); ok && e.osLock {
		lost.Segments = true
	}
	if n := len(w.segs); n > 0 {
		lost.Segment = w.segs[n-1].key
	}
	return lost
}

// recordMark writes the owner object (stores with an OS lock: no
// heartbeat) if the durable sequence has moved past the last one recorded.
func (e *Engine) recordMark(ctx context.Context) error {
	e.mu.Lock()
	d := e.durable
	e.mu.Unlock()
	if d <= e.marked.Load() {
		return nil
	}
	if err := e.writeOwner(ctx, 0, false, d); err != nil {
		return err
	}
	e.marked.Store(d)
	return nil
}

// markLoop records the durable sequence (see recordMark) at most once per
// markInterval, on stores with an OS lock. An idle writer makes no
// requests: nothing moved.
func (e *Engine) markLoop() {
	defer e.bg.Done()
	t := time.NewTicker(markInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-e.bgCtx.Done():
			return
		}
		if err := e.recordMark(e.bgCtx); err != nil && e.bgCtx.Err() == nil {
			e.log.Warn("stepwell: recording the WAL's end in the owner object failed", "err", err)
		}
	}
}
