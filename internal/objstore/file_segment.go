package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// zeroBlock is what segments are filled with.
var zeroBlock = make([]byte, 1<<20)

// NewSegment implements Segmenter. The segment is staged like a create-only
// Put (an unnamed O_TMPFILE file, or a named one in .tmp), filled with
// zeros by write(2), not fallocate(2): blocks that were really written are
// overwritten later without the file system recording anything (an
// fallocated block is "unwritten" until its first write, which the journal
// must then commit), written back a chunk at a time (see pacedWriter) so
// as not to hold up the WAL's syncs, and fdatasynced. Publish links it like a create-only
// Put and fsyncs the directory.
func (f *fileBucket) NewSegment(ctx context.Context, size int64) (Segment, error) {
	if f.closed.Load() {
		return nil, opErr("segment", "", ErrClosed)
	}
	if size <= 0 {
		return nil, opErr("segment", "", fmt.Errorf("segment size %d: must be positive", size))
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr("segment", "", err)
	}
	st, err := f.stage(true)
	if err != nil {
		return nil, opErr("segment", "", err)
	}
	pw := &pacedWriter{f: st.file}
	for off := int64(0); off < size && err == nil; {
		n := min(size-off, int64(len(zeroBlock)))
		_, err = pw.Write(zeroBlock[:n])
		off += n
		if err == nil {
			err = ctx.Err()
		}
	}
	if err == nil {
		err = syncData(st.file)
	}
	if err != nil {
		st.discard()
		return nil, opErr("segment", "", err)
	}
	return &fileSegment{f: f, st: st, size: size}, nil
}

// ReuseSegment implements Segmenter: it renames the object's file into the
// temp directory, where it is staged like a named create-only write, and
// fsyncs the directory it left, so that the old name (garbage a snapshot
// already covers) cannot come back after a crash holding whatever the
// caller writes next.
func (f *fileBucket) ReuseSegment(ctx context.Context, key string) (Segment, error) {
	if err := f.check(ctx, "segment", key); err != nil {
		return nil, err
	}
	// A fresh name in the temp directory, which the rename replaces.
	tmp, err := f.inTmpDir(func(dir string) (*os.File, error) { return os.CreateTemp(dir, "seg-*") })
	if err != nil {
		return nil, opErr("segment", key, err)
	}
	tmp.Close()
	var file *os.File
	var fi fs.FileInfo
	if err = os.Rename(f.path(key), tmp.Name()); err == nil {
		// The old name's removal must be durable before the caller writes
		// a new header into the file: after a crash the name must not
		// come back with a half-written one.
		if err = syncDir(filepath.Dir(f.path(key))); errors.Is(err, errors.ErrUnsupported) {
			err = nil
		}
	}
	if err == nil {
		if file, err = os.OpenFile(tmp.Name(), os.O_RDWR, 0); err == nil {
			if fi, err = file.Stat(); err == nil && !fi.Mode().IsRegular() {
				err = fmt.Errorf("%w: not a regular file", ErrNotFound)
			}
			if err != nil {
				file.Close()
			}
		}
	}
	if err != nil {
		os.Remove(tmp.Name())
		if notFound(err) {
			err = ErrNotFound
		}
		return nil, opErr("segment", key, err)
	}
	return &fileSegment{f: f, st: staged{file: file}, size: fi.Size()}, nil
}

// SyncPrefix implements Segmenter: it fdatasyncs every object under prefix
// and fsyncs the directories holding them.
func (f *fileBucket) SyncPrefix(ctx context.Context, prefix string) error {
	objs, err := f.List(ctx, prefix)
	if err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, o := range objs {
		p := f.path(o.Key)
		dirs[filepath.Dir(p)] = true
		file, err := os.Open(p)
		if err != nil {
			if notFound(err) {
				continue // deleted meanwhile: garbage either way
			}
			return opErr("sync", o.Key, err)
		}
		err = syncData(file)
		file.Close()
		if err != nil {
			// Never retryable (see IsRetryable): a crashed writer's pages
			// that failed to write back may be dropped, and a second
			// fdatasync would report them durable.
			return opErr("sync", o.Key, &permanentError{err})
		}
	}
	for d := range dirs {
		if err := syncDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return opErr("sync", strings.TrimSuffix(prefix, "/"), &permanentError{err})
		}
	}
	return nil
}

// OpenSegment implements Segmenter.
func (f *fileBucket) OpenSegment(ctx context.Context, key string) (SegmentReader, error) {
	if err := f.check(ctx, "get", key); err != nil {
		return nil, err
	}
	file, fi, err := f.openObject(key)
	if err != nil {
		return nil, err
	}
	return &fileSegReader{f: f, key: key, file: file, size: fi.Size()}, nil
}

