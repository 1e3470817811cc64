package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
)

// RunConformance checks, as subtests of t, the behaviour every
// objstore.Bucket must have: round trips, overwrites, missing keys,
// deletes, sorted prefix listings, empty and 5 MiB objects, streamed
// writes and their abort, create-only conflicts (also 16 writers racing
// for one key), key validation, cancelled contexts, concurrent use and use
// after Close.
//
// newBucket must return a fresh, empty bucket for each subtest and close it
// when the subtest ends (t.Cleanup); one subtest closes its bucket itself,
// so Close must tolerate a second call, as the Bucket contract requires.
// The suite needs nothing else, so wrappers (Counting, Fault) run it too.
// Tests that need two handles on one location are in RunConformanceURL.
func RunConformance(t *testing.T, newBucket func(t *testing.T) objstore.Bucket) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, b objstore.Bucket)
	}{
		{"PutGet", testPutGet},
		{"Overwrite", testOverwrite},
		{"Missing", testMissing},
		{"Delete", testDelete},
		{"List", testList},
		{"Empty", testEmpty},
		{"LargeWriter", testLargeWriter},
		{"WriterAbort", testWriterAbort},
		{"WriterMisuse", testWriterMisuse},
		{"CreateOnly", testCreateOnly},
		{"CreateOnlyRace", func(t *testing.T, b objstore.Bucket) {
			testCreateOnlyRace(t, func(int) objstore.Bucket { return b })
		}},
		{"InvalidKeys", testInvalidKeys},
		{"CanceledContext", testCanceledContext},
		{"Concurrent", testConcurrent},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newBucket(t)) })
	}
}

// RunConformanceURL runs RunConformance on buckets opened with
// objstore.Open, plus the tests that open several handles on one location.
// newURL must return the URL of a fresh, empty location for each subtest
// (for a cloud store, a unique prefix= in a shared bucket will do).
func RunConformanceURL(t *testing.T, newURL func(t *testing.T) string) {
	t.Helper()
	RunConformance(t, func(t *testing.T) objstore.Bucket { return Open(t, newURL(t)) })
	t.Run("SharedLocation", func(t *testing.T) { testSharedLocation(t, newURL(t)) })
	t.Run("CreateOnlyRaceAcrossHandles", func(t *testing.T) {
		u := newURL(t)
		handles := make([]objstore.Bucket, raceWriters)
		for i := range handles {
			handles[i] = Open(t, u)
		}
		testCreateOnlyRace(t, func(i int) objstore.Bucket { return handles[i] })
	})
}

var bg = context.Background()

func mustPut(t *testing.T, b objstore.Bucket, key string, data []byte) {
	t.Helper()
	if err := b.Put(bg, key, data, false); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, b objstore.Bucket, key string) []byte {
	t.Helper()
	data, err := b.Get(bg, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return data
}

func wantContent(t *testing.T, b objstore.Bucket, key string, want []byte) {
	t.Helper()
	if got := mustGet(t, b, key); !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %s, want %s", key, abbrev(got), abbrev(want))
	}
	r, err := b.NewReader(bg, key)
	if err != nil {
		t.Fatalf("NewReader(%q): %v", key, err)
	}
	got, err := io.ReadAll(r)
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("NewReader(%q): read: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("NewReader(%q) read %s, want %s", key, abbrev(got), abbrev(want))
	}
}

func wantNotFound(t *testing.T, b objstore.Bucket, key string) {
	t.Helper()
	if data, err := b.Get(bg, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get(%q) = %s, %v; want ErrNotFound", key, abbrev(data), err)
	}
	if r, err := b.NewReader(bg, key); !errors.Is(err, objstore.ErrNotFound) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("NewReader(%q) error = %v; want ErrNotFound", key, err)
	}
}

func mustList(t *testing.T, b objstore.Bucket, prefix string) []objstore.ObjectInfo {
	t.Helper()
	objs, err := b.List(bg, prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return objs
}

func wantList(t *testing.T, b objstore.Bucket, prefix string, want []objstore.ObjectInfo) {
	t.Helper()
	got := mustList(t, b, prefix)
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List(%q) =\n  %v\nwant\n  %v", prefix, got, want)
	}
}

func abbrev(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", b[:40], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testPutGet(t *testing.T, b objstore.Bucket) {
	data := []byte("hello, object store")
	mustPut(t, b, "obj", data)
	wantContent(t, b, "obj", data)
	mustPut(t, b, "dir/sub/obj", data[:5])
	wantContent(t, b, "dir/sub/obj", data[:5])
	wantList(t, b, "", []objstore.ObjectInfo{{Key: "dir/sub/obj", Size: 5}, {Key: "obj", Size: int64(len(data))}})
}

