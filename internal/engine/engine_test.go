package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
	"github.com/stepwell/stepwell/internal/testenv"
)

// storeURL returns a fresh store URL for a test: in memory by default; the
// backend tests (backends_test.go) point it at MinIO and the GCS emulator.
var storeURL = func(t *testing.T) string { return testenv.MemURL("engine-" + t.Name()) }

// memBucket returns a fresh bucket (see storeURL) and a function that opens
// it again (as a new process would).
func memBucket(t *testing.T) (objstore.Bucket, func() objstore.Bucket) {
	t.Helper()
	url := storeURL(t)
	reopen := func() objstore.Bucket {
		b, err := objstore.Open(context.Background(), url)
		if err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
		return b
	}
	return reopen(), reopen
}

func mustOpen(t *testing.T, o Options) *Engine {
	t.Helper()
	e, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return e
}

func put(t *testing.T, e *Engine, key, val string) {
	t.Helper()
	if err := e.Update(context.Background(), func(tx *Tx) error {
		tx.Put(key, Inline([]byte(val)))
		return nil
	}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// dump returns the whole state as key -> decoded inline value.
func dump(t *testing.T, e *Engine) map[string]string {
	t.Helper()
	m := map[string]string{}
	if err := e.View(context.Background(), func(r *Reader) error {
		r.Ascend("", "", func(k string, v []byte) bool {
			if strings.HasPrefix(k, epochPrefix) {
				return true // engine bookkeeping
			}
			d, err := Decode(v)
			if err != nil {
				t.Errorf("key %q: %v", k, err)
			}
			if d.BlobKey != "" {
				m[k] = "blob:" + d.BlobKey
			} else {
				m[k] = string(d.Data)
			}
			return true
		})
		return nil
	}); err != nil {
		t.Fatalf("View: %v", err)
	}
	return m
}

func TestPutGetReopen(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	put(t, e, "a", "1")
	put(t, e, "b", "2")
	if err := e.Update(ctx, func(tx *Tx) error {
		if !tx.Delete("a") {
			t.Error("Delete(a) = false, want true")
		}
		if tx.Delete("zz") {
			t.Error("Delete(zz) = true for a missing key")
		}
		tx.Put("c", Inline([]byte("3")))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"b": "2", "c": "3"}
	if got := dump(t, e); !maps.Equal(got, want) {
		t.Fatalf("state = %v, want %v", got, want)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Update(ctx, func(tx *Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Update after Close = %v, want ErrClosed", err)
	}
	e2 := mustOpen(t, Options{Bucket: reopen()})
	defer e2.Close(ctx)
	if got := dump(t, e2); !maps.Equal(got, want) {
		t.Fatalf("after reopen state = %v, want %v", got, want)
	}
	if e2.Epoch() <= e.Epoch() {
		t.Fatalf("second epoch %d not after first %d", e2.Epoch(), e.Epoch())
	}
}

// mirror is an Indexer keeping a copy of the state, to check that the
// engine reports every change (live, undo, replay) to it.
type mirror struct {
	m      map[string]string
	resets int
}

func (m *mirror) Reset() { m.m = map[string]string{}; m.resets++ }
func (m *mirror) Apply(key string, old, new []byte) {
	if got, ok := m.m[key]; ok != (old != nil) || ok && got != string(old) {
		panic(fmt.Sprintf("indexer: key %q old value %q, mirror has %q (present %v)", key, old, got, ok))
	}
	if new == nil {
		delete(m.m, key)
	} else {
		m.m[key] = string(new)
	}
}

func rawState(t *testing.T, e *Engine) map[string]string {
	m := map[string]string{}
	e.View(context.Background(), func(r *Reader) error {
		r.Ascend("", "", func(k string, v []byte) bool {
			if !strings.HasPrefix(k, epochPrefix) {
				m[k] = string(v)
			}
			return true
		})
		return nil
	})
	return m
}

func TestRollbackAndIndexer(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	ix := &mirror{m: map[string]string{}}
	e := mustOpen(t, Options{Bucket: b, Indexer: ix})
	rng := rand.New(rand.NewPCG(1, 2))
	boom := errors.New("boom")
	for i := 0; i < 500; i++ {
		fail := rng.IntN(3) == 0
		err := e.Update(ctx, func(tx *Tx) error {
			for j := 0; j < 1+rng.IntN(5); j++ {
				k := fmt.Sprintf("k%02d", rng.IntN(30))
				if rng.IntN(3) == 0 {
					tx.Delete(k)
				} else {
					tx.Put(k, Inline([]byte(fmt.Sprint(i, j))))
				}
			}
			if fail {
				return boom
			}
			return nil
		})
		if fail != (err != nil) {
			t.Fatalf("iteration %d: fail=%v err=%v", i, fail, err)
		}
	}
	state := rawState(t, e)
	for k := range ix.m {
		if strings.HasPrefix(k, epochPrefix) {
			delete(ix.m, k)
		}
	}
	if !maps.Equal(ix.m, state) {
		t.Fatalf("indexer mirror diverged from the tree")
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ix2 := &mirror{}
	e2 := mustOpen(t, Options{Bucket: reopen(), Indexer: ix2})
	defer e2.Close(ctx)
	for k := range ix2.m {
		if strings.HasPrefix(k, epochPrefix) {
			delete(ix2.m, k)
		}
	}
	if !maps.Equal(ix2.m, state) || !maps.Equal(rawState(t, e2), state) {
		t.Fatalf("state after replay differs")
	}
}

func TestGroupCommit(t *testing.T) {
	const workers, each = 64, 20
	s := closedLoopPuts(t, 2*time.Millisecond, workers, each)
	if s.Txns != workers*each {
		t.Fatalf("Txns = %d, want %d", s.Txns, workers*each)
	}
	// With a 2ms write and 64 concurrent committers, batches must carry
	// many transactions each.
	if perBatch := float64(s.Txns) / float64(s.Batches); perBatch < 4 {
		t.Fatalf("%.1f transactions per batch; group commit is not batching", perBatch)
	}
}

// closedLoopPuts opens an engine whose every write takes latency, runs
// workers goroutines that each commit each puts, one after another, and
// returns the engine's stats.
func closedLoopPuts(t *testing.T, latency time.Duration, workers, each int) Stats {
	b, _ := memBucket(t)
	fault := objstoretest.NewFault(b, 1)
	fault.SetLatency(latency, 0)
	e := mustOpen(t, Options{Bucket: fault})
	defer e.Close(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				put(t, e, fmt.Sprintf("w%d/%d", w, i), "x")
			}
		}()
	}
	wg.Wait()
	return e.Stats()
}

// Committers that each wait for their commit fall into two cohorts with one
// write in flight; the committer's brief linger merges them, so batches
// carry nearly all of them instead of half.
func TestGroupCommitMergesCohorts(t *testing.T) {
	const workers, each = 16, 40
	s := closedLoopPuts(t, 5*time.Millisecond, workers, each)
	// Without the linger this is about workers/2.
	if perBatch := float64(s.Txns) / float64(s.Batches); perBatch < 0.65*workers {
		t.Fatalf("%.1f transactions per batch with %d closed-loop committers; cohorts are not merging", perBatch, workers)
	} else {
		t.Logf("%.1f transactions per batch", perBatch)
	}
}

// waitSnapshot waits for the background snapshot writer (Close would
// cancel one in progress).
func waitSnapshot(t *testing.T, e *Engine, n uint64) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d background snapshots", n), func() bool { return e.Stats().Snapshots >= n })
}

func countKeys(t *testing.T, b objstore.Bucket, prefix string) int {
	objs, err := b.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

func TestSnapshotAndCollection(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b, SnapshotMaxObjects: 10})
	want := map[string]string{}
	for i := 0; i < 95; i++ {
		k := fmt.Sprintf("key%03d", i%40)
		v := fmt.Sprint(i)
		put(t, e, k, v)
		want[k] = v
	}
	// Background snapshots are triggered every 10 objects.
	waitSnapshot(t, e, 1)
	// Snapshot the final state, so that collection leaves no WAL behind.
	put(t, e, "last", "x")
	want["last"] = "x"
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if e.Stats().Snapshots == 0 {
		t.Fatal("no snapshot was written")
	}
	probe := reopen()
	if n := countKeys(t, probe, "snap/"); n != 1 {
		t.Errorf("%d snapshots left after collection, want 1", n)
	}
	// Only the open marker stays (see TestStaleWriterCannotWriteIntoCollectedWAL).
	if n := countKeys(t, probe, "wal/"); n != 1 {
		t.Errorf("%d WAL objects left, want only the open marker", n)
	}
	e2 := mustOpen(t, Options{Bucket: probe})
	defer e2.Close(ctx)
	if got := dump(t, e2); !maps.Equal(got, want) {
		t.Fatalf("state after reopen from snapshot differs: got %d keys want %d", len(got), len(want))
	}
	if e2.Stats().RecoveredWAL != 0 {
		t.Errorf("replayed %d WAL objects; the snapshot was not used", e2.Stats().RecoveredWAL)
	}
}

func TestFencing(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	a := mustOpen(t, Options{Bucket: b})
	put(t, a, "from-a", "1")
	// A second writer opens with takeover; A is now fenced.
	bEng := mustOpen(t, Options{Bucket: reopen(), Takeover: true})
	defer bEng.Close(ctx)
	err := a.Update(ctx, func(tx *Tx) error { tx.Put("late", Inline([]byte("x"))); return nil })
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Update on the replaced writer = %v, want ErrFenced", err)
	}
	if err := a.View(ctx, func(*Reader) error { return nil }); !errors.Is(err, ErrFenced) {
		t.Fatalf("View after fencing = %v, want ErrFenced", err)
	}
	a.Close(ctx)
	got := dump(t, bEng)
	if got["from-a"] != "1" {
		t.Fatalf("acknowledged commit of the fenced writer lost: %v", got)
	}
	if _, ok := got["late"]; ok {
		t.Fatalf("fenced writer's rejected commit is visible")
	}
}

func corruptObject(t *testing.T, b objstore.Bucket, key string, mutate func([]byte) []byte) {
	t.Helper()
	ctx := context.Background()
	data, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, key, mutate(data), false); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptWALNamesKey(t *testing.T) {
	for name, mutate := range map[string]func([]byte) []byte{
		"bitflip":  func(d []byte) []byte { d[len(d)-1] ^= 0x40; return d },
		"truncate": func(d []byte) []byte { return d[:len(d)-3] },
		"garbage":  func([]byte) []byte { return []byte("not a batch") },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b, reopen := memBucket(t)
			e := mustOpen(t, Options{Bucket: b})
			put(t, e, "a", "1")
			put(t, e, "b", "2")
			e.Close(ctx)
			probe := reopen()
			corruptObject(t, probe, walKey(2), mutate)
			_, err := Open(ctx, Options{Bucket: probe})
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.Key != walKey(2) || !errors.Is(err, format.ErrCorrupt) {
				t.Fatalf("Open = %v, want a CorruptionError naming %s", err, walKey(2))
			}
		})
	}
}