// fileSegReader is an open segment; see OpenSegment.
type fileSegReader struct {
	f    *fileBucket
	key  string
	file *os.File
	size int64
}

func (r *fileSegReader) Size() int64 { return r.size }

func (r *fileSegReader) ReadAt(p []byte, off int64) (int, error) {
	if r.f.closed.Load() {
		return 0, opErr("get", r.key, ErrClosed)
	}
	n, err := r.file.ReadAt(p, off)
	if err != nil && err != io.EOF {
		return n, opErr("get", r.key, err)
	}
	return n, err
}

func (r *fileSegReader) Close() error { return r.file.Close() }

// fileSegment is a staged, zero-filled file; see NewSegment.
type fileSegment struct {
	f    *fileBucket
	size int64

	mu        sync.Mutex // guards st against Close racing the others
	st        staged
	key       string // once published
	closed    bool
	published bool
}

func (s *fileSegment) Size() int64 { return s.size }

func (s *fileSegment) name() string {
	if s.key != "" {
		return s.key
	}
	return "(unpublished segment)"
}

func (s *fileSegment) Publish(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable("publish", key); err != nil {
		return err
	}
	if s.published {
		return opErr("publish", key, errors.New("segment already published"))
	}
	if err := s.f.check(ctx, "publish", key); err != nil {
		return err
	}
	// The zeros were synced by NewSegment; WriteAts since are the caller's
	// to Sync.
	if err := s.f.publish(s.st, key, true); err != nil {
		return opErr("publish", key, err)
	}
	s.published, s.key = true, key
	return nil
}

func (s *fileSegment) usable(op, key string) error {
	if s.closed || s.f.closed.Load() {
		return opErr(op, key, ErrClosed)
	}
	return nil
}

// writable checks a write of p at off: the segment open, the range in it.
func (s *fileSegment) writable(p []byte, off int64) error {
	if err := s.usable("write", s.name()); err != nil {
		return err
	}
	if off < 0 || off+int64(len(p)) > s.size {
		return opErr("write", s.name(), fmt.Errorf("write of %d bytes at %d outside the segment's %d", len(p), off, s.size))
	}
	return nil
}

func (s *fileSegment) WriteAt(p []byte, off int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(p, off); err != nil {
		return err
	}
	return s.writeLocked(p, off)
}

// writeLocked writes p at off. REQUIRES: s.mu held, the write checked.
func (s *fileSegment) writeLocked(p []byte, off int64) error {
	if _, err := s.st.file.WriteAt(p, off); err != nil {
		return opErr("write", s.name(), &permanentError{err})
	}
	return nil
}

func (s *fileSegment) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable("sync", s.name()); err != nil {
		return err
	}
	return s.syncLocked()
}

// syncLocked fdatasyncs the segment. REQUIRES: s.mu held.
func (s *fileSegment) syncLocked() error {
	if err := syncData(s.st.file); err != nil {
		// Never retryable (see IsRetryable): the failed write-back may
		// have been dropped, and a second fdatasync would not see it.
		return opErr("sync", s.name(), &permanentError{err})
	}
	return nil
}

// WriteAtSync writes p at off with RWF_DSYNC where the kernel has it: one
// system call where WriteAt and Sync make two, with the same guarantee
// (the write's data, and the metadata needed to read it back, are durable
// when it returns, as after fdatasync; the zeros and records before it
// were synced already, and fdatasync on the whole file would add
// nothing). A kernel or file system that refuses the flag (ENOTSUP,
// EOPNOTSUPP, EINVAL; ENOSYS before pwritev2) has written nothing: the
// bucket then writes and fdatasyncs, from this record on.
func (s *fileSegment) WriteAtSync(p []byte, off int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(p, off); err != nil {
		return err
	}
	if !s.f.noDsync.Load() {
		err := s.f.writeDsync(s.st.file, p, off)
		if err == nil {
			return nil
		}
		if !dsyncUnsupported(err) {
			// Never retryable, as a failed Sync: the part written may
			// have reached the cache and not the disk.
			return opErr("write", s.name(), &permanentError{err})
		}
		s.f.noDsync.Store(true)
	}
	if err := s.writeLocked(p, off); err != nil {
		return err
	}
	return s.syncLocked()
}

func (s *fileSegment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.published {
		s.st.discard()
		return nil
	}
	if err := s.st.file.Close(); err != nil {
		return opErr("close", s.name(), err)
	}
	return nil
}