func testOverwrite(t *testing.T, b objstore.Bucket) {
	mustPut(t, b, "k", []byte("a longer first version"))
	mustPut(t, b, "k", []byte("short"))
	wantContent(t, b, "k", []byte("short"))
	wantList(t, b, "", []objstore.ObjectInfo{{Key: "k", Size: 5}})

	w, err := b.NewWriter(bg, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "streamed"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Writer.Close over existing key: %v", err)
	}
	wantContent(t, b, "k", []byte("streamed"))
}

func testMissing(t *testing.T, b objstore.Bucket) {
	wantNotFound(t, b, "missing")
	wantNotFound(t, b, "no/such/dir/missing")
	mustPut(t, b, "dir/present", []byte("x"))
	wantNotFound(t, b, "dir") // a prefix of a key is not an object
	wantNotFound(t, b, "dir/missing")

	_, err := b.Get(bg, "missing")
	var oe *objstore.OpError
	if !errors.As(err, &oe) || oe.Op != "get" || oe.Key != "missing" {
		t.Errorf("Get(missing) error = %#v; want *objstore.OpError{Op: get, Key: missing}", err)
	}
	if objstore.IsRetryable(err) {
		t.Errorf("IsRetryable(%v) = true for a missing object", err)
	}
}

func testDelete(t *testing.T, b objstore.Bucket) {
	if err := b.Delete(bg, "missing"); err != nil {
		t.Fatalf("Delete(missing) = %v; want nil", err)
	}
	if err := b.Delete(bg, "no/such/dir/missing"); err != nil {
		t.Fatalf("Delete(no/such/dir/missing) = %v; want nil", err)
	}
	mustPut(t, b, "a/b", []byte("1"))
	mustPut(t, b, "a/c", []byte("2"))
	if err := b.Delete(bg, "a"); err != nil { // a prefix, not an object
		t.Fatalf("Delete(a) = %v; want nil", err)
	}
	if err := b.Delete(bg, "a/b"); err != nil {
		t.Fatalf("Delete(a/b): %v", err)
	}
	wantNotFound(t, b, "a/b")
	wantContent(t, b, "a/c", []byte("2"))
	wantList(t, b, "", []objstore.ObjectInfo{{Key: "a/c", Size: 1}})
	if err := b.Delete(bg, "a/b"); err != nil {
		t.Fatalf("second Delete(a/b) = %v; want nil", err)
	}
	// A deleted key can be created again, also create-only.
	if err := b.Put(bg, "a/b", []byte("again"), true); err != nil {
		t.Fatalf("create-only Put after Delete: %v", err)
	}
	wantContent(t, b, "a/b", []byte("again"))
}