func TestWALGapIsCorruption(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	put(t, e, "a", "1")
	put(t, e, "b", "2")
	e.Close(ctx)
	probe := reopen()
	if err := probe.Delete(ctx, walKey(2)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, Options{Bucket: probe})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Key != walKey(2) {
		t.Fatalf("Open with a WAL gap = %v, want a CorruptionError naming %s", err, walKey(2))
	}
}

func TestCorruptSnapshot(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	for i := 0; i < 20; i++ {
		put(t, e, fmt.Sprint("k", i), "v")
	}
	if err := e.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	e.Close(ctx)
	probe := reopen()
	snaps, _ := probe.List(ctx, "snap/")
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots, want 1", len(snaps))
	}
	corruptObject(t, probe, snaps[0].Key, func(d []byte) []byte { d[20] ^= 1; return d })
	_, err := Open(ctx, Options{Bucket: probe})
	if !errors.Is(err, format.ErrCorrupt) || !strings.Contains(err.Error(), snaps[0].Key) {
		t.Fatalf("Open with a corrupt snapshot whose WAL is gone = %v, want corruption naming %s", err, snaps[0].Key)
	}
}

func TestCorruptSnapshotFallsBackWhenWALIsComplete(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	for i := 0; i < 10; i++ {
		put(t, e, fmt.Sprint("k", i), fmt.Sprint(i))
	}
	want := dump(t, e)
	e.Close(ctx)
	// A corrupt snapshot whose WAL is still present (e.g. collection had not
	// run yet) must not stop recovery: the WAL alone rebuilds the state.
	probe := reopen()
	if err := probe.Put(ctx, snapKey(5), []byte("STPWS garbage"), true); err != nil {
		t.Fatal(err)
	}
	e2 := mustOpen(t, Options{Bucket: probe})
	defer e2.Close(ctx)
	if got := dump(t, e2); !maps.Equal(got, want) {
		t.Fatalf("state = %v, want %v", got, want)
	}
}

