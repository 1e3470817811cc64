package objstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Names inside a file store's directory. Keys cannot start with '.', so
// these never collide with objects. Not to be changed: they are part of the
// on-disk layout.
const (
	fileTmpDir   = ".tmp"  // staging area for objects being written
	fileLockName = ".lock" // flock(2) target of Lock
)

// File modes for what the driver creates (before the umask).
const (
	fileDirMode  fs.FileMode = 0o700
	fileObjMode  fs.FileMode = 0o600 // as os.CreateTemp's
	fileLockMode fs.FileMode = 0o600
)

// fileBucket is the durable local-disk driver; see the package
// documentation for its protocol and guarantees.
type fileBucket struct {
	// Immutable.
	root string // cleaned absolute directory
	tmp  string // root/.tmp

	closed atomic.Bool
	anon   atomic.Bool // create-only writes stage O_TMPFILE files
	// openAnon is openAnon; tests replace it to simulate a file system
	// without O_TMPFILE. Set before the bucket is used.
	openAnon func(dir string) (*os.File, error)
	dirs     dirCache
	// noDsync: the kernel or file system refused a write with RWF_DSYNC
	// (see writeDsync); segment records are written and then
	// fdatasynced. writeDsync is writeDsync; tests replace it to simulate
	// such a kernel. Set before the bucket is used.
	noDsync    atomic.Bool
	writeDsync func(f *os.File, p []byte, off int64) error

	mu       sync.Mutex
	lockFile *os.File    // guarded by mu; non-nil while the lock is held
	lockInfo fs.FileInfo // guarded by mu; lockFile's, in heldLocks

	spareMu     sync.Mutex
	spare       *os.File       // guarded by spareMu: unnamed file for the next create-only write
	refilling   bool           // guarded by spareMu: a goroutine is opening the spare
	spareClosed bool           // guarded by spareMu: Close was called
	refill      sync.WaitGroup // the refilling goroutine
}

// openFile opens the store directory. It creates nothing: a store that is
// only read (a read-only queue.Open, the CLI's read commands) must leave no
// trace, not even a directory at a mistyped path. The directory, missing
// parents and the temp directory are created by the first write, segment
// or Lock (see inTmpDir, openDirCreating and Lock); until then a missing
// directory reads as a store without objects. A path that cannot be a
// directory (a regular file, or one under a regular file) fails here.
func openFile(loc *location) (Bucket, error) {
	if !fileSupported {
		return nil, opErr("open", loc.display, fmt.Errorf("file stores: %w on this platform", errors.ErrUnsupported))
	}
	f := &fileBucket{root: loc.name, tmp: filepath.Join(loc.name, fileTmpDir), openAnon: openAnon, writeDsync: writeDsync}
	fi, err := os.Stat(f.root)
	switch {
	case err == nil && !fi.IsDir():
		err = &fs.PathError{Op: "open", Path: f.root, Err: errNotDir}
	case errors.Is(err, fs.ErrNotExist):
		err = nil // created by the first write
	}
	if err != nil {
		return nil, opErr("open", loc.display, err)
	}
	f.anon.Store(anonSupported())
	return f, nil
}

// path maps a valid key to its file.
func (f *fileBucket) path(key string) string {
	return filepath.Join(f.root, filepath.FromSlash(key))
}

// check rejects use after Close, invalid keys and done contexts.
func (f *fileBucket) check(ctx context.Context, op, key string) error {
	if f.closed.Load() {
		return opErr(op, key, ErrClosed)
	}
	if err := validateKey(key); err != nil {
		return opErr(op, key, err)
	}
	if err := ctx.Err(); err != nil {
		return opErr(op, key, err)
	}
	return nil
}

// notFound reports whether err from opening or reading key's path means
// there is no object with that key.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || isNotDir(err) || isDirErr(err)
}

// Get implements Bucket.
func (f *fileBucket) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.check(ctx, "get", key); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(f.path(key))
	if err != nil {
		if notFound(err) {
			err = ErrNotFound
		}
		return nil, opErr("get", key, err)
	}
	return data, nil
}

