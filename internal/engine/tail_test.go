package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/testenv"
)

// ownerMark returns the owner object's durable sequence (0 if none).
func ownerMark(t *testing.T, b objstore.Bucket) uint64 {
	t.Helper()
	data, err := b.Get(context.Background(), ownerKey)
	if errors.Is(err, objstore.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	o, err := format.DecodeOwner(data)
	if err != nil {
		t.Fatal(err)
	}
	return o.Durable
}

// listKeys returns every key under prefix.
func listKeys(t *testing.T, b objstore.Bucket, prefix string) []string {
	t.Helper()
	objs, err := b.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

// wantTailLost checks that err is a TailLostError from end to durable whose
// message names missing.
func wantTailLost(t *testing.T, what string, err error, end, durable uint64, missing string) {
	t.Helper()
	var tl *TailLostError
	if !errors.As(err, &tl) || !errors.Is(err, ErrTailLost) || !errors.Is(err, format.ErrCorrupt) {
		t.Fatalf("%s: err = %v, want a TailLostError", what, err)
	}
	if tl.End != end || tl.Durable != durable {
		t.Errorf("%s: TailLostError{End: %d, Durable: %d}, want %d, %d", what, tl.End, tl.Durable, end, durable)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("%s: %q does not name %s", what, err, missing)
	}
}

// A bucket store whose newest WAL objects were deleted is refused, by the
// writer and by a reader, naming the missing objects, and the refused Open
// writes nothing. AcceptTailLoss opens it without them, and from then on
// the store opens normally.
func TestTailLossRefusedOnBucket(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	const hb = 5 * time.Millisecond
	e := mustOpen(t, Options{Bucket: b, Heartbeat: hb})
	durable := putKeys(t, e, 10)
	probe := reopen()
	testenv.Eventually(t, 10*time.Second, "the heartbeat records the durable sequence", func() bool { return ownerMark(t, probe) == durable })
	e.Kill()

	for s := durable - 2; s <= durable; s++ {
		if err := probe.Delete(ctx, walKey(s)); err != nil {
			t.Fatal(err)
		}
	}
	before := listKeys(t, probe, "")
	_, err := Open(ctx, Options{Bucket: reopen(), Heartbeat: hb})
	wantTailLost(t, "writer", err, durable-3, durable, walKey(durable-2)+" to "+walKey(durable))
	_, err = OpenReadOnly(ctx, Options{Bucket: reopen(), Heartbeat: hb})
	wantTailLost(t, "reader", err, durable-3, durable, walKey(durable-2))
	if after := listKeys(t, probe, ""); !slices.Equal(before, after) {
		t.Errorf("a refused Open changed the store:\nbefore %v\nafter  %v", before, after)
	}

	e = mustOpen(t, Options{Bucket: reopen(), Heartbeat: hb, AcceptTailLoss: true})
	got := dump(t, e)
	if len(got) != 7 || got["k06"] != "v" || got["k07"] != "" {
		t.Errorf("after accepting the loss the state is %v, want k00-k06", got)
	}
	put(t, e, "after", "v")
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, Options{Bucket: reopen(), Heartbeat: hb})
	if got := dump(t, e); got["after"] != "v" {
		t.Errorf("reopened after accepting the loss: %v", got)
	}
	e.Close(ctx)
}

// On file:// the owner object records where the log ends (no heartbeat):
// a truncated or deleted WAL segment is refused, naming the segment, by
// the writer and by a reader.
func TestTailLossRefusedOnFile(t *testing.T) {
	// Default segment sizes: every batch goes into the one segment (with
	// small ones, the batches after a full segment may go into WAL objects
	// if the next is not staged in time, and cutting the first segment
	// then leaves a gap, not a lost tail).
	ctx := context.Background()
	for _, damage := range []string{"truncate", "delete"} {
		t.Run(damage, func(t *testing.T) {
			dir, open := fileStore(t)
			e := mustOpen(t, Options{Bucket: open()})
			durable := putKeys(t, e, 6)
			testenv.Eventually(t, 10*time.Second, "the owner object records the durable sequence", e.Settled)
			e.Kill()
			probe := open()
			if got := ownerMark(t, probe); got != durable {
				t.Fatalf("owner object says %d durable, want %d", got, durable)
			}
			_, segs := walObjects(t, probe)
			if len(segs) == 0 {
				t.Fatal("no WAL segment: the test needs one")
			}
			seg := segKey(segs[len(segs)-1])
			path := filepath.Join(dir, filepath.FromSlash(seg))
			end := segs[len(segs)-1] - 1 // what is left below the segment
			switch damage {
			case "truncate": // keep its header and first record
				if err := os.Truncate(path, 2*format.SegmentAlign); err != nil {
					t.Fatal(err)
				}
				end++
			case "delete":
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			probe.Close()
			_, err := Open(ctx, Options{Bucket: open()})
			wantTailLost(t, "writer", err, end, durable, walKey(end+1))
			if !strings.Contains(err.Error(), "segment") {
				t.Errorf("writer: %q does not say the batches were in a segment", err)
			}
			_, err = OpenReadOnly(ctx, Options{Bucket: open()})
			wantTailLost(t, "reader", err, end, durable, walKey(end+1))
		})
	}
}

// A writer that commits between the new writer's listing of the tip and its
// markers takes the first sequences of the range; the new writer holds the
// rest, the old one is fenced at the next commit, and nothing it
// acknowledged is lost. Only the lowest of the new writer's markers keeps
// its epoch key.
func TestTakeoverMarkerRange(t *testing.T) {
	ctx := context.Background()
	for _, takeover := range []bool{true, false} {
		t.Run(fmt.Sprint("takeover=", takeover), func(t *testing.T) {
			b, reopen := memBucket(t)
			old := mustOpen(t, Options{Bucket: b})
			defer old.Kill()
			put(t, old, "before", "v")
			tip := old.Stats().DurableSeq
			// Between the new writer's listing and its markers, the old
			// writer commits three batches (on the first attempt only).
			testHookListedTop = func(attempt int) {
				if attempt == 0 {
					for i := range 3 {
						put(t, old, fmt.Sprintf("raced%d", i), "v")
					}
				}
			}
			defer func() { testHookListedTop = nil }()
			e := mustOpen(t, Options{Bucket: reopen(), Takeover: takeover})
			defer e.Close(ctx)
			testHookListedTop = nil
			if got, want := e.Epoch(), tip+4; got != want {
				t.Errorf("epoch %d, want %d (the old writer took %d-%d)", got, want, tip+1, tip+3)
			}
			if takeover && e.markEnd != tip+markerWidthFirst {
				t.Errorf("markers end at %d, want %d (one range of %d)", e.markEnd, tip+markerWidthFirst, markerWidthFirst)
			}
			if err := old.Update(ctx, func(tx *Tx) error {
				tx.Put("late", Inline([]byte("v")))
				return nil
			}); !errors.Is(err, ErrFenced) {
				t.Errorf("old writer's commit after the takeover: %v, want ErrFenced", err)
			}
			got := dump(t, e)
			for _, k := range []string{"before", "raced0", "raced1", "raced2"} {
				if got[k] != "v" {
					t.Errorf("acknowledged key %s lost: %v", k, got)
				}
			}
			if got["late"] != "" {
				t.Errorf("the fenced writer's commit is in the state")
			}
			var epochs []string
			e.View(ctx, func(r *Reader) error {
				r.Ascend(epochPrefix, "", func(k string, _ []byte) bool {
					epochs = append(epochs, k)
					return true
				})
				return nil
			})
			if want := []string{epochKey(1), epochKey(e.Epoch())}; !slices.Equal(epochs, want) {
				t.Errorf("epoch keys %v, want %v", epochs, want)
			}
			put(t, e, "after", "v")
		})
	}
}

// A WAL segment damaged in the middle (an unreadable record with valid ones
// after it) is refused by the writer as corruption and by a reader, which
// cannot scan strictly while a writer may be appending, as a lost tail: the
// log it can read ends below the recorded durable sequence.
func TestMidSegmentDamageRefusedByReader(t *testing.T) {
	ctx := context.Background()
	dir, open := fileStore(t)
	e := mustOpen(t, Options{Bucket: open()})
	waitSegmentReady(t, e)
	for i := range 3 {
		put(t, e, fmt.Sprintf("k%02d", i), "v")
	}
	durable := e.Stats().DurableSeq
	testenv.Eventually(t, 10*time.Second, "the owner object records the durable sequence", e.Settled)
	e.Kill()
	probe := open()
	_, segs := walObjects(t, probe)
	probe.Close()
	path := filepath.Join(dir, filepath.FromSlash(segKey(segs[len(segs)-1])))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first record follows the header block; damage its checksummed body.
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, format.SegmentAlign+format.SegmentRecordHeaderLen+8); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if _, err := Open(ctx, Options{Bucket: open()}); !errors.Is(err, format.ErrCorrupt) {
		t.Errorf("writer: %v, want corruption", err)
	}
	_, err = OpenReadOnly(ctx, Options{Bucket: open()})
	wantTailLost(t, "reader", err, segs[len(segs)-1]-1, durable, walKey(segs[len(segs)-1]))
}

// putKeys commits k00, k01, ... (n keys, "v") into e, once its first WAL
// segment (if it writes segments) is ready, and returns the durable
// sequence.
func putKeys(t *testing.T, e *Engine, n int) uint64 {
	t.Helper()
	if e.seg != nil {
		waitSegmentReady(t, e)
	}
	for i := range n {
		put(t, e, fmt.Sprintf("k%02d", i), "v")
	}
	return e.Stats().DurableSeq
}

// writeAndReopen checks that a store opened by accepting a loss (e) goes
// on as usual: it commits, closes, and opens again with opts() (no
// option), holding what it committed.
func writeAndReopen(t *testing.T, e *Engine, opts func() Options) {
	t.Helper()
	ctx := context.Background()
	put(t, e, "after", "v")
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, opts())
	if got := dump(t, e); got["after"] != "v" {
		t.Errorf("reopened after accepting the loss: %v", got)
	}
	e.Close(ctx)
}

