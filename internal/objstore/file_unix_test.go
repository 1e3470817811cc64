//go:build linux || darwin

package objstore_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

// Child processes are this test binary re-executed with -test.run selecting
// TestFileHelperProcess and childModeEnv saying what to do.
const (
	childModeEnv  = "OBJSTORE_TEST_CHILD"
	childDirEnv   = "OBJSTORE_TEST_DIR"
	childIDEnv    = "OBJSTORE_TEST_ID"
	childKeysEnv  = "OBJSTORE_TEST_KEYS"
	childNamedEnv = "OBJSTORE_TEST_NAMED" // stage create-only writes in named files
)

// TestFileHelperProcess is not a test: it is the body of the child
// processes of the tests below.
func TestFileHelperProcess(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("helper process")
	}
	ctx := t.Context()
	b, err := objstore.Open(ctx, "file://"+os.Getenv(childDirEnv))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	if os.Getenv(childNamedEnv) != "" {
		objstore.SetFileStagesUnnamed(b, false)
	}
	stdin := bufio.NewReader(os.Stdin)
	switch mode {
	case "race":
		// Announce readiness, wait for the go signal, then race create-only
		// writes of every key.
		id := os.Getenv(childIDEnv)
		keys, _ := strconv.Atoi(os.Getenv(childKeysEnv))
		fmt.Println("ready")
		if _, err := stdin.ReadString('\n'); err != nil {
			os.Exit(2)
		}
		for i := range keys {
			key := fmt.Sprintf("race/%03d", i)
			var err error
			if i%2 == 0 {
				err = b.Put(ctx, key, []byte(id), true)
			} else {
				var w objstore.Writer
				if w, err = b.NewWriter(ctx, key, true); err == nil {
					w.Write([]byte(id))
					err = w.Close()
				}
			}
			switch {
			case err == nil:
				fmt.Printf("won %d\n", i)
			case errors.Is(err, objstore.ErrExists):
				fmt.Printf("lost %d\n", i)
			default:
				fmt.Printf("error %d %v\n", i, err)
			}
		}
	case "lock":
		// Take the lock and hold it until killed.
		l, _ := objstore.AsLocker(b)
		if err := l.Lock(); err != nil {
			fmt.Printf("error %v\n", err)
			os.Exit(2)
		}
		fmt.Println("locked")
		io.Copy(io.Discard, stdin)
		select {}
	case "writer":
		// Write objects until killed, with a streamed write of each kind
		// always open.
		l, _ := objstore.AsLocker(b)
		if err := l.Lock(); err != nil {
			fmt.Printf("error %v\n", err)
			os.Exit(2)
		}
		var excl objstore.Writer
		for i := 0; ; i++ {
			w, err := b.NewWriter(ctx, fmt.Sprintf("partial/%06d", i), false)
			if err != nil {
				fmt.Printf("error %v\n", err)
				os.Exit(2)
			}
			w.Write(crashContent(i)[:1000])
			if excl != nil {
				excl.Abort()
			}
			if excl, err = b.NewWriter(ctx, fmt.Sprintf("partial-excl/%06d", i), true); err != nil {
				fmt.Printf("error %v\n", err)
				os.Exit(2)
			}
			excl.Write(crashContent(i)[:60000])
			if err := b.Put(ctx, fmt.Sprintf("crash/%06d", i), crashContent(i), i%2 == 0); err != nil {
				fmt.Printf("error %v\n", err)
				os.Exit(2)
			}
			fmt.Printf("wrote %d\n", i)
		}
	}
	os.Exit(0)
}

func crashContent(i int) []byte {
	return bytes.Repeat([]byte{byte(i)}, 64<<10+i)
}

type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Scanner
	stderr bytes.Buffer
}

func startChild(t *testing.T, mode, dir string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childDirEnv+"="+dir)
	cmd.Env = append(cmd.Env, env...)
	c := &child{cmd: cmd}
	cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdout = bufio.NewScanner(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c
}

// line returns the child's next output line, failing the test at EOF.
func (c *child) line(t *testing.T) string {
	t.Helper()
	if !c.stdout.Scan() {
		c.cmd.Wait()
		t.Fatalf("child %d exited early: %v\nstderr: %s", c.cmd.Process.Pid, c.stdout.Err(), c.stderr.String())
	}
	return c.stdout.Text()
}