// ModTime implements ModTimer.
func (f *fileBucket) ModTime(ctx context.Context, key string) (time.Time, error) {
	if err := f.check(ctx, "head", key); err != nil {
		return time.Time{}, err
	}
	fi, err := os.Stat(f.path(key))
	if err != nil {
		if notFound(err) {
			err = ErrNotFound
		}
		return time.Time{}, opErr("head", key, err)
	}
	return fi.ModTime(), nil
}

// NewReader implements Bucket.
func (f *fileBucket) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.check(ctx, "get", key); err != nil {
		return nil, err
	}
	file, _, err := f.openObject(key)
	if err != nil {
		return nil, err
	}
	return file, nil
}

// openObject opens key's file for reading; a missing key, or one naming a
// directory, is ErrNotFound.
func (f *fileBucket) openObject(key string) (*os.File, fs.FileInfo, error) {
	file, err := os.Open(f.path(key))
	if err == nil {
		var fi fs.FileInfo
		if fi, err = file.Stat(); err == nil && fi.Mode().IsRegular() {
			return file, fi, nil
		}
		if err == nil {
			err = fs.ErrNotExist
		}
		file.Close()
	}
	if notFound(err) {
		err = ErrNotFound
	}
	return nil, nil, opErr("get", key, err)
}

// Put implements Bucket.
func (f *fileBucket) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	if err := f.check(ctx, "put", key); err != nil {
		return err
	}
	st, err := f.stage(ifNotExist)
	if err != nil {
		return opErr("put", key, err)
	}
	_, err = st.file.Write(data)
	if err == nil {
		err = f.finish(st, key, ifNotExist)
	} else {
		st.discard()
	}
	if err != nil {
		return opErr("put", key, err)
	}
	return nil
}

// NewWriter implements Bucket. Data is staged like Put's and committed like
// Put by Close.
func (f *fileBucket) NewWriter(ctx context.Context, key string, ifNotExist bool) (Writer, error) {
	if err := f.check(ctx, "put", key); err != nil {
		return nil, err
	}
	st, err := f.stage(ifNotExist)
	if err != nil {
		return nil, opErr("put", key, err)
	}
	return &fileWriter{
		f: f, ctx: ctx, key: key, ifNotExist: ifNotExist,
		st: st, buf: bufio.NewWriterSize(&pacedWriter{f: st.file}, 64<<10),
	}, nil
}

// writeBackChunk is how many bytes a streamed write (a snapshot, a WAL
// segment's zeros) writes before it starts writing them back to the disk.
const writeBackChunk = 1 << 20

// pacedWriter writes to a file sequentially, starting the write-back of each
// writeBackChunk as it completes and waiting for the one before (see
// writeBack): at most about two chunks are ever in flight to the disk.
type pacedWriter struct {
	f                  *os.File
	prev, started, off int64 // chunk waited for next; chunk being written back; end
}

func (w *pacedWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.started >= writeBackChunk {
		writeBack(w.f, w.prev, w.started, w.off-w.started)
		w.prev, w.started = w.started, w.off
	}
	return n, err
}

// staged is an object being written: an unnamed O_TMPFILE file (anon), or a
// named temporary file in the temp directory.
type staged struct {
	file *os.File
	anon bool
}

// discard abandons a staged object.
func (st staged) discard() {
	st.file.Close()
	if !st.anon {
		os.Remove(st.file.Name())
	}
}

// stage creates the file an object is written into before it is published.
// Create-only writes use an unnamed O_TMPFILE file where the platform and
// the file system have it (a crash leaves nothing behind, and publishing is
// one linkat); the first write that finds it unsupported switches the store
// to named temporary files for good. Other writes, which must replace an
// existing object with rename(2), always use a named temporary file.
func (f *fileBucket) stage(ifNotExist bool) (staged, error) {
	if ifNotExist && f.anon.Load() {
		file, err := f.takeAnon()
		if err == nil {
			return staged{file: file, anon: true}, nil
		}
		if !anonUnsupported(err) {
			return staged{}, err
		}
		f.anon.Store(false)
	}
	file, err := f.inTmpDir(func(dir string) (*os.File, error) { return os.CreateTemp(dir, "obj-*") })
	return staged{file: file}, err
}