// openOrClose opens o.Bucket, and closes it if Open fails (releasing a
// file:// store's lock, as the process of a refused Open would on exit).
func openOrClose(ctx context.Context, o Options) (*Engine, error) {
	e, err := Open(ctx, o)
	if err != nil {
		o.Bucket.Close()
	}
	return e, err
}

// flipOwnerByte damages one byte of the owner object, as a bad disk block
// or a stray write would: the object is there but does not decode.
func flipOwnerByte(t *testing.T, b objstore.Bucket) []byte {
	t.Helper()
	ctx := context.Background()
	data, err := b.Get(ctx, ownerKey)
	if err != nil {
		t.Fatal(err)
	}
	data[20] ^= 0xff
	if err := b.Put(ctx, ownerKey, data, false); err != nil {
		t.Fatal(err)
	}
	if _, err := format.DecodeOwner(data); err == nil {
		t.Fatal("the damaged owner object still decodes")
	}
	return data
}

// wantOwnerCorrupt checks that err is a CorruptionError naming the owner
// object, not a lost tail.
func wantOwnerCorrupt(t *testing.T, what string, err error) {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Key != ownerKey || !errors.Is(err, format.ErrCorrupt) || errors.Is(err, ErrTailLost) {
		t.Fatalf("%s: err = %v, want a CorruptionError naming %q", what, err, ownerKey)
	}
}

