package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
	"github.com/stepwell/stepwell/internal/testenv"
	"golang.org/x/sync/errgroup"
)

// smallSegments makes segments tiny for the test, so that they fill and
// roll over after a few batches.
func smallSegments(t *testing.T) { segmentBlocks(t, 4, 16) }

// segmentBlocks sizes segments for the test: first blocks for the first,
// doubling up to max blocks. Engines that the test kills or closes in a
// cleanup registered after this one stop before the sizes are restored.
func segmentBlocks(t *testing.T, first, max int64) {
	old := segmentSizes
	segmentSizes.first, segmentSizes.max = first*format.SegmentAlign, max*format.SegmentAlign
	t.Cleanup(func() { segmentSizes = old })
}

func fileStore(t *testing.T) (dir string, open func() objstore.Bucket) {
	dir = t.TempDir()
	return dir, func() objstore.Bucket { return objstoretest.Open(t, "file://"+dir) }
}

// walObjects returns the WAL's batch objects and segments.
func walObjects(t *testing.T, b objstore.Bucket) (singles, segs []uint64) {
	t.Helper()
	objs, err := b.List(context.Background(), "wal/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if s, ok := parseSeqKey("wal/", o.Key); ok {
			singles = append(singles, s)
		} else if s, ok := parseSegKey(o.Key); ok {
			segs = append(segs, s)
		} else {
			t.Errorf("unexpected WAL object %s", o.Key)
		}
	}
	return singles, segs
}

// waitSegmentReady waits until the engine has a staged segment, so that the
// next batch goes into a segment.
func waitSegmentReady(t *testing.T, e *Engine) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "a WAL segment staged", func() bool {
		e.seg.mu.Lock()
		defer e.seg.mu.Unlock()
		return e.seg.spare.seg != nil
	})
}

// On file:// the WAL goes into segments, which roll over when full, are
// collected once a snapshot covers them, and are replayed at reopen.
func TestSegmentsRollCollectAndRecover(t *testing.T) {
	smallSegments(t)
	ctx := context.Background()
	_, open := fileStore(t)
	counting := objstore.NewCounting(open())
	e := mustOpen(t, Options{Bucket: counting, SnapshotMaxObjects: 40, SnapshotMinBytes: 1})
	waitSegmentReady(t, e)
	want := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 60; i++ {
				k := fmt.Sprintf("g%d-%02d", g, i%25)
				v := fmt.Sprintf("%d-%s", i, strings.Repeat("v", i*37))
				put(t, e, k, v)
				mu.Lock()
				want[k] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// A collected segment is staged again once a collection
	// ran before the next staging, which is timing: keep committing, a
	// batch at a time, until one was.
	testenv.Eventually(t, 10*time.Second, "a collected segment staged again", func() bool {
		e.seg.mu.Lock()
		reused := e.seg.reused
		e.seg.mu.Unlock()
		if reused == 0 {
			put(t, e, "g0-00", "more")
			want["g0-00"] = "more"
		}
		return reused > 0
	})
	// Close abandons a snapshot and collection in progress: wait for the
	// last one triggered to finish.
	testenv.Eventually(t, 10*time.Second, "the last background snapshot and its collection done", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return !e.snapActive
	})
	st := e.Stats()
	if st.SegmentBatches == 0 {
		t.Fatalf("no batch went into a segment: %+v", st)
	}
	if st.Snapshots == 0 {
		t.Fatalf("no snapshot: %+v", st)
	}
	// Collection deletes segments, snapshots and the few batches written as
	// objects, not one key per sequence.
	if d := counting.Counts().Deletes; d > int64(st.Batches-st.SegmentBatches)+int64(2*st.Snapshots)+20 {
		t.Errorf("%d deletes for %d batches (%d in segments) and %d snapshots", d, st.Batches, st.SegmentBatches, st.Snapshots)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	probe := open()
	_, segs := walObjects(t, probe)
	if len(segs) == 0 {
		t.Fatal("no WAL segment in the bucket")
	}
	// The segments are staged at 4 to 16 blocks (by the write rate); 480
	// batches of a block or more fill dozens. Collection keeps only those
	// the newest snapshot does not cover (how many is timing: how many
	// batches came after it), and covered ones up to keepReusable bytes,
	// to stage again. A segment is covered when the next one starts at or below
	// the snapshot's sequence + 1; the newest never is.
	snaps, err := probe.List(ctx, "snap/")
	if err != nil || len(snaps) == 0 {
		t.Fatalf("List(snap/) = %v, %v; want the newest snapshot", snaps, err)
	}
	snapSeq, ok := parseSeqKey("snap/", snaps[len(snaps)-1].Key)
	if !ok {
		t.Fatalf("unexpected snapshot key %s", snaps[len(snaps)-1].Key)
	}
	sizes := map[uint64]int64{}
	objs, err := probe.List(ctx, "wal/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if s, ok := parseSegKey(o.Key); ok {
			sizes[s] = o.Size
		}
	}
	var covered []uint64
	var coveredBytes int64
	for i := 0; i+1 < len(segs); i++ {
		if segs[i+1]-1 <= snapSeq {
			covered = append(covered, segs[i])
			coveredBytes += sizes[segs[i]]
		}
	}
	if coveredBytes > keepReusable() {
		t.Errorf("%d segments (%v) left that snapshot %d covers, of %v: collection is not deleting covered ones", len(covered), covered, snapSeq, segs)
	}
	e2 := mustOpen(t, Options{Bucket: probe})
	if got := dump(t, e2); !maps.Equal(got, want) {
		t.Fatalf("state after reopen differs: got %d keys, want %d", len(got), len(want))
	}
	// The next writer keeps appending, and collects the earlier writer's
	// segments at its first collection.
	put(t, e2, "after", "reopen")
	want["after"] = "reopen"
	if err := e2.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if _, err := probe.Get(ctx, segKey(s)); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("earlier writer's segment %s survived the new writer's collection: %v", segKey(s), err)
		}
	}
	if err := e2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e3 := mustOpen(t, Options{Bucket: open()})
	defer e3.Close(ctx)
	if got := dump(t, e3); !maps.Equal(got, want) {
		t.Fatalf("state after second reopen differs: got %d keys, want %d", len(got), len(want))
	}
}