// takeAnon returns an unnamed file for a create-only write: the spare if
// one is ready, else a new one. Either way it starts opening the next spare,
// so that the next write finds one: the open then overlaps this write's
// syncs instead of adding to the next write's latency (creating an inode
// waits for the file system's journal, which the syncs keep busy).
func (f *fileBucket) takeAnon() (*os.File, error) {
	f.spareMu.Lock()
	file := f.spare
	f.spare = nil
	f.spareMu.Unlock()
	if file == nil {
		var err error
		if file, err = f.inTmpDir(f.openAnon); err != nil {
			return nil, err
		}
	}
	f.refillSpare()
	return file, nil
}

// refillSpare opens the spare unnamed file in the background, unless one is
// there or being opened. A failure is dropped: the next write opens its own
// file and reports the error (or falls back to named files).
func (f *fileBucket) refillSpare() {
	f.spareMu.Lock()
	defer f.spareMu.Unlock()
	if f.refilling || f.spare != nil || f.spareClosed {
		return
	}
	f.refilling = true
	f.refill.Add(1)
	go func() {
		defer f.refill.Done()
		file, err := f.inTmpDir(f.openAnon)
		f.spareMu.Lock()
		defer f.spareMu.Unlock()
		f.refilling = false
		if err != nil {
			return
		}
		if f.spareClosed {
			file.Close()
			return
		}
		f.spare = file
	}()
}

// closeSpare closes the spare file and waits for a refill in progress; no
// spare is opened afterwards.
func (f *fileBucket) closeSpare() {
	f.spareMu.Lock()
	f.spareClosed = true
	if f.spare != nil {
		f.spare.Close()
		f.spare = nil
	}
	f.spareMu.Unlock()
	f.refill.Wait()
}

// inTmpDir calls create on the temp directory, creating the directory (and
// the store directory) if it is missing: Open creates nothing, so the first
// write does; later, something may have removed it.
func (f *fileBucket) inTmpDir(create func(dir string) (*os.File, error)) (*os.File, error) {
	file, err := create(f.tmp)
	if errors.Is(err, fs.ErrNotExist) {
		if err = mkdirAllSync(f.tmp); err == nil {
			file, err = create(f.tmp)
		}
	}
	return file, err
}

// finish makes the written staged file durable (its data; the name comes
// with the directory sync in publish), publishes it at key and releases it.
// On failure nothing is published and the staged file is gone.
func (f *fileBucket) finish(st staged, key string, ifNotExist bool) error {
	err := syncData(st.file)
	if err == nil && f.closed.Load() {
		err = ErrClosed
	}
	if err == nil && st.anon {
		// The unnamed file is linked through its descriptor: keep it open.
		err = f.publish(st, key, ifNotExist)
		if cerr := st.file.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if cerr := st.file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.publish(st, key, ifNotExist)
	}
	if err != nil && !st.anon {
		os.Remove(st.file.Name())
	}
	return err
}

// publish gives the synced staged file key's name and syncs the directory
// that now holds the name, through a cached descriptor of that directory.
// Create-only writes use linkat(2), which fails if the name exists,
// atomically across processes; others use renameat(2), which atomically
// replaces. Missing parent directories are created (and synced into their
// parents). On success a named staged file no longer exists.
func (f *fileBucket) publish(st staged, key string, ifNotExist bool) error {
	final := f.path(key)
	dir, name := filepath.Dir(final), filepath.Base(final)
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var d *dirHandle
		d, err = f.dirs.acquire(dir, openDirCreating)
		if err != nil {
			if isNotDir(err) || errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%w: a parent of %q is an object (file driver limitation)", ErrInvalidKey, key)
			}
			return err
		}
		if st.anon {
			err = linkAnon(st.file, d.f, name)
		} else {
			err = placeNamed(st.file.Name(), d.f, name, ifNotExist)
		}
		if err == nil {
			if err = syncDirFile(d.f); err != nil {
				// The name exists: a retry would find it (ErrExists) and
				// not sync it. Not retryable (see IsRetryable).
				err = &permanentError{err}
			}
			f.dirs.release(d)
			break
		}
		f.dirs.release(d)
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
		// The cached directory was removed (creating an entry in a removed
		// directory fails with ENOENT): open the path afresh.
		f.dirs.evict(d)
	}
	if err != nil {
		if fi, serr := os.Lstat(final); serr == nil && fi.IsDir() {
			return fmt.Errorf("%w: %q is a directory of other keys (file driver limitation)", ErrInvalidKey, key)
		}
		if ifNotExist && errors.Is(err, fs.ErrExist) {
			return ErrExists
		}
		return err
	}
	if ifNotExist && !st.anon {
		// The object is committed; a leftover temp name is harmless and
		// removed at the next Lock.
		os.Remove(st.file.Name())
	}
	return nil
}

