package objstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

// tmpfileFS skips the test if the temporary directory's file system has no
// O_TMPFILE (the driver then falls back by itself; the tests below that
// force the fallback still run).
func tmpfileFS(t *testing.T, b objstore.Bucket) {
	t.Helper()
	if err := b.Put(t.Context(), "probe", nil, true); err != nil {
		t.Fatal(err)
	}
	if !objstore.FileStagesUnnamed(b) {
		t.Skip("the file system of the temporary directory has no O_TMPFILE")
	}
	if err := b.Delete(t.Context(), "probe"); err != nil {
		t.Fatal(err)
	}
}

// The conformance suite with create-only writes on the named-temp protocol,
// as on a file system without O_TMPFILE, reached two ways: the store
// learning it from the error of its first write, and being told.
func TestConformanceFileWithoutTmpfile(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EOPNOTSUPP, syscall.EISDIR, syscall.EINVAL} {
		t.Run(errno.Error(), func(t *testing.T) {
			objstoretest.RunConformance(t, func(t *testing.T) objstore.Bucket {
				b := objstoretest.Open(t, objstoretest.FileURL(t))
				objstore.SetFileOpenAnon(b, func(dir string) (*os.File, error) {
					return nil, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: errno}
				})
				return b
			})
		})
	}
	t.Run("forced", func(t *testing.T) {
		objstoretest.RunConformance(t, func(t *testing.T) objstore.Bucket {
			b := objstoretest.Open(t, objstoretest.FileURL(t))
			objstore.SetFileStagesUnnamed(b, false)
			return b
		})
	})
}

// A create-only write on a file system without O_TMPFILE falls back to a
// named temporary file at once (the failing write still succeeds) and stays
// there; an O_TMPFILE failure for any other reason fails the write.
func TestFileTmpfileFallback(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := objstoretest.Open(t, "file://"+dir)
	calls := 0
	objstore.SetFileOpenAnon(b, func(d string) (*os.File, error) {
		calls++
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: d, Err: syscall.EOPNOTSUPP}
	})
	if !objstore.FileStagesUnnamed(b) {
		t.Skip("no O_TMPFILE here to fall back from")
	}
	for i := range 3 {
		if err := b.Put(ctx, fmt.Sprintf("wal/%d", i), []byte("x"), true); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if objstore.FileStagesUnnamed(b) || calls != 1 {
		t.Errorf("after EOPNOTSUPP: unnamed=%v, O_TMPFILE tried %d times; want false, once", objstore.FileStagesUnnamed(b), calls)
	}
	// A streamed create-only write now stages a named file.
	w, err := b.NewWriter(ctx, "wal/w", true)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("data"))
	if n := countTemps(t, dir); n != 1 {
		t.Errorf("%d staging files while a fallback write is open; want 1", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	assertNoTemps(t, dir)

	b2 := objstoretest.Open(t, objstoretest.FileURL(t))
	objstore.SetFileOpenAnon(b2, func(d string) (*os.File, error) {
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: d, Err: syscall.EMFILE}
	})
	if err := b2.Put(ctx, "k", []byte("x"), true); !errors.Is(err, syscall.EMFILE) {
		t.Errorf("Put with O_TMPFILE failing with EMFILE = %v; want that error", err)
	}
	if _, err := b2.Get(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("the failed Put left an object: %v", err)
	}
}

// An unnamed staging file has no name until it is published: an open
// create-only writer is invisible (no object, no staging file), and Abort or
// a failed create-only write leaves nothing. This is the crash-safety
// argument of the O_TMPFILE protocol: at every instant before linkat there
// is no name to find, and linkat names a file whose data is already
// durable; TestFileCrash kills a process with such writes open.
func TestFileTmpfileUnnamedUntilPublished(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := objstoretest.Open(t, "file://"+dir)
	tmpfileFS(t, b)
	w, err := b.NewWriter(ctx, "snap/1", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("s"), 200<<10)); err != nil {
		t.Fatal(err)
	}
	if n := countTemps(t, dir); n != 0 {
		t.Errorf("%d staging files for an unnamed write; want 0", n)
	}
	if objs, _ := b.List(ctx, ""); len(objs) != 0 {
		t.Errorf("an unpublished write is listed: %v", objs)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "snap/1"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get after Abort = %v; want ErrNotFound", err)
	}
	if err := b.Put(ctx, "snap/2", []byte("a"), true); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "snap/2", []byte("b"), true); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second create-only Put = %v; want ErrExists", err)
	}
	if got, _ := b.Get(ctx, "snap/2"); string(got) != "a" {
		t.Errorf("snap/2 = %q after a losing create-only Put; want a", got)
	}
	assertNoTemps(t, dir)
	if !objstore.FileStagesUnnamed(b) {
		t.Errorf("the store stopped using O_TMPFILE")
	}
}