// killWithBatches commits keys one batch each into a segment, then crashes
// the engine. It returns the segment's first sequence and the sequence of
// each key's batch.
func killWithBatches(t *testing.T, open func() objstore.Bucket, keys ...string) (uint64, map[string]uint64) {
	t.Helper()
	e := mustOpen(t, Options{Bucket: open()})
	waitSegmentReady(t, e)
	seqs := map[string]uint64{}
	for _, k := range keys {
		put(t, e, k, "value of "+k)
		seqs[k] = e.Stats().DurableSeq
	}
	if got := e.Stats().SegmentBatches; got != uint64(len(keys)) {
		t.Fatalf("%d of %d batches went into segments", got, len(keys))
	}
	first := seqs[keys[0]]
	e.Kill()
	return first, seqs
}

// segmentRecordOffset returns where the n-th record (from 0) of a segment
// holding one-block records starts: after the header's block.
func segmentRecordOffset(n int) int64 { return int64(n+1) * format.SegmentAlign }

func damage(t *testing.T, path string, off int64, fn func([]byte)) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, format.SegmentAlign)
	if _, err := f.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	fn(buf)
	if _, err := f.WriteAt(buf, off); err != nil {
		t.Fatal(err)
	}
}

// A write cut short by a crash ends the log: the batches before it are
// recovered, the torn one is not (it was never acknowledged), and the next
// writer continues from there.
func TestSegmentTornTailEndsLog(t *testing.T) {
	ctx := context.Background()
	dir, open := fileStore(t)
	first, seqs := killWithBatches(t, open, "a", "b", "c")
	// Tear c's record: its second half never reached the disk.
	damage(t, filepath.Join(dir, filepath.FromSlash(segKey(first))), segmentRecordOffset(2), func(b []byte) {
		n := format.SegmentRecordHeaderLen + 40
		clear(b[n:])
	})
	e := mustOpen(t, Options{Bucket: open()})
	if got, want := dump(t, e), map[string]string{"a": "value of a", "b": "value of b"}; !maps.Equal(got, want) {
		t.Fatalf("after a torn tail: %v, want %v", got, want)
	}
	if e.Epoch() != seqs["c"] {
		t.Errorf("new writer's marker at %d, want %d (the torn batch's sequence)", e.Epoch(), seqs["c"])
	}
	put(t, e, "d", "value of d")
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e2 := mustOpen(t, Options{Bucket: open()})
	defer e2.Close(ctx)
	if got, want := dump(t, e2), map[string]string{"a": "value of a", "b": "value of b", "d": "value of d"}; !maps.Equal(got, want) {
		t.Fatalf("after the next writer: %v, want %v", got, want)
	}
}

// Damage to a record that later records follow is not a torn write (the
// writer writes one record at a time): the writer refuses to open, naming
// the segment, rather than drop acknowledged batches.
func TestSegmentDamageBeforeValidRecordIsCorruption(t *testing.T) {
	ctx := context.Background()
	dir, open := fileStore(t)
	first, _ := killWithBatches(t, open, "a", "b", "c")
	damage(t, filepath.Join(dir, filepath.FromSlash(segKey(first))), segmentRecordOffset(1), func(b []byte) {
		b[format.SegmentRecordHeaderLen+20] ^= 0x10
	})
	// Nothing is written: the error is the same the second time.
	for range 2 {
		b := open()
		_, err := Open(ctx, Options{Bucket: b})
		b.Close() // a failed Open leaves the bucket to the caller
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Key != segKey(first) || !errors.Is(err, format.ErrCorrupt) {
			t.Fatalf("Open = %v, want a CorruptionError naming %s", err, segKey(first))
		}
	}
}

// A damaged record inside a segment, with every later record gone too, is
// indistinguishable from a torn tail; but a batch missing in the middle of
// the WAL (its segment deleted) is a gap.
func TestSegmentMissingIsGap(t *testing.T) {
	ctx := context.Background()
	_, open := fileStore(t)
	first, _ := killWithBatches(t, open, "a", "b")
	e := mustOpen(t, Options{Bucket: open()})
	put(t, e, "c", "value of c")
	e.Kill()
	probe := open()
	if err := probe.Delete(ctx, segKey(first)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, Options{Bucket: probe})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Key != walKey(first) {
		t.Fatalf("Open with a deleted segment = %v, want a CorruptionError naming %s", err, walKey(first))
	}
}