// openDirCreating opens dir, first creating it and any missing parents
// (synced into their parents) if it is absent.
func openDirCreating(dir string) (*os.File, error) {
	d, err := openDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err = mkdirAllSync(dir); err == nil {
			d, err = openDir(dir)
		}
	}
	return d, err
}

// Delete implements Bucket. The directory is not fsynced: after a power
// loss a deleted object may reappear. The engine only deletes objects that
// are garbage whether or not they exist (WAL below a durable snapshot,
// superseded snapshots, unreferenced blobs, which the next Open sweeps), and
// an fsync per delete would compete with WAL writes for the disk.
func (f *fileBucket) Delete(ctx context.Context, key string) error {
	if err := f.check(ctx, "delete", key); err != nil {
		return err
	}
	p := f.path(key)
	if err := unlinkFile(p); err != nil {
		if notFound(err) {
			return nil
		}
		if fi, serr := os.Lstat(p); serr == nil && fi.IsDir() {
			return nil // a directory of other keys, not an object
		}
		return opErr("delete", key, err)
	}
	return nil
}

// List implements Bucket. It walks only the directory named by prefix's
// part up to its last '/', and skips the driver's own files.
func (f *fileBucket) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if f.closed.Load() {
		return nil, opErr("list", prefix, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr("list", prefix, err)
	}
	dirPart := prefix[:strings.LastIndexByte(prefix, '/')+1]
	if dirPart != "" && validateKey(strings.TrimSuffix(dirPart, "/")) != nil {
		return nil, nil // no valid key has this prefix
	}
	start := filepath.Join(f.root, filepath.FromSlash(dirPart))
	var out []ObjectInfo
	n := 0
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err != nil {
			if notFound(err) {
				// The start directory is absent, or an entry vanished
				// under a concurrent Delete.
				return nil
			}
			return err
		}
		if p == f.root {
			return nil
		}
		rel, err := filepath.Rel(f.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if key[0] == '.' {
			// The driver's own files, and anything else no key can name.
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			// Descend only where keys with the prefix can be.
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if notFound(err) {
				return nil
			}
			return err
		}
		out = append(out, ObjectInfo{Key: key, Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, opErr("list", prefix, err)
	}
	// The walk's order is by name within each directory, which is not key
	// order ("a.b" < "a/c", but directory "a" is walked before "a.b").
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Close implements Bucket. It releases the lock if held.
func (f *fileBucket) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	f.dirs.close()
	f.closeSpare()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lockFile != nil {
		heldLocks.drop(f.lockInfo)
		err := f.lockFile.Close()
		f.lockFile, f.lockInfo = nil, nil
		if err != nil {
			return opErr("close", "", err)
		}
	}
	return nil
}

// Lock implements Locker with flock(2) on the store's lock file. Having
// taken the lock, it removes temporary files left by crashed writers: the
// lock holder is the store's only writer.
func (f *fileBucket) Lock() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Load() {
		return opErr("lock", "", ErrClosed)
	}
	if f.lockFile != nil {
		return nil
	}
	// Open creates nothing: the lock holder is a writer, and creates the
	// store directory if it is missing.
	if err := mkdirAllSync(f.root); err != nil {
		return opErr("lock", "", err)
	}
	name := filepath.Join(f.root, fileLockName)
	lf, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, fileLockMode)
	if err != nil {
		return opErr("lock", "", err)
	}
	err = lockFile(lf)
	if errors.Is(err, ErrLocked) {
		err = waitOwnChildren(lf)
	}
	var info fs.FileInfo
	if err == nil {
		info, err = lf.Stat()
	}
	if err != nil {
		if errors.Is(err, ErrLocked) {
			err = fmt.Errorf("%w: %s (pid of last holder: %s)", ErrLocked, name, lockHolder(lf))
		}
		lf.Close()
		return opErr("lock", "", err)
	}
	// The pid is for the error message of the next contender, and tells a
	// Lock in this process that finds the lock held that the holder may
	// be a child of its own (see waitOwnChildren).
	if err := lf.Truncate(0); err == nil {
		lf.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	heldLocks.add(info)
	f.lockFile, f.lockInfo = lf, info
	f.removeStaleTemps()
	return nil
}

// lockHolder returns the pid the last holder wrote into the lock file.
func lockHolder(lf *os.File) string {
	holder := make([]byte, 32)
	n, _ := lf.ReadAt(holder, 0)
	return strings.TrimSpace(string(holder[:n]))
}

// heldLocks are the lock files that Buckets of this process hold.
var heldLocks lockSet

type lockSet struct {
	mu    sync.Mutex
	files []fs.FileInfo // guarded by mu
}

func (s *lockSet) add(fi fs.FileInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files = append(s.files, fi)
}

func (s *lockSet) drop(fi fs.FileInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files = slices.DeleteFunc(s.files, func(h fs.FileInfo) bool { return h == fi })
}

func (s *lockSet) has(lf *os.File) bool {
	fi, err := lf.Stat()
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.files, func(h fs.FileInfo) bool { return os.SameFile(h, fi) })
}

