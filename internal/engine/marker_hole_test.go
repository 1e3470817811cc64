package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// markerCut lets through one create-only WAL write, of sequence keep, and
// holds every other one until its context ends: an opener that dies (or
// fails) while its open markers are in flight, with one of them landed.
type markerCut struct {
	objstore.Bucket
	keep   uint64
	landed chan struct{}
	once   sync.Once
}

func (m *markerCut) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	s, ok := parseSeqKey("wal/", key)
	if !ok || !ifNotExist {
		return m.Bucket.Put(ctx, key, data, ifNotExist)
	}
	if s == m.keep {
		err := m.Bucket.Put(ctx, key, data, ifNotExist)
		m.once.Do(func() { close(m.landed) })
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (m *markerCut) Unwrap() objstore.Bucket { return m.Bucket }

// dieMidMarkers opens b with takeover and makes the opener die (its
// context cancelled) once its marker at sequence keep landed, the others
// still in flight.
func dieMidMarkers(t *testing.T, b objstore.Bucket, keep uint64) {
	t.Helper()
	cut := &markerCut{Bucket: b, keep: keep, landed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-cut.landed
		cancel()
	}()
	if _, err := Open(ctx, Options{Bucket: cut, Heartbeat: time.Hour, Takeover: true}); err == nil {
		t.Fatal("Open of the dying opener succeeded")
	}
}

// takeOverFencing opens b with takeover, checks that the state holds want
// (key, value pairs) and that old, the writer it replaced, is fenced, and
// returns the new writer.
func takeOverFencing(t *testing.T, b objstore.Bucket, old *Engine, want ...string) *Engine {
	t.Helper()
	ctx := context.Background()
	c, err := Open(ctx, Options{Bucket: b, Heartbeat: time.Hour, Takeover: true})
	if err != nil {
		t.Fatalf("Open with takeover: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	got := dump(t, c)
	for i := 0; i+1 < len(want); i += 2 {
		if got[want[i]] != want[i+1] {
			t.Fatalf("state after the takeover: %v, want %s=%s", got, want[i], want[i+1])
		}
	}
	err = old.Update(ctx, func(tx *Tx) error { tx.Put("late", Inline([]byte("x"))); return nil })
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer's commit after the takeover: %v, want ErrFenced", err)
	}
	return c
}

// liveWriter opens a writer on a fresh bucket (b; reopen opens it again,
// as another process) that has committed k1=1 (at top), and kills it at
// the end of the test.
func liveWriter(t *testing.T) (a *Engine, b objstore.Bucket, reopen func() objstore.Bucket, top uint64) {
	t.Helper()
	b, reopen = memBucket(t)
	a = mustOpen(t, Options{Bucket: b, Heartbeat: time.Hour})
	t.Cleanup(a.Kill)
	put(t, a, "k1", "1")
	return a, b, reopen, a.Stats().DurableSeq
}

// TestTakeoverAfterOpenerDiedMidMarkers: an opener with takeover writes
// its open markers in parallel (see writeMarker). If it dies, or its Open
// fails, with only some of them landed, the WAL has holes below the
// markers that landed: sequences nobody wrote. The next opener must close
// them and open the store, not report the WAL as corrupt ("WAL batch
// missing") at every Open from then on. The old writer, still alive, whose
// next sequence is the lowest hole, must be fenced there.
func TestTakeoverAfterOpenerDiedMidMarkers(t *testing.T) {
	ctx := context.Background()
	a, b, reopen, _ := liveWriter(t)
	put(t, a, "k2", "2")
	top := a.Stats().DurableSeq

	dieMidMarkers(t, reopen(), top+3) // only its third marker lands
	for _, s := range []uint64{top + 1, top + 2, top + 4} {
		if _, err := b.Get(ctx, walKey(s)); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s: %v, want a hole there (the test is broken)", walKey(s), err)
		}
	}

	// The old writer's next sequence was the lowest hole: it is fenced.
	c := takeOverFencing(t, reopen(), a, "k1", "1", "k2", "2")
	put(t, c, "k3", "3")
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d := mustOpen(t, Options{Bucket: reopen(), Heartbeat: time.Hour, Takeover: true})
	defer d.Close(ctx)
	if got := dump(t, d); got["k3"] != "3" || got["late"] != "" {
		t.Fatalf("state after reopening: %v", got)
	}
}

// TestWALGapBelowCommittedBatchIsCorruption: a hole below an open marker
// is still corruption when a committed batch lies above it: the writer of
// that batch recovered through the missing one, which was lost.
func TestWALGapBelowCommittedBatchIsCorruption(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	a := mustOpen(t, Options{Bucket: b, Heartbeat: time.Hour})
	put(t, a, "k1", "1")
	put(t, a, "k2", "2")
	lost := a.Stats().DurableSeq
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, Options{Bucket: reopen(), Heartbeat: time.Hour})
	put(t, c, "k3", "3")
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	probe := reopen()
	if err := probe.Delete(ctx, walKey(lost)); err != nil {
		t.Fatal(err)
	}
	if data, err := probe.Get(ctx, walKey(lost+1)); err != nil {
		t.Fatal(err)
	} else if m, err := decodeBatch(walKey(lost+1), lost+1, data); err != nil || !m.Marker {
		t.Fatalf("%s is not a marker (%v): the test is broken", walKey(lost+1), err)
	}
	_, err := Open(ctx, Options{Bucket: probe, Heartbeat: time.Hour, Takeover: true})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Key != walKey(lost) {
		t.Fatalf("Open with a lost batch below a marker = %v, want a CorruptionError naming %s", err, walKey(lost))
	}
}