// When no segment is staged, batches go to WAL objects; the WAL then mixes
// both, and recovery reads both in order. Stores written before segments
// existed (objects only) open the same way.
func TestSegmentsMixWithObjects(t *testing.T) {
	ctx := context.Background()
	_, open := fileStore(t)
	want := map[string]string{}
	// A store written with objects only: a wrapper that hides the
	// bucket's segments (and lock).
	old := mustOpen(t, Options{Bucket: struct{ objstore.Bucket }{open()}})
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("old%d", i)
		put(t, old, k, k)
		want[k] = k
	}
	if old.Stats().SegmentBatches != 0 {
		t.Fatal("a bucket without segments wrote segments")
	}
	old.Kill()

	f := objstoretest.NewFault(open(), 1)
	// Staging fails: everything goes to objects.
	f.SetMatch(func(op objstoretest.Op, key string) bool { return op == objstoretest.OpPut && key == "" })
	f.SetErrorRate(objstoretest.OpPut, 1)
	e := mustOpen(t, Options{Bucket: f})
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("obj%d", i)
		put(t, e, k, k)
		want[k] = k
	}
	if e.Stats().SegmentBatches != 0 {
		t.Fatal("batches went into segments that failed to stage")
	}
	// After a failure staging waits stageRetry, not one attempt a batch.
	if n := f.Injected(); n != 1 {
		t.Errorf("%d staging attempts failed, want 1", n)
	}
	// Staging works again: the next batches go into a segment.
	f.Reset()
	e.seg.mu.Lock()
	e.seg.retryAt = time.Time{}
	e.seg.mu.Unlock()
	e.prepareSegment()
	waitSegmentReady(t, e)
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("seg%d", i)
		put(t, e, k, k)
		want[k] = k
	}
	if got := e.Stats().SegmentBatches; got != 5 {
		t.Fatalf("%d batches in segments, want 5", got)
	}
	e.Kill()
	singles, segs := walObjects(t, open())
	if len(singles) < 12 || len(segs) != 1 {
		t.Fatalf("WAL has objects %v and segments %v; want both", singles, segs)
	}
	e2 := mustOpen(t, Options{Bucket: open()})
	defer e2.Close(ctx)
	if got := dump(t, e2); !maps.Equal(got, want) {
		t.Fatalf("state differs: got %v, want %v", got, want)
	}
}

// faultySegmentWriter opens a writer on a fresh file store through a
// fault-injecting bucket (no faults set yet) and waits for its first
// segment; open opens the store again, without faults.
func faultySegmentWriter(t *testing.T) (open func() objstore.Bucket, f *objstoretest.Fault, e *Engine) {
	t.Helper()
	_, open = fileStore(t)
	f = objstoretest.NewFault(open(), 1)
	e = mustOpen(t, Options{Bucket: f})
	waitSegmentReady(t, e)
	return open, f, e
}

