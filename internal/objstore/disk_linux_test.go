package objstore_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

// tmpfsDir mounts a tmpfs of size bytes on a temporary directory, or skips
// the test where mounting is not allowed (it takes CAP_SYS_ADMIN); the
// injected disk errors are tested in objstoretest either way.
func tmpfsDir(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	// Runs before TempDir's removal (cleanups run last-registered first).
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// sameDiskErr checks that injected, from objstoretest.Fault, is classified
// like real, from the file driver on a real disk: the same operation, the
// same errno, the same cause type and the same IsRetryable answer.
func sameDiskErr(t *testing.T, what string, real, injected error, errno syscall.Errno) {
	t.Helper()
	var ro, io *objstore.OpError
	if !errors.As(real, &ro) || !errors.Is(real, errno) {
		t.Fatalf("%s on a real disk = %v; want an *objstore.OpError wrapping %v", what, real, errno)
	}
	if !errors.As(injected, &io) || !errors.Is(injected, errno) {
		t.Fatalf("injected %s = %v; want an *objstore.OpError wrapping %v", what, injected, errno)
	}
	if ro.Op != io.Op || ro.Key != io.Key {
		t.Errorf("%s: real error is for %s %q, injected for %s %q", what, ro.Op, ro.Key, io.Op, io.Key)
	}
	if rt, it := reflect.TypeOf(ro.Err), reflect.TypeOf(io.Err); rt != it {
		t.Errorf("%s: real cause is a %v, injected a %v", what, rt, it)
	}
	if r, i := objstore.IsRetryable(real), objstore.IsRetryable(injected); r != i || r != (errno == syscall.ENOSPC) {
		t.Errorf("%s: IsRetryable real %v, injected %v; want %v", what, r, i, errno == syscall.ENOSPC)
	}
	t.Logf("%s: real %v; injected %v", what, real, injected)
}

// A real full disk (a 256 KiB tmpfs) fails writes as Fault.SetDiskFull
// does, leaves nothing behind, and the same request succeeds once space
// is freed.
func TestFileRealDiskFull(t *testing.T) {
	ctx := t.Context()
	b := objstoretest.Open(t, "file://"+tmpfsDir(t, 256<<10))
	sg, _ := objstore.AsSegmenter(b)
	f := objstoretest.NewFault(b, 1)
	fsg, _ := objstore.AsSegmenter(f)
	f.SetDiskFull(true)

	big := make([]byte, 1<<20)
	for _, create := range []bool{true, false} {
		sameDiskErr(t, fmt.Sprintf("Put (create-only %v)", create),
			b.Put(ctx, "big", big, create), f.Put(ctx, "big", big, create), syscall.ENOSPC)
	}
	_, real := sg.NewSegment(ctx, 1<<20)
	_, injected := fsg.NewSegment(ctx, 1<<20)
	sameDiskErr(t, "NewSegment", real, injected, syscall.ENOSPC)
	if objs, err := b.List(ctx, ""); err != nil || len(objs) != 0 {
		t.Fatalf("List after failed writes = %v, %v; want nothing", objs, err)
	}

	// Freeing space heals: the request that failed succeeds.
	if err := b.Put(ctx, "a", make([]byte, 128<<10), true); err != nil {
		t.Fatal(err)
	}
	err := b.Put(ctx, "b", make([]byte, 160<<10), true)
	if !errors.Is(err, syscall.ENOSPC) || !objstore.IsRetryable(err) {
		t.Fatalf("Put beyond the free space = %v; want a retryable ENOSPC", err)
	}
	if err := b.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "b", make([]byte, 160<<10), true); err != nil {
		t.Fatalf("Put after space was freed: %v", err)
	}
}

// A real read-only file system fails writes as Fault.SetReadOnly does.
func TestFileRealReadOnly(t *testing.T) {
	ctx := t.Context()
	dir := tmpfsDir(t, 1<<20)
	b, err := objstore.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "old", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	sg, _ := objstore.AsSegmenter(b)
	seg, err := sg.NewSegment(ctx, 4096)
	if err == nil {
		err = seg.Publish(ctx, "wal/1.log")
		seg.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	// Nothing may be open for writing when the file system goes read-only.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount the tmpfs read-only: %v", err)
	}

	b = objstoretest.Open(t, "file://"+dir)
	sg, _ = objstore.AsSegmenter(b)
	f := objstoretest.NewFault(b, 1)
	fsg, _ := objstore.AsSegmenter(f)
	f.SetReadOnly(true)

	for _, create := range []bool{true, false} {
		sameDiskErr(t, fmt.Sprintf("Put (create-only %v)", create),
			b.Put(ctx, "new", []byte("y"), create), f.Put(ctx, "new", []byte("y"), create), syscall.EROFS)
	}
	_, real := b.NewWriter(ctx, "new", true)
	_, injected := f.NewWriter(ctx, "new", true)
	sameDiskErr(t, "NewWriter", real, injected, syscall.EROFS)
	sameDiskErr(t, "Delete", b.Delete(ctx, "old"), f.Delete(ctx, "old"), syscall.EROFS)
	_, real = sg.NewSegment(ctx, 4096)
	_, injected = fsg.NewSegment(ctx, 4096)
	sameDiskErr(t, "NewSegment", real, injected, syscall.EROFS)
	_, real = sg.ReuseSegment(ctx, "wal/1.log")
	_, injected = fsg.ReuseSegment(ctx, "wal/1.log")
	sameDiskErr(t, "ReuseSegment", real, injected, syscall.EROFS)

	// Reads go through on both.
	for _, bk := range []objstore.Bucket{b, f} {
		if got, err := bk.Get(ctx, "old"); err != nil || string(got) != "x" {
			t.Fatalf("Get on a read-only disk = %q, %v", got, err)
		}
		objs, err := bk.List(ctx, "")
		var keys []string
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		if err != nil || strings.Join(keys, " ") != "old wal/1.log" {
			t.Fatalf("List on a read-only disk = %v, %v", keys, err)
		}
	}
}