func TestOwnership(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	hb := 100 * time.Millisecond // above an emulator's write latency
	a := mustOpen(t, Options{Bucket: b, Heartbeat: hb})
	put(t, a, "a", "1")
	if _, err := Open(ctx, Options{Bucket: reopen(), Heartbeat: hb}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open while a writer is live = %v, want ErrLocked", err)
	}
	a.Kill() // crash: heartbeat stops, owner not released
	start := time.Now()
	c := mustOpen(t, Options{Bucket: reopen(), Heartbeat: hb})
	if waited := time.Since(start); waited < 2*hb {
		t.Errorf("Open after a crash waited only %v; it must watch the heartbeat", waited)
	}
	if got := dump(t, c); got["a"] != "1" {
		t.Fatalf("state after crash = %v", got)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A clean Close frees the store at once: with a one-hour heartbeat,
	// watching it would take 2.5 hours. The deadline tells the two apart
	// whatever the server's latency (a wall-clock bound failed on a loaded
	// machine).
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := Open(octx, Options{Bucket: reopen(), Heartbeat: time.Hour})
	if err != nil {
		t.Fatalf("Open after a clean Close: %v (it must not watch the heartbeat)", err)
	}
	defer d.Close(ctx)
}

func TestTakeoverFencesIdleWriterByHeartbeat(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	hb := 10 * time.Millisecond
	a := mustOpen(t, Options{Bucket: b, Heartbeat: hb})
	cb := objstore.NewCounting(reopen())
	c := mustOpen(t, Options{Bucket: cb, Heartbeat: hb, Takeover: true})
	defer c.Close(ctx)
	testenv.Eventually(t, 5*time.Second, "the idle replaced writer to stop", func() bool { return a.Err() != nil })
	if !errors.Is(a.Err(), ErrFenced) {
		t.Fatalf("idle replaced writer: Err = %v, want ErrFenced", a.Err())
	}
	a.Close(ctx)
	// The new writer keeps working and was not itself fenced: it beats
	// (a PUT of the owner object each) 12 more times, so that it checks
	// for a newer writer at least 4 times (every third beat, the owner
	// object and the next WAL batch by turns), and still commits.
	beats := cb.Counts().Puts
	testenv.Eventually(t, 5*time.Second, "12 more heartbeats of the new writer", func() bool {
		return cb.Counts().Puts >= beats+12 || c.Err() != nil
	})
	if err := c.Err(); err != nil {
		t.Fatalf("the new writer stopped: %v", err)
	}
	put(t, c, "k", "v")
}

// An idle replaced writer learns of the takeover from the WAL even when
// every read of the owner object fails (or reads back its own beat): the
// newer writer's open marker stands at its next sequence.
func TestTakeoverFencesIdleWriterByMarker(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	f := objstoretest.NewFault(b, 1)
	f.SetMatch(func(op objstoretest.Op, key string) bool { return op == objstoretest.OpGet && key == ownerKey })
	hb := 10 * time.Millisecond
	a := mustOpen(t, Options{Bucket: f, Heartbeat: hb, Logger: slog.New(slog.DiscardHandler)})
	put(t, a, "a", "1")
	f.SetErrorRate(objstoretest.OpGet, 1) // a's owner checks see nothing
	c := mustOpen(t, Options{Bucket: reopen(), Heartbeat: hb, Takeover: true})
	defer c.Close(ctx)
	if c.Epoch() != a.Stats().DurableSeq+1 {
		t.Fatalf("new writer's marker at %d, want a's next sequence %d", c.Epoch(), a.Stats().DurableSeq+1)
	}
	testenv.Eventually(t, 10*time.Second, "the idle replaced writer to stop", func() bool { return a.Err() != nil })
	if !errors.Is(a.Err(), ErrFenced) {
		t.Fatalf("idle replaced writer with blind owner checks: Err = %v, want ErrFenced", a.Err())
	}
	if f.Injected() == 0 {
		t.Fatal("no owner check was made blind")
	}
	a.Close(ctx)
	put(t, c, "k", "v")
}

// An object at an idle writer's next sequence that is not a batch fences it
// too (its own write of that sequence would fail on it), instead of being
// logged at every check.
func TestGarbageAtNextSequenceFencesIdleWriter(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	hb := 10 * time.Millisecond
	a := mustOpen(t, Options{Bucket: b, Heartbeat: hb})
	defer a.Close(ctx)
	put(t, a, "a", "1")
	if err := reopen().Put(ctx, walKey(a.Stats().DurableSeq+1), []byte("not a batch"), true); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the idle writer fenced", func() bool { return a.Err() != nil })
	if !errors.Is(a.Err(), ErrFenced) {
		t.Fatalf("Err = %v, want ErrFenced", a.Err())
	}
}

// A replaced writer that closes cleanly before noticing the takeover, its
// last beat written over the newer writer's, does not mark the store free:
// an opener without takeover would then skip the liveness check and fence
// the live newer writer.
func TestCloseAfterUnnoticedTakeoverKeepsStoreOwned(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	a := mustOpen(t, Options{Bucket: b, Heartbeat: time.Hour})
	put(t, a, "a", "1")
	c := mustOpen(t, Options{Bucket: reopen(), Heartbeat: time.Hour, Takeover: true})
	defer c.Close(ctx)
	if err := a.beat(ctx, 7, false); err != nil { // a's beat lands after c's
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := reopen().Get(ctx, ownerKey)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := format.DecodeOwner(data); err != nil || o.Closed {
		t.Fatalf("owner after the replaced writer's Close: %+v, %v; the store was marked free under a live writer", o, err)
	}
	octx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if d, err := Open(octx, Options{Bucket: reopen(), Heartbeat: time.Hour}); err == nil {
		d.Close(ctx)
		t.Fatal("an opener without takeover skipped the liveness check")
	}
	put(t, c, "c", "1") // not fenced
}

// A replaced writer may be stalled just before writing its next sequence,
// which is the new writer's open marker. Even after the new writer has
// snapshotted and collected the WAL below, that write must still fail:
// collection keeps marker objects.
func TestStaleWriterCannotWriteIntoCollectedWAL(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	a := mustOpen(t, Options{Bucket: b})
	put(t, a, "a", "1")
	staleNext := a.nextSeq // the sequence a would write next
	newer := mustOpen(t, Options{Bucket: reopen(), Takeover: true})
	defer newer.Close(ctx)
	if newer.Epoch() != staleNext {
		t.Fatalf("new marker at %d, stale writer's next is %d", newer.Epoch(), staleNext)
	}
	for i := 0; i < 10; i++ {
		put(t, newer, fmt.Sprint("n", i), "v")
	}
	if err := newer.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	stale, _ := format.EncodeBatch(&format.Batch{Seq: staleNext, Writer: a.Writer(), Epoch: a.Epoch(),
		Muts: []format.Mutation{{Op: format.OpPut, Key: "lost", Value: Inline([]byte("x"))}}})
	if err := a.writeCreateOnly(ctx, walKey(staleNext), stale); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale writer's write into collected WAL = %v, want ErrFenced", err)
	}
	a.Kill()
}

func TestEpochsPruned(t *testing.T) {
	ctx := context.Background()
	_, reopen := memBucket(t)
	for i := 0; i < keepEpochs+3; i++ {
		e := mustOpen(t, Options{Bucket: reopen()})
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e := mustOpen(t, Options{Bucket: reopen()})
	defer e.Close(ctx)
	n := 0
	e.View(ctx, func(r *Reader) error {
		r.Ascend(epochPrefix, "", func(string, []byte) bool { n++; return true })
		return nil
	})
	if n != keepEpochs {
		t.Fatalf("%d epoch keys kept, want %d", n, keepEpochs)
	}
}

// A second snapshot at the same sequence (explicit after background, or
// twice) must not collect the snapshot itself.
func TestSnapshotSameSeqKeepsSnapshot(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	put(t, e, "a", "1")
	for i := 0; i < 2; i++ {
		if err := e.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Force the collect path with the previous snapshot at the same seq.
	e.collect(ctx, e.Stats().DurableSeq)
	e.Close(ctx)
	probe := reopen()
	if n := countKeys(t, probe, "snap/"); n != 1 {
		t.Fatalf("%d snapshots left, want 1", n)
	}
	e2 := mustOpen(t, Options{Bucket: probe})
	defer e2.Close(ctx)
	if got := dump(t, e2); got["a"] != "1" {
		t.Fatalf("state = %v", got)
	}
}

// A read that observes a transaction whose batch is not yet durable waits
// for the batch, and fails if the batch fails.
func TestReadWaitsForDurability(t *testing.T) {
	// In a synctest bubble (the store is in memory), synctest.Wait proves
	// that a View of the pending batch's data stands still, waiting for
	// its durability, rather than a fixed wait hoping it got that far.
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b, _ := memBucket(t)
		f := objstoretest.NewFault(b, 3)
		e := mustOpen(t, Options{Bucket: f, WriteRetry: 50 * time.Millisecond})
		defer f.Unstall()
		f.Stall()
		committed := make(chan error, 1)
		go func() {
			committed <- e.Update(ctx, func(tx *Tx) error { tx.Put("k", Inline([]byte("v"))); return nil })
		}()
		testenv.Eventually(t, 10*time.Second, "the transaction to be applied (visible in memory)", func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			_, seen := e.tree.Get(probe("k"))
			return seen
		})
		// A read of a key the pending batch did not touch does not wait.
		other := make(chan error, 1)
		go func() { other <- e.View(ctx, func(r *Reader) error { r.Get("unrelated"); return nil }) }()
		select {
		case err := <-other:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a read of an untouched key waited for the stalled batch")
		}
		read := make(chan error, 1)
		go func() { read <- e.View(ctx, func(r *Reader) error { r.Get("k"); return nil }) }()
		synctest.Wait() // the View runs until it waits
		select {
		case err := <-read:
			t.Fatalf("View returned (%v) while the batch it saw was not durable", err)
		default:
		}
		e.Kill() // the stalled write fails for good
		if err := <-committed; err == nil {
			t.Fatal("Update succeeded although its batch failed")
		}
		if err := <-read; err == nil {
			t.Fatal("View of a failed batch's data succeeded")
		}
	})
}