// lockChildWait bounds how long Lock waits for its own process's children
// to let go of a lock this process released (see waitOwnChildren).
const lockChildWait = 5 * time.Second

// waitOwnChildren takes the lock on lf, which lockFile found held, if the
// holder is this process's own child: it waits, up to lockChildWait, while
// the last holder was this process and no Bucket of this process holds the
// lock, and returns ErrLocked as soon as that is not so.
//
// A flock belongs to the open file description, and a child process holds
// a copy of each of its parent's descriptors from its fork until its exec
// closes the close-on-exec ones (Go's os/exec resumes the parent before
// that). A lock file that a Bucket closed meanwhile stays locked for that
// long, and a Lock right after Close, in a process that starts
// subprocesses (a step running a command), failed with ErrLocked.
func waitOwnChildren(lf *os.File) error {
	self := strconv.Itoa(os.Getpid())
	deadline := time.Now().Add(lockChildWait)
	for {
		if lockHolder(lf) != self || heldLocks.has(lf) || time.Now().After(deadline) {
			return ErrLocked
		}
		time.Sleep(time.Millisecond)
		if err := lockFile(lf); !errors.Is(err, ErrLocked) {
			return err
		}
	}
}

// removeStaleTemps empties the temp directory.
// REQUIRES: the lock is held (so no other writer is staging files).
func (f *fileBucket) removeStaleTemps() {
	entries, err := os.ReadDir(f.tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		os.RemoveAll(filepath.Join(f.tmp, e.Name()))
	}
}

// fileWriter streams into a staged file; Close publishes it.
type fileWriter struct {
	f          *fileBucket
	ctx        context.Context
	key        string
	ifNotExist bool
	st         staged
	buf        *bufio.Writer
	done       bool // Close or Abort was called
	err        error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, opErr("write", w.key, ErrClosed)
	}
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.buf.Write(p)
	if err != nil {
		w.err = opErr("write", w.key, err)
		return n, w.err
	}
	return n, nil
}

func (w *fileWriter) Close() error {
	if w.done {
		return opErr("put", w.key, ErrClosed)
	}
	w.done = true
	err := w.err
	if err == nil {
		err = w.ctx.Err()
	}
	if err == nil {
		err = w.buf.Flush()
	}
	if err == nil {
		err = w.f.finish(w.st, w.key, w.ifNotExist)
	} else {
		w.st.discard()
	}
	if err != nil {
		return opErr("put", w.key, err)
	}
	return nil
}

func (w *fileWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.st.discard()
	return nil
}

// mkdirAllSync creates dir and any missing parents, syncing each parent
// in which it created an entry, so that the new directories survive a
// crash.
func mkdirAllSync(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: errNotDir}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllSync(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, fileDirMode); err != nil {
		// Created concurrently? Then sync the parent too: the creator may
		// not have yet.
		if fi, serr := os.Stat(dir); !errors.Is(err, fs.ErrExist) || serr != nil || !fi.IsDir() {
			return err
		}
	}
	if err := syncDir(parent); err != nil {
		// A retry would find the directory and not sync its parent again:
		// not retryable (see IsRetryable).
		return &permanentError{err}
	}
	return nil
}
