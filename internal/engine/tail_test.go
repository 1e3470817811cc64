package engine

import (
	"context"
	"errors"
	"fmt"
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
	for i := range 10 {
		put(t, e, fmt.Sprintf("k%02d", i), "v")
	}
	durable := e.Stats().DurableSeq
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
			waitSegmentReady(t, e)
			for i := range 6 {
				put(t, e, fmt.Sprintf("k%02d", i), "v")
			}
			durable := e.Stats().DurableSeq
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