// collectOnConflict runs collect once, when a create-only WAL write of
// key conflicts, before the conflict is reported: a collection of the
// writer that holds the key, between the conflict and its read-back.
type collectOnConflict struct {
	objstore.Bucket
	key     string
	collect func()
	once    sync.Once
}

func (c *collectOnConflict) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	err := c.Bucket.Put(ctx, key, data, ifNotExist)
	if key == c.key && errors.Is(err, objstore.ErrExists) {
		c.once.Do(c.collect)
	}
	return err
}

func (c *collectOnConflict) Unwrap() objstore.Bucket { return c.Bucket }

// TestTakeoverMarkerCollectedAfterConflict: an opener's marker conflicts
// with a batch of the live writer, which a snapshot of that writer covers
// and its collection deletes before the opener reads the batch back. The
// sequence is simply not ours: Open goes on. It used to fail, with its
// other markers in flight (holes: see TestTakeoverAfterOpenerDiedMidMarkers).
func TestTakeoverMarkerCollectedAfterConflict(t *testing.T) {
	ctx := context.Background()
	a, b, reopen, top := liveWriter(t)
	// After the opener listed the tip, the live writer commits top+1.
	testHookListedTop = func(attempt int) {
		if attempt == 0 {
			put(t, a, "k2", "2")
		}
	}
	defer func() { testHookListedTop = nil }()
	cb := &collectOnConflict{Bucket: reopen(), key: walKey(top + 1), collect: func() {
		if err := a.Snapshot(ctx); err != nil {
			t.Errorf("Snapshot: %v", err)
		}
		if _, err := b.Get(ctx, walKey(top+1)); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s after the collection: %v, want it deleted (the test is broken)", walKey(top+1), err)
		}
	}}
	takeOverFencing(t, cb, a, "k1", "1", "k2", "2")
}

// TestTakeoverKeepsOldWriterBatchInHole: after an opener died with its
// markers half landed, the old writer, still alive, commits into the
// lowest hole (its next sequence) before the next opener fills it. That
// batch is acknowledged: the next opener fills only the holes left,
// replays it, and fences the old writer at the next hole.
func TestTakeoverKeepsOldWriterBatchInHole(t *testing.T) {
	ctx := context.Background()
	a, b, reopen, top := liveWriter(t)

	dieMidMarkers(t, reopen(), top+3)
	put(t, a, "k2", "2") // into the hole at top+1
	if _, err := b.Get(ctx, walKey(top+2)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("%s: %v, want a hole there (the test is broken)", walKey(top+2), err)
	}

	takeOverFencing(t, reopen(), a, "k1", "1", "k2", "2") // k2: the old writer's
}