// An owner object that is there but does not decode cannot have been left
// by a crash (objects appear atomically, the owner object included): it was
// damaged. A writer's Open refuses the store, naming it, instead of opening
// without the check of the WAL's end it carries, and rewriting it, which
// would hide a lost tail for good. The refused Open changes nothing.
// AcceptTailLoss opens the store with what its log holds. A reader, which
// writes nothing, still opens the store (logging that it cannot check).
func TestUnreadableOwnerRefusesWriter(t *testing.T) {
	ctx := context.Background()
	for _, store := range []string{"file", "bucket", "bucket-takeover"} {
		t.Run(store, func(t *testing.T) {
			var open func() objstore.Bucket
			var opts Options
			var dir string
			if store == "file" {
				dir, open = fileStore(t)
			} else {
				_, open = memBucket(t)
				opts = Options{Heartbeat: 5 * time.Millisecond, Takeover: store == "bucket-takeover"}
			}
			with := func(o Options) Options {
				o.Bucket, o.Heartbeat, o.Takeover = open(), opts.Heartbeat, opts.Takeover
				o.Logger = slog.New(slog.DiscardHandler)
				return o
			}
			e := mustOpen(t, with(Options{}))
			durable := putKeys(t, e, 6)
			probe := open()
			testenv.Eventually(t, 10*time.Second, "the owner object records the durable sequence", func() bool {
				return e.Settled() && ownerMark(t, probe) == durable
			})
			e.Kill()

			// The newest batches go, and the owner object is damaged.
			_, segs := walObjects(t, probe)
			if store == "file" {
				if len(segs) == 0 {
					t.Fatal("no WAL segment: the test needs one")
				}
				// Keep its header and first record (k00).
				if err := os.Truncate(filepath.Join(dir, filepath.FromSlash(segKey(segs[len(segs)-1]))), 2*format.SegmentAlign); err != nil {
					t.Fatal(err)
				}
			} else {
				for s := durable - 2; s <= durable; s++ {
					if err := probe.Delete(ctx, walKey(s)); err != nil {
						t.Fatal(err)
					}
				}
			}
			damaged := flipOwnerByte(t, probe)
			before := listKeys(t, probe, "")
			for i := range 2 {
				_, err := openOrClose(ctx, with(Options{}))
				wantOwnerCorrupt(t, fmt.Sprintf("writer, Open %d", i+1), err)
			}
			if after := listKeys(t, probe, ""); !slices.Equal(before, after) {
				t.Errorf("a refused Open changed the store:\nbefore %v\nafter  %v", before, after)
			}
			if data, err := probe.Get(ctx, ownerKey); err != nil || !bytes.Equal(data, damaged) {
				t.Errorf("a refused Open rewrote the owner object (%v)", err)
			}

			// A reader writes nothing: it opens, unable to check the end.
			r, err := OpenReadOnly(ctx, with(Options{}))
			if err != nil {
				t.Fatalf("reader: %v", err)
			}
			r.Close(ctx)

			e = mustOpen(t, with(Options{AcceptTailLoss: true}))
			if got := dump(t, e); got["k00"] != "v" || got["k05"] != "" {
				t.Errorf("after accepting, the state is %v, want what the log holds", got)
			}
			writeAndReopen(t, e, func() Options { return with(Options{}) })
		})
	}
}