// On a store with an OS lock (file://) the writer keeps no owner object: an
// idle writer makes no requests at all, over many heartbeat intervals and
// at Close, while the lock alone keeps a second writer out, takeover or not.
// The same engine on a bucket store beats (the control).
func TestLockedStoreHasNoHeartbeat(t *testing.T) {
	ctx := context.Background()
	const hb = 5 * time.Millisecond
	// idle returns the requests an engine made while idle for window and
	// then closing.
	idle := func(t *testing.T, url string, window time.Duration) objstore.Counts {
		t.Helper()
		raw, err := objstore.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		b := objstore.NewCounting(raw)
		e := mustOpen(t, Options{Bucket: b, Heartbeat: hb})
		put(t, e, "k", "v")
		// Open's blob sweep (a List) and the staging of the next WAL
		// segment (the put took the first) are not idling.
		testenv.Eventually(t, 10*time.Second, "background work ended (Engine.Settled)", e.Settled)
		before := b.Counts()
		time.Sleep(window)
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return b.Counts().Sub(before)
	}

	// The file store idles in a synctest bubble for 3s of its clock: many
	// heartbeat intervals, and three of markLoop's (1s), at no cost. A
	// real-clock window short enough for a test would see no mark tick.
	dir := t.TempDir()
	var got objstore.Counts
	synctest.Test(t, func(t *testing.T) {
		got = idle(t, "file://"+dir, 3*time.Second)
		synctest.Wait()
	})
	if got != (objstore.Counts{}) {
		t.Errorf("idle file store made requests over 3s and Close: %+v", got)
	}
	// Its owner object records where the log ends, never a heartbeat.
	probe := objstoretest.Open(t, "file://"+dir)
	if data, err := probe.Get(ctx, ownerKey); err != nil {
		t.Errorf("file store has no owner object: %v", err)
	} else if o, err := format.DecodeOwner(data); err != nil || o.Beat != 0 || o.Durable == 0 {
		t.Errorf("file store's owner object = %+v, %v; want beat 0 and the durable sequence", o, err)
	}

	// The lock keeps a second writer out, with or without takeover, and a
	// reader does not disturb the writer.
	a := mustOpen(t, Options{Bucket: objstoretest.Open(t, "file://"+dir), Heartbeat: hb})
	defer a.Close(ctx)
	for _, takeover := range []bool{false, true} {
		second, err := objstore.Open(ctx, "file://"+dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, Options{Bucket: second, Heartbeat: hb, Takeover: takeover}); !errors.Is(err, ErrLocked) {
			t.Errorf("second writer (takeover=%v) on a locked file store: %v, want ErrLocked", takeover, err)
		}
		second.Close()
	}
	r, err := OpenReadOnly(ctx, Options{Bucket: objstoretest.Open(t, "file://"+dir)})
	if err != nil {
		t.Fatal(err)
	}
	if got := dump(t, r); got["k"] != "v" {
		t.Errorf("reader sees %v", got)
	}
	r.Close(ctx)
	put(t, a, "k2", "v2")

	if got := idle(t, storeURL(t), 10*hb); got.Puts == 0 {
		t.Errorf("idle bucket store made no PUTs over 10 heartbeats: %+v; the control is broken", got)
	}
}

