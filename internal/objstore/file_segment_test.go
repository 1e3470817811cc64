package objstore_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

// A segment's life on file://: staged full of zeros and invisible, written
// in place, published create-only, read in place a piece at a time (its
// unsynced writes included), and reused under a new name with its old
// bytes. Counting counts each piece read as a get.
func TestFileSegmentLifecycle(t *testing.T) {
	ctx := t.Context()
	c := objstore.NewCounting(objstoretest.Open(t, "file://"+t.TempDir()))
	sg, ok := objstore.AsSegmenter(c)
	if !ok {
		t.Fatal("file bucket behind Counting has no Segmenter")
	}
	seg, err := sg.NewSegment(ctx, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if err := seg.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if objs, _ := c.List(ctx, ""); len(objs) != 0 {
		t.Fatalf("a staged segment is listed: %v", objs)
	}
	if _, err := sg.OpenSegment(ctx, "seg/1"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("OpenSegment before Publish: %v, want ErrNotFound", err)
	}
	if err := seg.Publish(ctx, "seg/1"); err != nil {
		t.Fatal(err)
	}
	if err := seg.WriteAt([]byte("body"), 1<<15); err != nil { // not synced
		t.Fatal(err)
	}

	r, err := sg.OpenSegment(ctx, "seg/1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Size() != 1<<16 {
		t.Fatalf("Size() = %d, want %d", r.Size(), 1<<16)
	}
	before := c.Counts()
	p := make([]byte, 4)
	if n, err := r.ReadAt(p, 0); n != 4 || err != nil || string(p) != "head" {
		t.Fatalf("ReadAt(0) = %d %v %q", n, err, p)
	}
	if n, err := r.ReadAt(p, 1<<15); n != 4 || err != nil || string(p) != "body" {
		t.Fatalf("ReadAt of an unsynced write = %d %v %q", n, err, p)
	}
	if n, err := r.ReadAt(make([]byte, 10), 1<<16-6); n != 6 || err != io.EOF {
		t.Fatalf("ReadAt across the end = %d, %v; want 6, io.EOF", n, err)
	}
	if got := c.Counts(); got.Gets-before.Gets != 3 || got.BytesRead-before.BytesRead != 14 {
		t.Fatalf("three reads counted as %d gets of %d bytes", got.Gets-before.Gets, got.BytesRead-before.BytesRead)
	}
	if err := seg.Sync(); err != nil {
		t.Fatal(err)
	}
	seg.Close()

	// Reused: the key is gone at once, the bytes stay, and an open reader
	// still reads the file it opened.
	again, err := sg.ReuseSegment(ctx, "seg/1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sg.OpenSegment(ctx, "seg/1"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("OpenSegment of a reused key: %v, want ErrNotFound", err)
	}
	if err := again.WriteAt([]byte("next"), 0); err != nil {
		t.Fatal(err)
	}
	if err := again.Publish(ctx, "seg/2"); err != nil {
		t.Fatal(err)
	}
	again.Close()
	if n, err := r.ReadAt(p, 0); n != 4 || err != nil || string(p) != "next" {
		t.Fatalf("the open reader after reuse read %d %v %q", n, err, p)
	}
	data, err := c.Get(ctx, "seg/2")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data[1<<15:1<<15+4], []byte("body")) {
		t.Fatal("a reused segment lost its old bytes")
	}
}

// OpenSegment rejects bad keys and a closed bucket with typed errors, and
// reads from a closed bucket fail.
func TestFileOpenSegmentErrors(t *testing.T) {
	ctx := t.Context()
	b := objstoretest.Open(t, "file://"+t.TempDir())
	sg, _ := objstore.AsSegmenter(b)
	if _, err := sg.OpenSegment(ctx, "../x"); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("OpenSegment(../x): %v, want ErrInvalidKey", err)
	}
	if err := b.Put(ctx, "dir/x", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := sg.OpenSegment(ctx, "dir"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("OpenSegment of a directory: %v, want ErrNotFound", err)
	}
	r, err := sg.OpenSegment(ctx, "dir/x")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b.Close()
	if _, err := r.ReadAt(make([]byte, 1), 0); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("ReadAt after the bucket closed: %v, want ErrClosed", err)
	}
	if _, err := sg.OpenSegment(ctx, "dir/x"); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("OpenSegment after the bucket closed: %v, want ErrClosed", err)
	}
}