// The driver keeps directories open between writes, at most MaxCachedDirs,
// and closes them with the bucket.
func TestFileDirCache(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b, err := objstore.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range objstore.MaxCachedDirs + 10 {
		for _, ifNotExist := range []bool{true, false} {
			if err := b.Put(ctx, fmt.Sprintf("d%03d/%v", i, ifNotExist), []byte("x"), ifNotExist); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := objstore.FileCachedDirs(b); n != objstore.MaxCachedDirs {
		t.Errorf("%d cached directories; want the bound %d", n, objstore.MaxCachedDirs)
	}
	if n := openFdsUnder(t, dir); n < objstore.MaxCachedDirs {
		t.Errorf("%d descriptors open under the store; the cache holds %d", n, objstore.MaxCachedDirs)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := objstore.FileCachedDirs(b); n != 0 {
		t.Errorf("%d cached directories after Close", n)
	}
	if n := openFdsUnder(t, dir); n != 0 {
		t.Errorf("%d descriptors still open under the store after Close", n)
	}
}

// A directory removed behind the driver's back (its cached descriptor then
// names a removed directory) is recreated, and the write lands at the path,
// in the directory that was synced.
func TestFileDirRemovedUnderCache(t *testing.T) {
	ctx := t.Context()
	for _, ifNotExist := range []bool{true, false} {
		dir := t.TempDir()
		b := objstoretest.Open(t, "file://"+dir)
		if err := b.Put(ctx, "wal/1", []byte("1"), ifNotExist); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, "wal/2", []byte("2"), ifNotExist); err != nil {
			t.Fatalf("Put after the directory was removed (ifNotExist=%v): %v", ifNotExist, err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "wal", "2")); err != nil || string(got) != "2" {
			t.Errorf("wal/2 on disk = %q, %v", got, err)
		}
	}
}

func countTemps(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, ".tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// openFdsUnder counts this process's descriptors open on dir or below it.
// Counting them all failed once: other tests' connections close whenever
// their idle timeouts fire.
func openFdsUnder(t *testing.T, dir string) int {
	t.Helper()
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	n := 0
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && (target == dir || strings.HasPrefix(target, dir+"/")) {
			n++
		}
	}
	return n
}

// A segment record written with WriteAtSync goes out in one pwritev2 with
// RWF_DSYNC; a kernel or file system that refuses the flag (EOPNOTSUPP,
// ENOTSUP, EINVAL, ENOSYS) makes the bucket write and fdatasync instead,
// from that record on, with the record written all the same; any other
// failure fails the write, not retryable (the segment is to be
// abandoned, as after a failed fdatasync).
func TestFileSegmentWriteAtSync(t *testing.T) {
	ctx := t.Context()
	write := func(t *testing.T, b objstore.Bucket, key string, p []byte) error {
		t.Helper()
		sg, _ := objstore.AsSegmenter(b)
		seg, err := sg.NewSegment(ctx, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		defer seg.Close()
		if err := seg.Publish(ctx, key); err != nil {
			t.Fatal(err)
		}
		return seg.WriteAtSync(p, 4096)
	}
	check := func(t *testing.T, b objstore.Bucket, key string, p []byte) {
		t.Helper()
		data, err := b.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data[4096:4096+len(p)], p) {
			t.Fatalf("%s holds %q at 4096, want %q", key, data[4096:4096+len(p)], p)
		}
	}

	t.Run("dsync", func(t *testing.T) {
		b := objstoretest.Open(t, objstoretest.FileURL(t))
		if err := write(t, b, "seg/1", []byte("record one")); err != nil {
			t.Fatal(err)
		}
		if !objstore.FileWritesDsync(b) {
			t.Skip("this kernel or file system refuses RWF_DSYNC; the fallback is tested below")
		}
		check(t, b, "seg/1", []byte("record one"))
	})
	for _, errno := range []syscall.Errno{syscall.EOPNOTSUPP, syscall.EINVAL, syscall.ENOSYS} {
		t.Run("fallback "+errno.Error(), func(t *testing.T) {
			b := objstoretest.Open(t, objstoretest.FileURL(t))
			calls := 0
			objstore.SetFileWriteDsync(b, func(f *os.File, p []byte, off int64) error {
				calls++
				return &os.PathError{Op: "pwritev2", Path: f.Name(), Err: errno}
			})
			for i, key := range []string{"seg/1", "seg/2"} {
				p := []byte(fmt.Sprintf("record %d", i))
				if err := write(t, b, key, p); err != nil {
					t.Fatalf("WriteAtSync %d with RWF_DSYNC refused: %v", i, err)
				}
				check(t, b, key, p)
			}
			if calls != 1 || objstore.FileWritesDsync(b) {
				t.Errorf("RWF_DSYNC tried %d times, still on: %v; want once, then off", calls, objstore.FileWritesDsync(b))
			}
		})
	}
	t.Run("EIO", func(t *testing.T) {
		b := objstoretest.Open(t, objstoretest.FileURL(t))
		objstore.SetFileWriteDsync(b, func(f *os.File, p []byte, off int64) error {
			return &os.PathError{Op: "pwritev2", Path: f.Name(), Err: syscall.EIO}
		})
		err := write(t, b, "seg/1", []byte("lost"))
		if !errors.Is(err, syscall.EIO) || objstore.IsRetryable(err) {
			t.Fatalf("WriteAtSync failing with EIO = %v (retryable %v); want EIO, not retryable", err, objstore.IsRetryable(err))
		}
		if !objstore.FileWritesDsync(b) {
			t.Error("an I/O error turned RWF_DSYNC off")
		}
	})
}