// TestTreeKeepsCopies: the tree stores its own copy of each key and value
// (item: one allocation for both), so a caller may reuse its buffers; Get,
// Ascend, the indexer and a rolled-back transaction all see the stored
// bytes, including empty values.
func TestTreeKeepsCopies(t *testing.T) {
	ctx := context.Background()
	b, _ := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	kb := []byte("k1")
	val := []byte{0, 'a', 'b'}
	err := e.Update(ctx, func(tx *Tx) error {
		tx.Put(string(kb), val)
		tx.Put("k2", []byte{})
		tx.Put("", []byte{}) // an empty key with an empty value is still present
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kb[1], val[1] = '9', 'z' // the caller reuses its buffers
	err = e.Update(ctx, func(tx *Tx) error {
		tx.Put("k1", []byte{0, 'n', 'e', 'w'})
		tx.Delete("k2")
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("a failing transaction committed")
	}
	got := map[string]string{}
	err = e.View(ctx, func(r *Reader) error {
		if v, ok := r.Get("k2"); !ok || v == nil || len(v) != 0 {
			t.Errorf("Get(k2) = %q, %v; want an empty, non-nil value", v, ok)
		}
		if v, ok := r.Get(""); !ok || v == nil {
			t.Errorf("Get(\"\") = %q, %v; want an empty, non-nil value", v, ok)
		}
		if _, ok := r.Get("k9"); ok {
			t.Error("Get of a key never written found it")
		}
		r.Ascend("k", "", func(k string, v []byte) bool {
			got[k] = string(v)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["k1"] != "\x00ab" || got["k2"] != "" {
		t.Fatalf("after reuse and a rollback the tree holds %q", got)
	}
}