// After a clean restart the newest batches are followed by the open marker
// of the session that restarted (an object, never in a segment), and by
// those of any Open since. Losing them (a file:// segment deleted or
// truncated, a bucket's newest WAL objects deleted) then leaves markers
// above a gap: that is a lost tail, not a gap in the middle of the log.
// Open, writer and reader alike, refuses it with a TailLostError, the
// same one every time; on file:// a refused Open leaves the store as it
// found it; AcceptTailLoss opens it with what survives, and from then on
// it opens normally.
func TestTailLossBehindMarkers(t *testing.T) {
	ctx := context.Background()
	for _, damage := range []string{"file-delete", "file-truncate", "bucket"} {
		t.Run(damage, func(t *testing.T) {
			var open func() objstore.Bucket
			var dir string
			var hb time.Duration
			if damage == "bucket" {
				_, open = memBucket(t)
				hb = 5 * time.Millisecond
			} else {
				dir, open = fileStore(t)
			}
			with := func(o Options) Options {
				o.Bucket, o.Heartbeat = open(), hb
				return o
			}
			e := mustOpen(t, with(Options{}))
			durable := putKeys(t, e, 6)
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			e = mustOpen(t, with(Options{})) // a clean restart
			marker := e.Epoch()
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			probe := open()
			if got := ownerMark(t, probe); got != marker {
				t.Fatalf("owner object says %d durable, want %d", got, marker)
			}
			singles, segs := walObjects(t, probe)
			if !slices.Contains(singles, marker) {
				t.Fatalf("the restart's marker %d is not a WAL object: %v", marker, singles)
			}
			var end uint64 // what is left of the log below the loss
			switch damage {
			case "bucket":
				end = durable - 3
				for s := end + 1; s <= durable; s++ {
					if err := probe.Delete(ctx, walKey(s)); err != nil {
						t.Fatal(err)
					}
				}
			default:
				if len(segs) == 0 || segs[len(segs)-1] > durable {
					t.Fatalf("the batches are not in a segment: %v %v", singles, segs)
				}
				seg := segs[len(segs)-1]
				path := filepath.Join(dir, filepath.FromSlash(segKey(seg)))
				end = seg - 1
				if damage == "file-truncate" { // keep its header and first record
					if err := os.Truncate(path, 2*format.SegmentAlign); err != nil {
						t.Fatal(err)
					}
					end++
				} else if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			missing := walKey(end+1) + " to " + walKey(durable)
			before := listKeys(t, probe, "")
			var first string
			for i := range 3 {
				_, err := openOrClose(ctx, with(Options{}))
				wantTailLost(t, fmt.Sprintf("writer, Open %d", i+1), err, end, durable, missing)
				if i == 0 {
					first = err.Error()
				} else if err.Error() != first {
					t.Errorf("Open %d: %q, Open 1 said %q", i+1, err, first)
				}
				if damage != "bucket" { // a bucket opener's markers stay: they fence
					if after := listKeys(t, probe, ""); !slices.Equal(before, after) {
						t.Fatalf("a refused Open changed the store:\nbefore %v\nafter  %v", before, after)
					}
				}
			}
			_, err := OpenReadOnly(ctx, with(Options{}))
			wantTailLost(t, "reader", err, end, durable, missing)

			e = mustOpen(t, with(Options{AcceptTailLoss: true}))
			got := dump(t, e)
			for i := range 6 {
				k := fmt.Sprintf("k%02d", i)
				if want := uint64(i)+2 <= end; (got[k] == "v") != want {
					t.Errorf("after accepting the loss the state is %v: %s present %v, want %v", got, k, !want, want)
				}
			}
			writeAndReopen(t, e, func() Options { return with(Options{}) })
			r, err := OpenReadOnly(ctx, with(Options{}))
			if err != nil {
				t.Fatalf("reader after accepting the loss: %v", err)
			}
			r.Close(ctx)
		})
	}
}

// A batch missing in the middle of the log, with batches that have content
// above it, is a gap, not a lost tail: Open refuses it as corruption
// naming the missing batch, AcceptTailLoss included, and says the same
// each time, although each refused Open on a bucket leaves its marker.
func TestGapBelowContentIsCorruption(t *testing.T) {
	ctx := context.Background()
	b, reopen := memBucket(t)
	const hb = 5 * time.Millisecond
	e := mustOpen(t, Options{Bucket: b, Heartbeat: hb})
	putKeys(t, e, 10)
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	gap := e.Stats().DurableSeq - 4
	probe := reopen()
	if err := probe.Delete(ctx, walKey(gap)); err != nil {
		t.Fatal(err)
	}
	var first string
	for i, accept := range []bool{false, false, true} {
		_, err := Open(ctx, Options{Bucket: reopen(), Heartbeat: hb, AcceptTailLoss: accept})
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Key != walKey(gap) || errors.Is(err, ErrTailLost) {
			t.Fatalf("Open %d (accept %v): %v, want a CorruptionError naming %s", i+1, accept, err, walKey(gap))
		}
		if !strings.Contains(err.Error(), walKey(gap+1)) {
			t.Errorf("Open %d: %q does not name the next batch the log holds, %s", i+1, err, walKey(gap+1))
		}
		if i == 0 {
			first = err.Error()
		} else if err.Error() != first {
			t.Errorf("Open %d: %q, Open 1 said %q", i+1, err, first)
		}
	}
}