func testList(t *testing.T, b objstore.Bucket) {
	keys := []string{
		"wal/00000000000000000002",
		"wal/00000000000000000010",
		"wal/00000000000000000001",
		"snap/00000000000000000005",
		"payload/a/b/c",
		"payload/ab",
		"payload/a/b/d",
		"a.b",
		"z",
		"a/x",
		"a-c",
	}
	var all []objstore.ObjectInfo
	for i, k := range keys {
		mustPut(t, b, k, bytes.Repeat([]byte{'x'}, i))
		all = append(all, objstore.ObjectInfo{Key: k, Size: int64(i)})
	}
	slices.SortFunc(all, func(a, b objstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	for _, prefix := range []string{
		"", "wal/", "wal/0000000000000000001", "payload/a", "payload/a/", "payload/a/b/c",
		"a", "a/", "a.", "snap", "nope/", "nope", "z", "zz", "wal/00000000000000000003",
	} {
		var want []objstore.ObjectInfo
		for _, o := range all {
			if strings.HasPrefix(o.Key, prefix) {
				want = append(want, o)
			}
		}
		wantList(t, b, prefix, want)
	}
}

func testEmpty(t *testing.T, b objstore.Bucket) {
	mustPut(t, b, "empty/put", nil)
	wantContent(t, b, "empty/put", []byte{})
	w, err := b.NewWriter(bg, "empty/writer", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close of an empty Writer: %v", err)
	}
	wantContent(t, b, "empty/writer", []byte{})
	wantList(t, b, "empty/", []objstore.ObjectInfo{{Key: "empty/put"}, {Key: "empty/writer"}})
	if err := b.Put(bg, "empty/put", nil, true); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("create-only Put over an empty object = %v; want ErrExists", err)
	}
}

func testLargeWriter(t *testing.T, b objstore.Bucket) {
	r := rand.New(rand.NewPCG(1, 2))
	data := randBytes(r, 5<<20+123)
	w, err := b.NewWriter(bg, "large/object", true)
	if err != nil {
		t.Fatal(err)
	}
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+r.IntN(256<<10))
		if m, err := w.Write(rest[:n]); err != nil || m != n {
			t.Fatalf("Write = %d, %v; want %d, nil", m, err, n)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantContent(t, b, "large/object", data)
	wantList(t, b, "large/", []objstore.ObjectInfo{{Key: "large/object", Size: int64(len(data))}})
}

func testWriterAbort(t *testing.T, b objstore.Bucket) {
	w, err := b.NewWriter(bg, "aborted", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("never visible")); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	wantNotFound(t, b, "aborted")
	wantList(t, b, "", nil)

	// Aborting an overwrite (also a create-only one) leaves the old object.
	mustPut(t, b, "kept", []byte("old"))
	for _, ifNotExist := range []bool{false, true} {
		w, err = b.NewWriter(bg, "kept", ifNotExist)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		wantContent(t, b, "kept", []byte("old"))
	}
	// Abort of a never-written Writer for a new key.
	w, err = b.NewWriter(bg, "nothing", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	wantNotFound(t, b, "nothing")
	wantList(t, b, "", []objstore.ObjectInfo{{Key: "kept", Size: 3}})
}

func testWriterMisuse(t *testing.T, b objstore.Bucket) {
	w, err := b.NewWriter(bg, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Errorf("Abort after Close = %v; want nil", err)
	}
	wantContent(t, b, "k", []byte("v")) // Abort after Close deletes nothing
	if _, err := w.Write([]byte("more")); err == nil {
		t.Errorf("Write after Close succeeded")
	}
	if err := w.Close(); err == nil {
		t.Errorf("second Close succeeded")
	}
	wantContent(t, b, "k", []byte("v"))

	w, err = b.NewWriter(bg, "k2", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Errorf("second Abort = %v; want nil", err)
	}
	if err := w.Close(); err == nil {
		t.Errorf("Close after Abort succeeded")
	}
	wantNotFound(t, b, "k2")
}

func testCreateOnly(t *testing.T, b objstore.Bucket) {
	for _, key := range []string{"flat", "wal/00000000000000000001"} {
		if err := b.Put(bg, key, []byte("first"), true); err != nil {
			t.Fatalf("create-only Put(%q) of a new key: %v", key, err)
		}
		err := b.Put(bg, key, []byte("second"), true)
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("create-only Put(%q) of an existing key = %v; want ErrExists", key, err)
		}
		if objstore.IsRetryable(err) {
			t.Errorf("IsRetryable(%v) = true", err)
		}
		var oe *objstore.OpError
		if !errors.As(err, &oe) || oe.Key != key {
			t.Errorf("error %v does not name key %q", err, key)
		}
		wantContent(t, b, key, []byte("first"))

		w, err := b.NewWriter(bg, key, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("third")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("create-only Writer.Close(%q) of an existing key = %v; want ErrExists", key, err)
		}
		wantContent(t, b, key, []byte("first"))

		mustPut(t, b, key, []byte("fourth")) // a plain Put still overwrites
		wantContent(t, b, key, []byte("fourth"))
	}
}

// raceWriters is how many writers race for one key.
const raceWriters = 16

// testCreateOnlyRace races raceWriters create-only writes (half Put, half
// Writer) per key; writer i uses handle(i).
func testCreateOnlyRace(t *testing.T, handle func(i int) objstore.Bucket) {
	for round := range 4 {
		key := fmt.Sprintf("race/%d", round)
		errs := make([]error, raceWriters)
		payload := func(i int) []byte { return fmt.Appendf(nil, "writer %02d of round %d", i, round) }
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range raceWriters {
			wg.Go(func() {
				b := handle(i)
				start.Wait()
				if i%2 == 0 {
					errs[i] = b.Put(bg, key, payload(i), true)
					return
				}
				w, err := b.NewWriter(bg, key, true)
				if err != nil {
					errs[i] = err
					return
				}
				if _, err := w.Write(payload(i)); err != nil {
					w.Abort()
					errs[i] = err
					return
				}
				errs[i] = w.Close()
			})
		}
		start.Done()
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("%s: writers %d and %d both succeeded", key, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, objstore.ErrExists):
				t.Fatalf("%s: writer %d: %v; want nil or ErrExists", key, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: no writer succeeded", key)
		}
		wantContent(t, handle(0), key, payload(winner))
	}
}

func testInvalidKeys(t *testing.T, b objstore.Bucket) {
	for _, key := range []string{
		"", "/abs", "trailing/", "a//b", "./a", "a/./b", "a/../b", "..", ".",
		".hidden", ".tmp/x", ".lock", "nul\x00", "ctl\n", `back\slash`, "bad\xffutf8",
		strings.Repeat("k", 1000), strings.Repeat("s", 256) + "/x",
	} {
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("%s(%q) error = %v; want ErrInvalidKey", op, key, err)
			}
		}
		check("Put", b.Put(bg, key, []byte("x"), false))
		check("Put(ifNotExist)", b.Put(bg, key, []byte("x"), true))
		_, err := b.Get(bg, key)
		check("Get", err)
		_, err = b.NewReader(bg, key)
		check("NewReader", err)
		_, err = b.NewWriter(bg, key, false)
		check("NewWriter", err)
		check("Delete", b.Delete(bg, key))
	}
	wantList(t, b, "", nil)
}