// TestFileCreateOnlyAcrossProcesses races create-only writes of the same
// keys from several processes: exactly one wins each key, and the object
// holds the winner's data.
func TestFileCreateOnlyAcrossProcesses(t *testing.T) {
	const procs, keys = 8, 60
	dir := t.TempDir()
	children := make([]*child, procs)
	for i := range children {
		children[i] = startChild(t, "race", dir, fmt.Sprintf("%s=child-%d", childIDEnv, i), fmt.Sprintf("%s=%d", childKeysEnv, keys))
	}
	for _, c := range children {
		if l := c.line(t); l != "ready" {
			t.Fatalf("child said %q; want ready", l)
		}
	}
	for _, c := range children {
		io.WriteString(c.stdin, "go\n")
	}
	winners := make([][]int, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, c := range children {
		wg.Go(func() {
			for c.stdout.Scan() {
				var verb string
				var key int
				if _, err := fmt.Sscanf(c.stdout.Text(), "%s %d", &verb, &key); err != nil || (verb != "won" && verb != "lost") {
					if !strings.HasPrefix(c.stdout.Text(), "PASS") && c.stdout.Text() != "ok" {
						t.Errorf("child %d: %s", id, c.stdout.Text())
					}
					continue
				}
				if verb == "won" {
					mu.Lock()
					winners[key] = append(winners[key], id)
					mu.Unlock()
				}
			}
			if err := c.cmd.Wait(); err != nil {
				t.Errorf("child %d: %v\n%s", id, err, c.stderr.String())
			}
		})
	}
	wg.Wait()
	b := objstoretest.Open(t, "file://"+dir)
	for key, w := range winners {
		if len(w) != 1 {
			t.Errorf("key %d: winners %v; want exactly one", key, w)
			continue
		}
		got, err := b.Get(t.Context(), fmt.Sprintf("race/%03d", key))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("child-%d", w[0]); string(got) != want {
			t.Errorf("key %d holds %q; want the winner's %q", key, got, want)
		}
	}
	assertNoTemps(t, dir)
}

func TestFileLockInProcess(t *testing.T) {
	u := objstoretest.FileURL(t)
	a, b := objstoretest.Open(t, u), objstoretest.Open(t, u)
	la, ok := objstore.AsLocker(a)
	if !ok {
		t.Fatal("file bucket is not a Locker")
	}
	lb, _ := objstore.AsLocker(b)
	if err := la.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := la.Lock(); err != nil {
		t.Fatalf("second Lock by the holder = %v; want nil", err)
	}
	err := lb.Lock()
	if !errors.Is(err, objstore.ErrLocked) {
		t.Fatalf("Lock by another Bucket = %v; want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Errorf("error %q does not name the holder's pid", err)
	}
	if objstore.IsRetryable(err) {
		t.Errorf("IsRetryable(ErrLocked) = true")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := la.Lock(); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("Lock after Close = %v; want ErrClosed", err)
	}
	if err := lb.Lock(); err != nil {
		t.Fatalf("Lock after the holder closed = %v; want nil", err)
	}
	// The lock file is not an object.
	if objs, err := b.List(t.Context(), ""); err != nil || len(objs) != 0 {
		t.Errorf("List = %v, %v; want nothing", objs, err)
	}
}

// A process that starts subprocesses can Lock a store right after a
// Bucket of its own closed it: a child holds copies of the parent's
// descriptors, the lock file's included, from its fork to its exec, and
// Lock waits for it instead of failing with ErrLocked (it did, in about 9
// of 10 attempts here, and in the runtime's restart tests under load).
// Another Bucket of the process holding the lock still gets ErrLocked at
// once.
func TestFileLockAfterCloseWhileStartingProcesses(t *testing.T) {
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to start")
	}
	u := objstoretest.FileURL(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				exec.Command(trueBin).Run()
			}
		}()
	}
	defer wg.Wait()
	defer close(stop)

	for i := range 100 {
		b, err := objstore.Open(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := objstore.AsLocker(b)
		err = l.Lock()
		if err == nil && i%50 == 0 {
			other, oerr := objstore.Open(t.Context(), u)
			if oerr != nil {
				t.Fatal(oerr)
			}
			lo, _ := objstore.AsLocker(other)
			start := time.Now()
			if err := lo.Lock(); !errors.Is(err, objstore.ErrLocked) {
				t.Errorf("Lock by a second Bucket while the first holds it = %v; want ErrLocked", err)
			}
			// Waiting for children would take the full 5s bound.
			if d := time.Since(start); d > 2500*time.Millisecond {
				t.Errorf("Lock by a second Bucket took %v to fail; it must not wait", d)
			}
			other.Close()
		}
		b.Close()
		if err != nil {
			t.Fatalf("Lock #%d right after the previous Bucket closed: %v", i, err)
		}
	}
}

func TestFileLockAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, "lock", dir)
	if l := c.line(t); l != "locked" {
		t.Fatalf("child said %q; want locked", l)
	}
	b := objstoretest.Open(t, "file://"+dir)
	l, _ := objstore.AsLocker(b)
	err := l.Lock()
	if !errors.Is(err, objstore.ErrLocked) {
		t.Fatalf("Lock while a child holds it = %v; want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(c.cmd.Process.Pid)) {
		t.Errorf("error %q does not name the child's pid %d", err, c.cmd.Process.Pid)
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.cmd.Wait()
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock after the holder died = %v; want nil", err)
	}
}

// TestFileCrash kills a writing process and checks that every object it
// reported written is there and whole, that no partial object is visible,
// and that Lock clears the dead writer's temporary files. It runs with
// create-only writes staged as the platform does (O_TMPFILE on Linux) and
// in named temporary files.
func TestFileCrash(t *testing.T) {
	t.Run("default", func(t *testing.T) { testFileCrash(t) })
	t.Run("named", func(t *testing.T) { testFileCrash(t, childNamedEnv+"=1") })
}

func testFileCrash(t *testing.T, env ...string) {
	dir := t.TempDir()
	c := startChild(t, "writer", dir, env...)
	last := -1
	for last < 40 {
		l := c.line(t)
		if _, err := fmt.Sscanf(l, "wrote %d", &last); err != nil {
			t.Fatalf("child: %s", l)
		}
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()

	if entries, _ := os.ReadDir(filepath.Join(dir, ".tmp")); len(entries) == 0 {
		t.Fatalf("the killed writer left no temporary files; the test proves nothing")
	}
	b := objstoretest.Open(t, "file://"+dir)
	objs, err := b.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, o := range objs {
		var i int
		if _, err := fmt.Sscanf(o.Key, "crash/%d", &i); err != nil {
			t.Fatalf("unexpected object %q", o.Key)
		}
		got, err := b.Get(t.Context(), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, crashContent(i)) {
			t.Errorf("%s is torn: %d bytes", o.Key, len(got))
		}
		seen[i] = true
	}
	for i := 0; i <= last; i++ {
		if !seen[i] {
			t.Errorf("crash/%06d was reported written but is missing", i)
		}
	}
	l, _ := objstore.AsLocker(b)
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	assertNoTemps(t, dir)
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, ".tmp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("leftover temporary file %s", e.Name())
	}
}

func TestFileLockRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	b := objstoretest.Open(t, "file://"+dir)
	// What a writer that crashed mid-write leaves.
	if err := os.Mkdir(filepath.Join(dir, ".tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp", "obj-123"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, _ := objstore.AsLocker(b)
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	assertNoTemps(t, dir)
}

// Keys map to files and directories, so a key cannot also be a directory
// of other keys on the file driver.
func TestFileKeyDirectoryConflict(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := objstoretest.Open(t, "file://"+dir)
	if err := b.Put(ctx, "a", []byte("file"), false); err != nil {
		t.Fatal(err)
	}
	for _, ifNotExist := range []bool{false, true} {
		if err := b.Put(ctx, "a/b", []byte("x"), ifNotExist); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Put(a/b, ifNotExist=%v) under object a = %v; want ErrInvalidKey", ifNotExist, err)
		}
	}
	if _, err := b.Get(ctx, "a/b"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get(a/b) = %v; want ErrNotFound", err)
	}
	if err := b.Put(ctx, "d/e", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	for _, ifNotExist := range []bool{false, true} {
		if err := b.Put(ctx, "d", []byte("x"), ifNotExist); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Put(d, ifNotExist=%v) over directory d = %v; want ErrInvalidKey", ifNotExist, err)
		}
	}
	w, err := b.NewWriter(ctx, "d", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("Writer.Close(d) over directory d = %v; want ErrInvalidKey", err)
	}
	assertNoTemps(t, dir)
}

func TestFileOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "store")
	b := objstoretest.Open(t, "file://"+dir)
	if err := b.Put(t.Context(), "k", []byte("v"), true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, ".tmp")); err != nil || !fi.IsDir() {
		t.Fatalf("the first write did not create the store directory: %v", err)
	}
	// Files the driver did not write, outside the key namespace, are not
	// listed.
	os.WriteFile(filepath.Join(dir, ".DS_Store"), nil, 0o600)
	if objs, err := b.List(t.Context(), ""); err != nil || len(objs) != 1 {
		t.Errorf("List = %v, %v; want only k", objs, err)
	}

	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	for _, p := range []string{file, filepath.Join(file, "store")} {
		if b, err := objstore.Open(t.Context(), "file://"+p); err == nil {
			b.Close()
			t.Errorf("Open of %s succeeded", p)
		}
	}
}

// TestFileOpenCreatesNothing: Open, reads and List create nothing, not
// even a missing store directory, so that a reader (queue.WithReadOnly,
// the CLI's read commands) leaves no trace; a read of a missing directory
// finds no objects. The first write, segment or Lock creates what it
// needs.
func TestFileOpenCreatesNothing(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("unrelated"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing", "store")
	for _, d := range []string{dir, missing} {
		b, err := objstore.Open(ctx, "file://"+d)
		if err != nil {
			t.Fatalf("Open(%s): %v", d, err)
		}
		if _, err := b.Get(ctx, "owner"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get(owner) in %s = %v; want ErrNotFound", d, err)
		}
		if _, err := b.NewReader(ctx, "wal/1"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("NewReader(wal/1) in %s = %v; want ErrNotFound", d, err)
		}
		if objs, err := b.List(ctx, "wal/"); err != nil || len(objs) != 0 {
			t.Errorf("List(wal/) in %s = %v, %v; want nothing", d, objs, err)
		}
		sg, _ := objstore.AsSegmenter(b)
		if _, err := sg.OpenSegment(ctx, "wal/1.log"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("OpenSegment(wal/1.log) in %s = %v; want ErrNotFound", d, err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "notes.txt" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("Open and reads left %v in the directory; want only notes.txt", names)
	}

	// The first write creates the directory, whatever it is.
	for _, tc := range []struct {
		name  string
		write func(b objstore.Bucket, dir string) error
	}{
		{"put", func(b objstore.Bucket, _ string) error { return b.Put(ctx, "k", []byte("v"), false) }},
		{"create-only put", func(b objstore.Bucket, _ string) error { return b.Put(ctx, "k", []byte("v"), true) }},
		{"named create-only put", func(b objstore.Bucket, _ string) error {
			objstore.SetFileStagesUnnamed(b, false)
			return b.Put(ctx, "k", []byte("v"), true)
		}},
		{"writer", func(b objstore.Bucket, _ string) error {
			w, err := b.NewWriter(ctx, "k", true)
			if err != nil {
				return err
			}
			w.Write([]byte("v"))
			return w.Close()
		}},
		{"segment", func(b objstore.Bucket, _ string) error {
			sg, _ := objstore.AsSegmenter(b)
			s, err := sg.NewSegment(ctx, 4096)
			if err != nil {
				return err
			}
			defer s.Close()
			return s.Publish(ctx, "k")
		}},
		{"lock", func(b objstore.Bucket, dir string) error {
			l, _ := objstore.AsLocker(b)
			if err := l.Lock(); err != nil {
				return err
			}
			_, err := os.Stat(filepath.Join(dir, ".lock"))
			return err
		}},
	} {
		d := filepath.Join(missing, tc.name)
		b := objstoretest.Open(t, "file://"+d)
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Open created %s (%v)", d, err)
		}
		if err := tc.write(b, d); err != nil {
			t.Errorf("%s in a missing directory: %v", tc.name, err)
			continue
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s did not create the store directory: %v", tc.name, err)
		}
		if tc.name != "lock" {
			if got, err := b.Get(ctx, "k"); err != nil || (tc.name != "segment" && string(got) != "v") {
				t.Errorf("%s: Get(k) = %q, %v", tc.name, got, err)
			}
		}
	}
}