// A read-only engine reads the segments the writer is appending to, and
// Refresh catches up with records written since, across a roll-over.
func TestSegmentReaderRefresh(t *testing.T) {
	smallSegments(t)
	ctx := context.Background()
	_, open := fileStore(t)
	e := mustOpen(t, Options{Bucket: open()})
	defer e.Close(ctx)
	waitSegmentReady(t, e)
	put(t, e, "k0", "v0")
	r, err := OpenReadOnly(ctx, Options{Bucket: open()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if got := dump(t, r); got["k0"] != "v0" {
		t.Fatalf("reader state %v", got)
	}
	for i := 1; i < 40; i++ {
		put(t, e, fmt.Sprintf("k%d", i), strings.Repeat("v", 3000))
		if i%7 == 0 {
			if err := r.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := dump(t, r); len(got) != i+1 {
				t.Fatalf("after Refresh at %d the reader has %d keys", i, len(got))
			}
		}
	}
	if _, segs := walObjects(t, open()); len(segs) < 2 {
		t.Fatalf("the writer did not roll over to a new segment: %v", segs)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, r), dump(t, e); !maps.Equal(got, want) {
		t.Fatalf("reader has %d keys, writer %d", len(got), len(want))
	}
}

// A reader follows the segment being written in place: its first load
// reads the log and a piece past it, not the zeros after (the segment is
// 1 MiB here), and each Refresh reads only what was written since.
func TestSegmentReaderReadsOnlyWhatIsNew(t *testing.T) {
	ctx := context.Background()
	_, open := fileStore(t)
	e := mustOpen(t, Options{Bucket: open()})
	defer e.Close(ctx)
	waitSegmentReady(t, e)
	for i := range 5 {
		put(t, e, fmt.Sprint("k", i), "v")
	}
	c := objstore.NewCounting(open())
	r, err := OpenReadOnly(ctx, Options{Bucket: c})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if n := c.Counts().BytesRead; n > 2*followChunk {
		t.Fatalf("opening read %d bytes of a segment holding 5 records, want <= %d", n, 2*followChunk)
	}
	for round := range 20 {
		put(t, e, fmt.Sprint("r", round), "v")
		before := c.Counts().BytesRead
		if err := r.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if n := c.Counts().BytesRead - before; n > followChunk+format.SegmentAlign {
			t.Fatalf("round %d: Refresh read %d bytes for one new record, want <= %d", round, n, followChunk+format.SegmentAlign)
		}
		if got, want := dump(t, r), dump(t, e); !maps.Equal(got, want) {
			t.Fatalf("round %d: reader has %d keys, writer %d", round, len(got), len(want))
		}
	}
	if st := e.Stats(); st.SegmentBatches == 0 {
		t.Fatal("the writer wrote no segment")
	}
}

// A Refresh that fails on a record it read (one that passes the segment's
// checks but does not decode) does not move the reader's place past it:
// once the writer has written that sequence for real, the next Refresh
// reads and applies it.
func TestSegmentReaderRetriesAFailedRecord(t *testing.T) {
	ctx := context.Background()
	dir, open := fileStore(t)
	e := mustOpen(t, Options{Bucket: open()})
	defer e.Close(ctx)
	waitSegmentReady(t, e)
	put(t, e, "k0", "v")
	r, err := OpenReadOnly(ctx, Options{Bucket: open()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	cur := r.follow.cur
	if cur == nil || cur.N == 0 {
		t.Fatalf("the reader follows no segment with records: %+v", cur)
	}
	// Where the writer's next record goes, a record of this segment's use
	// whose object is not a batch.
	first := cur.Next() - cur.N
	path := filepath.Join(dir, filepath.FromSlash(segKey(first)))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, format.SegmentHeaderLen)
	if _, err := f.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	rec := format.AppendSegmentRecord(nil, first, binary.BigEndian.Uint64(head[8:16]), []byte("not a batch"))
	if _, err := f.WriteAt(rec, cur.Off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var ce *CorruptionError
	if err := r.Refresh(ctx); !errors.As(err, &ce) {
		t.Fatalf("Refresh over a record that is not a batch: %v, want a CorruptionError", err)
	}
	put(t, e, "k1", "v") // the writer writes that record over it
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, r), dump(t, e); !maps.Equal(got, want) {
		t.Fatalf("reader %v, writer %v", got, want)
	}
}

// A reader following segments while the writer rolls over, snapshots,
// collects and reuses them (a segment it was following is renamed away
// and staged again under another name) keeps the writer's state, whether
// it refreshes often or seldom; two readers refresh concurrently too.
func TestSegmentReaderFollowsReuse(t *testing.T) {
	segmentBlocks(t, 4, 4)
	ctx := context.Background()
	_, open := fileStore(t)
	e := mustOpen(t, Options{Bucket: open()})
	t.Cleanup(e.Kill) // before segmentSizes is restored
	r, err := OpenReadOnly(ctx, Options{Bucket: open()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 150 {
		for range rng.IntN(5) {
			put(t, e, fmt.Sprint("k", rng.IntN(40)), fmt.Sprint(round))
		}
		if rng.IntN(6) == 0 {
			if err := e.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(3) == 0 {
			continue // refresh later
		}
		var g errgroup.Group
		for range 2 {
			g.Go(func() error { return r.Refresh(ctx) })
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got, want := dump(t, r), dump(t, e); !maps.Equal(got, want) {
			t.Fatalf("round %d: reader %v, writer %v", round, got, want)
		}
	}
	e.seg.mu.Lock()
	reused := e.seg.reused
	e.seg.mu.Unlock()
	if reused < 5 {
		t.Fatalf("%d segments reused, want several", reused)
	}
}

// A Refresh that must reload from a snapshot (the WAL it had not read was
// collected) and fails half-way leaves the reader's state and its index
// as they were, not half-built; the next Refresh reloads.
func TestFailedReloadKeepsReaderState(t *testing.T) {
	ctx := context.Background()
	_, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: reopen()})
	defer e.Close(ctx)
	for i := range 10 {
		put(t, e, fmt.Sprint("k", i), "v")
	}
	f := objstoretest.NewFault(reopen(), 1)
	ix := &mirror{m: map[string]string{}}
	r, err := OpenReadOnly(ctx, Options{Bucket: f, Indexer: ix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	before := dump(t, r)
	for i := range 10 {
		put(t, e, fmt.Sprint("m", i), "v")
	}
	for range 2 { // the second collects the WAL the reader has not read
		if err := e.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
		put(t, e, "z", "v")
	}
	f.SetMatch(func(op objstoretest.Op, key string) bool { return strings.HasPrefix(key, "snap/") })
	f.SetErrorRate(objstoretest.OpGet, 1)
	if err := r.Refresh(ctx); err == nil {
		t.Fatal("Refresh reloaded with every snapshot read failing")
	}
	if got := dump(t, r); !maps.Equal(got, before) {
		t.Fatalf("after a failed reload the reader has %d keys, before %d", len(got), len(before))
	}
	if got, want := indexed(ix), rawState(t, r); !maps.Equal(got, want) {
		t.Fatalf("after a failed reload the index has %d keys, the state %d", len(got), len(want))
	}
	f.Reset()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, r), dump(t, e); !maps.Equal(got, want) {
		t.Fatalf("after a good Refresh the reader has %d keys, the writer %d", len(got), len(want))
	}
	if got, want := indexed(ix), rawState(t, r); !maps.Equal(got, want) {
		t.Fatalf("after a good Refresh the index has %d keys, the state %d", len(got), len(want))
	}
}

// indexed returns a mirror's keys outside the engine's own.
func indexed(ix *mirror) map[string]string {
	m := map[string]string{}
	for k, v := range ix.m {
		if !strings.HasPrefix(k, epochPrefix) {
			m[k] = v
		}
	}
	return m
}

// A collected segment is staged again with its old records in it; they
// carry the old use's nonce and first sequence, so recovery, strict as it
// is, reads past none of them.
//
// Segments here are four blocks: the header and three one-block records.
// The test waits for the spare before each batch that opens a segment, so
// no batch falls back to a WAL object for want of one.
func TestSegmentReuseIgnoresStaleRecords(t *testing.T) {
	segmentBlocks(t, 4, 4)
	ctx := context.Background()
	_, open := fileStore(t)
	e := mustOpen(t, Options{Bucket: open()})
	t.Cleanup(e.Kill) // before segmentSizes is restored: the preparer reads it
	want := map[string]string{}
	n := 0
	puts := func(k int) { // each batch takes one block
		for range k {
			key := fmt.Sprintf("k%02d", n)
			put(t, e, key, key)
			want[key] = key
			n++
		}
	}
	waitSegmentReady(t, e)
	puts(3) // segment A full
	waitSegmentReady(t, e)
	puts(1)                                 // B; C is being staged, new
	if err := e.Snapshot(ctx); err != nil { // covers A: kept for reuse
		t.Fatal(err)
	}
	puts(2) // B full
	waitSegmentReady(t, e)
	puts(1) // C; A is staged next
	waitSegmentReady(t, e)
	puts(2) // C full
	puts(2) // D: A again, two new records, A's third left behind them
	e.seg.mu.Lock()
	reused, own := e.seg.reused, len(e.seg.own)
	e.seg.mu.Unlock()
	if reused != 1 {
		t.Fatalf("%d segments reused, want 1", reused)
	}
	if st := e.Stats(); st.SegmentBatches != uint64(n) {
		t.Fatalf("%d of %d batches in segments", st.SegmentBatches, n)
	}
	e.Kill()
	_, segs := walObjects(t, open())
	if len(segs) != own {
		t.Fatalf("segments %v, want %d (A was renamed away)", segs, own)
	}
	e2 := mustOpen(t, Options{Bucket: open()})
	defer e2.Close(ctx)
	if got := dump(t, e2); !maps.Equal(got, want) {
		t.Fatalf("state after reopen: %v, want %v", got, want)
	}
}

// TestCollectsEmptySegmentAtMarker: a writer that published a segment and
// died before its first record leaves a segment starting at the sequence
// where the next writer's marker goes. That writer's collection deletes it
// (it holds no record) instead of leaving it for the writer after.
func TestCollectsEmptySegmentAtMarker(t *testing.T) {
	ctx := context.Background()
	_, open := fileStore(t)
	e := mustOpen(t, Options{Bucket: open()})
	put(t, e, "a", "1")
	top := e.Stats().DurableSeq
	e.Kill()
	b := open()
	sg, _ := objstore.AsSegmenter(b)
	seg, err := sg.NewSegment(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := seg.Publish(ctx, segKey(top+1)); err != nil {
		t.Fatal(err)
	}
	seg.Close()
	b.Close()
	e2 := mustOpen(t, Options{Bucket: open()})
	if e2.Epoch() != top+1 {
		t.Fatalf("marker at %d, want %d (after the empty segment's first)", e2.Epoch(), top+1)
	}
	for i := range 3 {
		put(t, e2, fmt.Sprint("k", i), "v")
		if err := e2.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := e2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p := open()
	defer p.Close()
	if _, err := p.Get(ctx, segKey(top+1)); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s survived the next writer's collections: %v", segKey(top+1), err)
	}
}

// TestRefreshAcrossCollectionGap: a collection that failed to delete one
// WAL object leaves it below a newer snapshot, with the WAL after it gone.
// A reader that finds it applies it, then must not take the gap after it
// for the end of the log: it reloads from the snapshot and sees everything
// acknowledged.
func TestRefreshAcrossCollectionGap(t *testing.T) {
	ctx := context.Background()
	_, open := fileStore(t)
	f := objstoretest.NewFault(struct{ objstore.Bucket }{open()}, 1)
	w := mustOpen(t, Options{Bucket: f})
	defer w.Close(ctx)
	put(t, w, "k0", "v")
	r, err := OpenReadOnly(ctx, Options{Bucket: open()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	d := r.Stats().DurableSeq
	f.SetMatch(func(op objstoretest.Op, key string) bool { return op == objstoretest.OpDelete && key == walKey(d+1) })
	f.SetErrorRate(objstoretest.OpDelete, 1)
	for i := 1; i <= 5; i++ {
		put(t, w, fmt.Sprint("k", i), "v")
	}
	if err := w.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	put(t, w, "k6", "v") // acknowledged before Refresh starts
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, r); len(got) != 7 || got["k6"] == "" {
		t.Errorf("after Refresh the reader holds %d keys (durable %d, writer at %d), want k0-k6", len(got), r.Stats().DurableSeq, w.Stats().DurableSeq)
	}
}

// segmentsNoLock is a bucket with segments but no OS lock.
type segmentsNoLock struct {
	objstore.Bucket
	objstore.Segmenter
}

// TestSegmentsOnlyWithOSLock: records appended in place to a segment create
// no object, so a successor's marker cannot fence their writer: segments
// are used only where an OS lock keeps a second writer out. On a bucket
// with segments and no lock, a writer taken over is fenced as on any
// bucket, and nothing it acknowledged is lost.
func TestSegmentsOnlyWithOSLock(t *testing.T) {
	ctx := context.Background()
	_, open := fileStore(t)
	mk := func() objstore.Bucket {
		b := open()
		sg, _ := objstore.AsSegmenter(b)
		return segmentsNoLock{b, sg}
	}
	a := mustOpen(t, Options{Bucket: mk()})
	put(t, a, "a1", "v")
	if n := a.Stats().SegmentBatches; n != 0 {
		t.Fatalf("%d batches written into segments without an OS lock", n)
	}
	b := mustOpen(t, Options{Bucket: mk(), Takeover: true})
	errA := a.Update(ctx, func(tx *Tx) error { tx.Put("a2", Inline([]byte("v"))); return nil })
	if !errors.Is(errA, ErrFenced) {
		t.Errorf("write after a takeover: %v, want ErrFenced", errA)
	}
	b.Kill()
	a.Kill()
	c := mustOpen(t, Options{Bucket: open()})
	defer c.Close(ctx)
	got := dump(t, c)
	if got["a1"] == "" || errA == nil && got["a2"] == "" {
		t.Errorf("recovered %v after acknowledged a1 and a2 (a2: %v)", got, errA)
	}
}

// TestCollectionRetriesFailedDeletes: garbage whose delete failed is
// deleted at the next collection instead of being left for the next
// writer.
func TestCollectionRetriesFailedDeletes(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	f := objstoretest.NewFault(b, 1)
	e := mustOpen(t, Options{Bucket: f})
	defer e.Close(ctx)
	put(t, e, "k0", "v")
	doomed := walKey(e.Stats().DurableSeq)
	f.SetMatch(func(op objstoretest.Op, key string) bool { return op == objstoretest.OpDelete && key == doomed })
	f.SetErrorRate(objstoretest.OpDelete, 1)
	put(t, e, "k1", "v")
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	p := reopen()
	defer p.Close()
	if _, err := p.Get(ctx, doomed); err != nil {
		t.Fatalf("the injected delete failure did not leave %s: %v", doomed, err)
	}
	f.SetErrorRate(objstoretest.OpDelete, 0)
	put(t, e, "k2", "v")
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, doomed); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s not deleted by the next collection: %v", doomed, err)
	}
}

// TestFailedPublishLeavesNoSegment: a segment whose Publish failed after
// its name was made (an ambiguous failure) holds no record: its batch goes
// to a WAL object, and the writer's next collection deletes the segment.
func TestFailedPublishLeavesNoSegment(t *testing.T) {
	ctx := context.Background()
	open, f, e := faultySegmentWriter(t)
	defer e.Close(ctx)
	seq := e.Stats().DurableSeq + 1
	f.SetMatch(func(op objstoretest.Op, key string) bool { return op == objstoretest.OpPut && key == segKey(seq) })
	f.SetAmbiguousPutRate(1) // published, reported failed
	put(t, e, "a", "1")
	if n := e.Stats().SegmentBatches; n != 0 {
		t.Fatalf("%d batches went into a segment whose Publish failed", n)
	}
	p := open()
	defer p.Close()
	if _, err := p.Get(ctx, segKey(seq)); err != nil {
		t.Fatalf("the ambiguous Publish left no %s: %v", segKey(seq), err)
	}
	f.Reset()
	waitSegmentReady(t, e)
	put(t, e, "b", "2")
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, segKey(seq)); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s left after a collection: %v", segKey(seq), err)
	}
	if got := dump(t, e); got["a"] != "1" || got["b"] != "2" {
		t.Errorf("state %v", got)
	}
}

// TestCollectionBoundsFailedDeletes: while every delete fails, the list of
// deletes to retry stays bounded; once deletes work again, the next
// collection (which then lists the bucket) removes every leftover.
func TestCollectionBoundsFailedDeletes(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	f := objstoretest.NewFault(b, 1)
	f.SetMatch(func(op objstoretest.Op, key string) bool { return op == objstoretest.OpDelete })
	f.SetErrorRate(objstoretest.OpDelete, 1)
	e := mustOpen(t, Options{Bucket: f, Logger: slog.New(slog.DiscardHandler)})
	defer e.Close(ctx)
	most := 0
	for i := 0; i < maxUndeleted/10+20; i++ {
		for j := range 12 {
			put(t, e, fmt.Sprint("k", j), fmt.Sprint(i))
		}
		if err := e.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		most = max(most, len(e.undeleted))
		e.mu.Unlock()
	}
	if most > maxUndeleted {
		t.Fatalf("%d failed deletes kept, want at most %d", most, maxUndeleted)
	}
	p := reopen()
	defer p.Close()
	before, err := p.List(ctx, "wal/")
	if err != nil {
		t.Fatal(err)
	}
	f.SetErrorRate(objstoretest.OpDelete, 0)
	put(t, e, "last", "v")
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := p.List(ctx, "wal/")
	if err != nil {
		t.Fatal(err)
	}
	if len(before) < maxUndeleted || len(after) > 3 {
		t.Fatalf("WAL objects: %d while deletes failed, %d after a collection that could delete, want >= %d then <= 3", len(before), len(after), maxUndeleted)
	}
}

// A new segment is sized to last about segmentSpan at the rate the last
// full one filled: a fast writer gets large ones, a slow one the
// smallest, in powers of two of the first.
func TestSegmentFitsWriteRate(t *testing.T) {
	segmentBlocks(t, 4, 64)
	first, max := segmentSizes.first, segmentSizes.max
	for _, c := range []struct {
		used int64
		d    time.Duration
		want int64
	}{
		{first, 0, max},                         // no time at all: the largest
		{max, segmentSpan / 100, max},           // far faster than a span: capped
		{first, 100 * segmentSpan, first},       // slow: the smallest
		{4 * first, segmentSpan, 4 * first},     // filled in one span: the same
		{3 * first, segmentSpan, 4 * first},     // rounded up to a power of two
		{4 * first, 2 * segmentSpan, 2 * first}, // half the rate: half the size
	} {
		if got := fitSize(c.used, c.d); got != c.want {
			t.Errorf("fitSize(%d, %v) = %d, want %d", c.used, c.d, got, c.want)
		}
	}
}

// Collection keeps covered segments of any size for reuse, up to
// keepReusable bytes, and never one abandoned after a failed write.
func TestSegmentCollectKeepsAnySize(t *testing.T) {
	segmentBlocks(t, 4, 16)
	b := int64(format.SegmentAlign)
	s := newSegLog(nil, nil)
	s.own = []ownSeg{{1, 4 * b}, {10, 8 * b}, {20, 0}, {30, 16 * b}, {40, 16 * b}, {50, 4 * b}}
	doomed := s.collect(49) // all but the newest are covered
	var kept int64
	var keys []string
	for _, o := range s.reusable {
		kept += o.size
		keys = append(keys, segKey(o.first))
	}
	// 4+8 blocks, then 16 (28 of 32), not the other 16 nor the abandoned one.
	if want := []string{segKey(1), segKey(10), segKey(30)}; !slices.Equal(keys, want) {
		t.Errorf("kept %v (%d bytes), want %v", keys, kept, want)
	}
	if want := []string{segKey(20), segKey(40)}; !slices.Equal(doomed, want) {
		t.Errorf("deleted %v, want %v", doomed, want)
	}
	if len(s.own) != 1 || s.own[0].first != 50 {
		t.Errorf("own %v, want the newest alone", s.own)
	}
}

// The snapshot threshold counts the WAL's batches as decoded, not as
// compressed: a snapshot comes after as much to replay as before
// compression, so a recovery's work stays where it was.
func TestSnapshotCountsBatchesUncompressed(t *testing.T) {
	b, _ := memBucket(t)
	e := mustOpen(t, Options{Bucket: b, SnapshotMinBytes: 256 << 10, SnapshotMaxObjects: 1 << 30})
	defer e.Close(context.Background())
	v := strings.Repeat("compressible ", 800) // 10 KiB
	for i := range 40 {
		put(t, e, fmt.Sprintf("k%02d", i), v)
	}
	if st := e.Stats(); st.WALBytes >= 128<<10 {
		t.Fatalf("WAL bytes %d for 400 KiB of puts: not compressed", st.WALBytes)
	}
	testenv.Eventually(t, 10*time.Second, "a snapshot after 400 KiB of batches", func() bool {
		return e.Stats().Snapshots > 0
	})
}

// An idle committer under light load starts the staged segment once the
// current one is nearly full, named for the next batch: the commit that
// would have found the segment full does not wait for its publication.
// The records before and after the switch replay at reopen, also after a
// kill right after the switch, before any record went into the new one.
func TestIdleCommitterRotatesNearlyFullSegment(t *testing.T) {
	segmentBlocks(t, 16, 16) // a header block and 15 records of a small put
	for _, killEarly := range []bool{false, true} {
		t.Run(fmt.Sprint("killed_before_a_record=", killEarly), func(t *testing.T) {
			_, open := fileStore(t)
			e := mustOpen(t, Options{Bucket: open()})
			waitSegmentReady(t, e)
			put(t, e, "k00", "v") // publishes the first segment
			_, segs := walObjects(t, open())
			if len(segs) != 1 {
				t.Fatalf("segments %v after the first put, want one", segs)
			}
			first := segs[0]
			want := map[string]string{"k00": "v"}
			// A reader follows the segment in place, then the next one.
			r, err := OpenReadOnly(context.Background(), Options{Bucket: open()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			// 12 records and the header leave 3 of 16 blocks; the 13th
			// leaves 2, an eighth.
			for i := 1; i < 12; i++ {
				k := fmt.Sprintf("k%02d", i)
				put(t, e, k, "v")
				want[k] = "v"
				if _, segs := walObjects(t, open()); len(segs) != 1 {
					t.Fatalf("after %d records: segments %v, want only %d (3 blocks or more left)", i+1, segs, first)
				}
			}
			if err := r.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := dump(t, r); !maps.Equal(got, want) {
				t.Fatalf("reader before the switch: %v, want %v", got, want)
			}
			waitSegmentReady(t, e)
			put(t, e, "k12", "v")
			want["k12"] = "v"
			next := e.Stats().DurableSeq + 1
			testenv.Eventually(t, 10*time.Second, "the idle committer's switch to a new segment", func() bool {
				_, segs := walObjects(t, open())
				return slices.Contains(segs, next)
			})
			if !killEarly {
				for i := 13; i < 20; i++ {
					k := fmt.Sprintf("k%02d", i)
					put(t, e, k, "v")
					want[k] = "v"
				}
				if st := e.Stats(); st.SegmentBatches != st.Batches-1 { // all but the open marker
					t.Errorf("%d of %d batches in segments, want all but the open marker", st.SegmentBatches, st.Batches)
				}
				if err := r.Refresh(context.Background()); err != nil {
					t.Fatal(err)
				}
				if got := dump(t, r); !maps.Equal(got, want) {
					t.Fatalf("reader after the switch: %v, want %v", got, want)
				}
			}
			put(t, reopenHas(t, e, open, want), "after", "v")
		})
	}
}

// idleSwitchDue opens a writer on a faulty file:// store with 16-block
// segments and fills its current segment to just short of an idle switch,
// with a segment staged: the next commit, k12, leaves an eighth of it. The
// fault bucket's injections are limited to the publication of the segment
// the switch will name: next, the batch after k12's. It returns the keys
// written.
func idleSwitchDue(t *testing.T) (open func() objstore.Bucket, f *objstoretest.Fault, e *Engine, want map[string]string, next uint64) {
	t.Helper()
	segmentBlocks(t, 16, 16)
	open, f, e = faultySegmentWriter(t)
	want = map[string]string{}
	for i := range 12 {
		k := fmt.Sprintf("k%02d", i)
		put(t, e, k, "v")
		want[k] = "v"
	}
	waitSegmentReady(t, e)
	next = e.Stats().DurableSeq + 2
	f.SetMatch(func(op objstoretest.Op, key string) bool { return op == objstoretest.OpPut && key == segKey(next) })
	return open, f, e, want, next
}

// An idle switch whose publication is held shows as a stall in Health
// (the commit that comes meanwhile waits for it), and one that fails
// leaves the batch it named to a WAL object: nothing is lost, and the
// store stays healthy and usable.
func TestIdleSwitchHeldThenFailed(t *testing.T) {
	ctx := context.Background()
	open, f, e, want, next := idleSwitchDue(t)
	f.SetBlackhole(objstoretest.OpPut, true)
	put(t, e, "k12", "v")
	want["k12"] = "v"
	testenv.Eventually(t, 10*time.Second, "the idle switch's publication held", func() bool { return f.Blocked() == 1 })
	done := make(chan error, 1)
	go func() {
		done <- e.Update(ctx, func(tx *Tx) error { tx.Put("x", Inline([]byte("1"))); return nil })
	}()
	testenv.Eventually(t, 10*time.Second, "the store stalled", func() bool { return !e.Health().Healthy })
	f.SetBlackhole(objstoretest.OpPut, false) // the publication fails
	if err := <-done; err != nil {
		t.Fatalf("a commit after the failed switch: %v", err)
	}
	want["x"] = "1"
	testenv.Eventually(t, 10*time.Second, "the store healthy again", func() bool { return e.Health().Healthy })
	if singles, segs := walObjects(t, open()); !slices.Contains(singles, next) || slices.Contains(segs, next) {
		t.Errorf("batch %d: WAL objects %v, segments %v; want it an object", next, singles, segs)
	}
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	put(t, e, "y", "2")
	want["y"] = "2"
	reopenHas(t, e, open, want)
}

// An idle switch whose publication made the name but reported a failure
// (a link whose directory sync failed): the next commit does not publish
// that name again (it would find it taken and take itself for fenced),
// collection deletes the segment left empty, and nothing is lost.
func TestIdleSwitchAmbiguousPublication(t *testing.T) {
	ctx := context.Background()
	open, f, e, want, next := idleSwitchDue(t)
	f.SetAmbiguousPutRate(1)
	put(t, e, "k12", "v")
	want["k12"] = "v"
	testenv.Eventually(t, 10*time.Second, "the idle switch's publication failed", func() bool { return f.Injected() > 0 })
	if _, segs := walObjects(t, open()); !slices.Contains(segs, next) {
		t.Fatalf("segments %v: the ambiguous publication did not make %d", segs, next)
	}
	f.Reset()
	for i := range 5 {
		k := fmt.Sprint("after", i)
		put(t, e, k, "v")
		want[k] = "v"
	}
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	put(t, e, "y", "2")
	want["y"] = "2"
	if _, segs := walObjects(t, open()); slices.Contains(segs, next) {
		t.Errorf("segments %v: the empty %d survived collection", segs, next)
	}
	reopenHas(t, e, open, want)
}

// reopenHas kills e, opens its store again and checks that the state is
// want. It returns the new writer, closed when the test ends.
func reopenHas(t *testing.T, e *Engine, open func() objstore.Bucket, want map[string]string) *Engine {
	t.Helper()
	e.Kill()
	e2 := mustOpen(t, Options{Bucket: open()})
	t.Cleanup(func() { _ = e2.Close(context.Background()) })
	if got := dump(t, e2); !maps.Equal(got, want) {
		t.Fatalf("after reopen: %v, want %v", got, want)
	}
	return e2
}

// stagedLog returns a segment log on a fresh file:// store with one
// segment staged and published as batch 1's: the current one.
func stagedLog(t *testing.T) *segLog {
	t.Helper()
	ctx := context.Background()
	_, open := fileStore(t)
	sg, _ := objstore.AsSegmenter(open())
	s := newSegLog(sg, slog.New(slog.DiscardHandler))
	t.Cleanup(s.close)
	seg, err := sg.NewSegment(ctx, 16*format.SegmentAlign)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stageHeader(seg)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.begin(ctx, 1, st); !ok || err != nil {
		t.Fatalf("begin: %v, %v", ok, err)
	}
	return s
}

// A segment's fill rate is timed from its first record, not from its
// publication: one an idle switch published long before its first commit
// would otherwise look slow to fill, and its successor be staged too
// small.
func TestSegmentTimedFromFirstRecord(t *testing.T) {
	s := stagedLog(t)
	s.curAt = time.Now().Add(-time.Hour) // published an hour ago, idle since
	if ok, err := s.write(context.Background(), 1, []byte("batch"), func() {}); !ok || err != nil {
		t.Fatalf("write: %v, %v", ok, err)
	}
	if since := time.Since(s.curAt); since > time.Minute {
		t.Errorf("the segment's first record left it timed from %v ago", since.Round(time.Minute))
	}
	s.curAt = time.Now().Add(-time.Hour)
	if ok, err := s.write(context.Background(), 2, []byte("batch"), func() {}); !ok || err != nil {
		t.Fatalf("write: %v, %v", ok, err)
	}
	if since := time.Since(s.curAt); since < time.Hour {
		t.Errorf("a later record moved the segment's start to %v ago", since)
	}
}

// Collection never deletes, as an orphan, the name of one of the writer's
// own segments (a guard: failedAt keeps such a name from being reused).
func TestCollectKeepsOrphanNameInUse(t *testing.T) {
	s := stagedLog(t)
	s.orphans = []string{segKey(1), segKey(7)}
	doomed := s.collect(0)
	if slices.Contains(doomed, segKey(1)) || !slices.Contains(doomed, segKey(7)) {
		t.Errorf("collect doomed %v; want %s (an orphan) and not %s (in use)", doomed, segKey(7), segKey(1))
	}
}