func testCanceledContext(t *testing.T, b objstore.Bucket) {
	mustPut(t, b, "k", []byte("v"))
	cctx, cancel := context.WithCancel(bg)
	cancel()
	if err := b.Put(cctx, "k2", []byte("v"), false); err == nil {
		t.Errorf("Put with a canceled context succeeded")
	}
	if _, err := b.Get(cctx, "k"); err == nil {
		t.Errorf("Get with a canceled context succeeded")
	}
	if _, err := b.List(cctx, ""); err == nil {
		t.Errorf("List with a canceled context succeeded")
	}
	// A Writer whose context ends before Close commits nothing.
	wctx, wcancel := context.WithCancel(bg)
	w, err := b.NewWriter(wctx, "k3", false)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("v")) // may fail already
	wcancel()
	if err := w.Close(); err == nil {
		t.Errorf("Writer.Close after its context was canceled succeeded")
	}
	wantNotFound(t, b, "k3")
}

func testConcurrent(t *testing.T, b objstore.Bucket) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				key := fmt.Sprintf("c/%d/%d", g, i)
				data := fmt.Appendf(nil, "%d-%d", g, i)
				if err := b.Put(bg, key, data, i%2 == 0); err != nil {
					t.Errorf("Put(%q): %v", key, err)
					return
				}
				if got, err := b.Get(bg, key); err != nil || !bytes.Equal(got, data) {
					t.Errorf("Get(%q) = %q, %v; want %q", key, got, err, data)
					return
				}
				if _, err := b.List(bg, fmt.Sprintf("c/%d/", g)); err != nil {
					t.Errorf("List: %v", err)
					return
				}
				if i%3 == 0 {
					if err := b.Delete(bg, key); err != nil {
						t.Errorf("Delete(%q): %v", key, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if got := len(mustList(t, b, "c/")); got != 8*6 {
		t.Errorf("List(c/) has %d objects; want %d", got, 8*6)
	}
}

func testClosed(t *testing.T, b objstore.Bucket) {
	mustPut(t, b, "k", []byte("v"))
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close = %v; want nil", err)
	}
	if _, err := b.Get(bg, "k"); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("Get after Close = %v; want ErrClosed", err)
	}
	if err := b.Put(bg, "k", nil, false); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("Put after Close = %v; want ErrClosed", err)
	}
	if _, err := b.List(bg, ""); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("List after Close = %v; want ErrClosed", err)
	}
	if _, err := b.NewWriter(bg, "k", false); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("NewWriter after Close = %v; want ErrClosed", err)
	}
}

func testSharedLocation(t *testing.T, rawURL string) {
	a := Open(t, rawURL)
	b := Open(t, rawURL)
	mustPut(t, a, "shared/1", []byte("from a"))
	wantContent(t, b, "shared/1", []byte("from a"))
	if err := b.Put(bg, "shared/2", []byte("from b"), true); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(bg, "shared/2", []byte("from a"), true); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("create-only Put through the other handle = %v; want ErrExists", err)
	}
	wantList(t, a, "shared/", []objstore.ObjectInfo{{Key: "shared/1", Size: 6}, {Key: "shared/2", Size: 6}})
	if err := b.Delete(bg, "shared/1"); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, a, "shared/1")

	// Closing one handle leaves the store to the others and to new ones.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wantContent(t, b, "shared/2", []byte("from b"))
	wantContent(t, Open(t, rawURL), "shared/2", []byte("from b"))
}