// deadMarker writes, as an opener that then died would have, its open
// marker at seq alone.
func deadMarker(t *testing.T, b objstore.Bucket, seq uint64) {
	t.Helper()
	data, err := format.EncodeBatch(&format.Batch{Seq: seq, Writer: "dead-opener", Epoch: seq, Marker: true,
		Muts: []format.Mutation{markerMutation(seq, "dead-opener")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(context.Background(), walKey(seq), data, true); err != nil {
		t.Fatal(err)
	}
}

// TestHolesNotFilled: holes that fillHoles must leave alone, for Open to
// report as a lost batch rather than fill and open without it: nothing
// is written into them.
func TestHolesNotFilled(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// make leaves holes in the bucket (reopen opens it) of writer a,
		// which committed up to top, and returns the lowest.
		make func(t *testing.T, a *Engine, reopen func() objstore.Bucket, top uint64) uint64
		// tail: the loss is reported as a lost tail (TailLostError), not
		// a gap (CorruptionError).
		tail bool
	}{
		{"below the durable mark", func(t *testing.T, a *Engine, reopen func() objstore.Bucket, top uint64) uint64 {
			// A batch was durable there, and only a marker is above it
			// (a writer opened and closed without committing): the
			// log's tail is lost, open markers above it (see buriedTail).
			put(t, a, "k2", "2")
			lost := a.Stats().DurableSeq
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			c := mustOpen(t, Options{Bucket: reopen(), Heartbeat: time.Hour})
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := reopen().Delete(ctx, walKey(lost)); err != nil {
				t.Fatal(err)
			}
			return lost
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, reopen, top := liveWriter(t)
			hole := tc.make(t, a, reopen, top)
			_, err := Open(ctx, Options{Bucket: reopen(), Heartbeat: time.Hour, Takeover: true})
			testHookListedTop = nil
			b := reopen()
			var ce *CorruptionError
			var tl *TailLostError
			if tc.tail && !errors.As(err, &tl) {
				t.Fatalf("Open = %v, want a TailLostError", err)
			} else if !tc.tail && !errors.As(err, &ce) {
				t.Fatalf("Open = %v, want a CorruptionError", err)
			}
			if _, err := b.Get(ctx, walKey(hole)); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("%s after the Open: %v, want the hole left alone", walKey(hole), err)
			}
		})
	}
}

// TestTakeoverFenceKeptAfterWideDeadRange: a dead opener's range 64 wide
// leaves 63 holes. The next opener fills them, and the filler where the
// old writer, stalled, would write next keeps its epoch key (its WAL
// object is never collected) through more opens and a snapshot: the old
// writer's commit is fenced, not acknowledged and lost.
func TestTakeoverFenceKeptAfterWideDeadRange(t *testing.T) {
	ctx := context.Background()
	a, _, reopen, top := liveWriter(t)
	deadMarker(t, reopen(), top+keepEpochs)
	for i := range 5 {
		c, err := Open(ctx, Options{Bucket: reopen(), Heartbeat: time.Hour, Takeover: true})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if err := c.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
		if !hasKey(t, c, epochKey(top+1)) {
			t.Fatalf("open %d: %s pruned: the old writer's next sequence is unprotected", i, epochKey(top+1))
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	err := a.Update(ctx, func(tx *Tx) error { tx.Put("late", Inline([]byte("x"))); return nil })
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("stalled old writer's commit: %v, want ErrFenced", err)
	}
}

// TestTakeoverAfterManyDeadOpeners: openers that die one after the other
// mid-markers, each range above the last, do not make the store
// unopenable: the next opener fills every hole.
func TestTakeoverAfterManyDeadOpeners(t *testing.T) {
	_, _, reopen, top := liveWriter(t)
	for i := range uint64(5) {
		dieMidMarkers(t, reopen(), top+3+16*i)
	}
	c := mustOpen(t, Options{Bucket: reopen(), Heartbeat: time.Hour, Takeover: true})
	defer c.Close(context.Background())
	if got := dump(t, c); got["k1"] != "1" {
		t.Fatalf("state after the takeover: %v", got)
	}
}

// listHook runs hook before the n-th listing of wal/.
type listHook struct {
	objstore.Bucket
	n, at int
	hook  func()
}

func (l *listHook) List(ctx context.Context, prefix string) ([]objstore.ObjectInfo, error) {
	if prefix == "wal/" {
		if l.n++; l.n == l.at {
			l.hook()
		}
	}
	return l.Bucket.List(ctx, prefix)
}

func (l *listHook) Unwrap() objstore.Bucket { return l.Bucket }

// TestTakeoverReplacedDuringRecovery: a newer writer snapshots above the
// opener's markers and collects the WAL below, after the opener listed
// the snapshots and before it listed the WAL. What it collected looks
// like holes; the opener must find itself replaced (ErrFenced), not fill
// them and open on a state without the batches.
func TestTakeoverReplacedDuringRecovery(t *testing.T) {
	ctx := context.Background()
	_, _, reopen, top := liveWriter(t)
	raw := reopen()
	h := &listHook{Bucket: reopen(), at: 2} // recovery's listing (the first is writeMarker's)
	h.hook = func() {
		if err := raw.Put(ctx, snapKey(top+1000), []byte("x"), true); err != nil {
			t.Error(err)
		}
		if err := raw.Delete(ctx, walKey(top)); err != nil { // k1's batch, collected
			t.Error(err)
		}
	}
	c, err := Open(ctx, Options{Bucket: h, Heartbeat: time.Hour, Takeover: true})
	if err == nil {
		defer c.Kill()
		t.Fatalf("Open succeeded on a state of %v", dump(t, c))
	}
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Open = %v, want ErrFenced", err)
	}
	if _, err := raw.Get(ctx, walKey(top)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("%s: %v, want it left collected (not filled)", walKey(top), err)
	}
}

// hasKey reports whether e's state holds key.
func hasKey(t *testing.T, e *Engine, key string) bool {
	t.Helper()
	var ok bool
	if err := e.View(context.Background(), func(r *Reader) error {
		_, ok = r.Get(key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestOwnEpochKeyKeptAfterLostAttempt: an opener whose first range lost a
// sequence to another opener retries above it; its epoch then follows its
// own leftover markers, in a run of its writer's markers, and is still
// kept by pruning.
func TestOwnEpochKeyKeptAfterLostAttempt(t *testing.T) {
	ctx := context.Background()
	_, _, reopen, top := liveWriter(t)
	raw := reopen()
	testHookListedTop = func(attempt int) {
		if attempt == 0 {
			deadMarker(t, raw, top+8) // another opener wins one of ours
		}
	}
	defer func() { testHookListedTop = nil }()
	c := mustOpen(t, Options{Bucket: reopen(), Heartbeat: time.Hour, Takeover: true})
	testHookListedTop = nil
	defer c.Close(ctx)
	if c.epoch <= top+markerWidthFirst {
		t.Fatalf("epoch %d: want the second attempt's, above %d (the test is broken)", c.epoch, top+markerWidthFirst)
	}
	put(t, c, "k2", "2")
	if err := c.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if !hasKey(t, c, epochKey(c.epoch)) {
		t.Fatalf("%s pruned", epochKey(c.epoch))
	}
	if hasKey(t, c, epochKey(c.epoch+1)) {
		t.Fatalf("%s kept: the writer's own markers above its epoch are nobody's next sequence", epochKey(c.epoch+1))
	}
	if _, err := raw.Get(ctx, walKey(c.epoch)); err != nil {
		t.Fatalf("%s after a snapshot: %v, want the marker kept", walKey(c.epoch), err)
	}
}

// TestOpenerFencedBySnapshotAboveItsMarkers: a snapshot above an opener's
// markers, appearing after it claimed them, is a newer writer's: the
// opener fails with ErrFenced even though its WAL has no gap.
func TestOpenerFencedBySnapshotAboveItsMarkers(t *testing.T) {
	ctx := context.Background()
	_, _, reopen, top := liveWriter(t)
	raw := reopen()
	testHookListedTop = func(int) {
		if err := raw.Put(ctx, snapKey(top+1000), []byte("x"), true); err != nil && !errors.Is(err, objstore.ErrExists) {
			t.Error(err)
		}
	}
	defer func() { testHookListedTop = nil }()
	c, err := Open(ctx, Options{Bucket: reopen(), Heartbeat: time.Hour, Takeover: true})
	if err == nil {
		c.Kill()
		t.Fatal("Open succeeded")
	}
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Open = %v, want ErrFenced", err)
	}
}

// TestTakeoverFenceKeptAmongAlternatingHoles: a dead opener's markers
// landed at every other sequence, so the next opener's fillers alternate
// with them, each the first of its run: 65 epoch keys from one Open. The
// filler where the stalled old writer writes next is still kept (pruning
// counts writers, not keys), and the old writer is fenced.
func TestTakeoverFenceKeptAmongAlternatingHoles(t *testing.T) {
	ctx := context.Background()
	a, _, reopen, top := liveWriter(t)
	raw := reopen()
	for s := top + 2; s <= top+64; s += 2 {
		deadMarker(t, raw, s)
	}
	c := takeOverFencingAfterSnapshot(t, reopen(), a, top+1)
	defer c.Close(ctx)
}

// takeOverFencingAfterSnapshot opens b with takeover, commits, snapshots
// (which collects what pruning let go), checks that the epoch key of
// fence, the old writer's next sequence, is kept, and that old is fenced.
func takeOverFencingAfterSnapshot(t *testing.T, b objstore.Bucket, old *Engine, fence uint64) *Engine {
	t.Helper()
	ctx := context.Background()
	c := mustOpen(t, Options{Bucket: b, Heartbeat: time.Hour, Takeover: true})
	put(t, c, "k2", "2")
	if err := c.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if !hasKey(t, c, epochKey(fence)) {
		t.Fatalf("%s pruned: the old writer's next sequence is unprotected", epochKey(fence))
	}
	err := old.Update(ctx, func(tx *Tx) error { tx.Put("late", Inline([]byte("x"))); return nil })
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("stalled old writer's commit: %v, want ErrFenced", err)
	}
	return c
}
