package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A file:// store whose newest WAL segment was deleted after a clean Close
// (which records where the log ends) is refused by Open and by a read-only
// Open with a TailLostError naming the missing batches; WithAcceptTailLoss
// opens it without them.
func TestOpenRefusesLostTail(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "file://" + dir
	q, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	// k00 is written by a first open and k01..k19 by a second, which
	// writes a WAL file of its own: deleting the newest file loses the
	// second open's batches only, whatever else either open committed.
	if err := q.Put(ctx, []byte("k00"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if q, err = Open(ctx, url); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 20; i++ {
		if err := q.Put(ctx, fmt.Appendf(nil, "k%02d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wal, err := filepath.Glob(filepath.Join(dir, "wal", "*"))
	if err != nil || len(wal) == 0 {
		t.Fatalf("WAL files: %v, %v", wal, err)
	}
	sort.Strings(wal)
	t.Logf("WAL files: %v", wal)
	newest := wal[len(wal)-1]
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}

	for _, opts := range [][]Option{nil, {WithReadOnly()}} {
		_, err := Open(ctx, url, opts...)
		var tl *TailLostError
		if !errors.As(err, &tl) || !errors.Is(err, ErrTailLost) || !IsCorruption(err) {
			t.Fatalf("Open(%d options) of a store missing %s: %v, want a TailLostError", len(opts), filepath.Base(newest), err)
		}
		if tl.Missing() == 0 || !strings.Contains(err.Error(), "wal/") {
			t.Errorf("the error does not say what is missing: %v", err)
		}
	}

	q, err = Open(ctx, url, WithAcceptTailLoss())
	if err != nil {
		t.Fatalf("Open with WithAcceptTailLoss: %v", err)
	}
	defer q.Close(ctx)
	if _, err := q.Get(ctx, []byte("k00")); err != nil {
		t.Errorf("the batches before the lost tail: Get(k00) = %v", err)
	}
	if _, err := q.Get(ctx, []byte("k19")); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("Get(k19), in the lost tail: %v, want ErrKeyNotFound", err)
	}
}
