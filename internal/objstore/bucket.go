package objstore

import (
	"context"
	"io"
	"time"
)

// Bucket is the narrow object-store interface the engine is written against.
// Every implementation must make Put and NewWriter objects appear atomically
// (a reader sees the whole object or none of it), and must make IfNotExist
// writes atomic against concurrent writers, in this process and in others.
//
// Keys are slash-separated relative names ("wal/00000000000000000001"); see
// the package documentation for the exact rules. A Bucket opened with a
// prefix applies it transparently: keys passed to and returned from a Bucket
// never include the prefix.
//
// A Bucket is safe for concurrent use by multiple goroutines. Every error it
// returns is an *OpError naming the operation and key, and wraps one of the
// package's sentinel errors where one applies; see IsRetryable for which
// failures a retry can fix.
type Bucket interface {
	// Get returns the whole object. A missing key is ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// NewReader streams an object. A missing key is ErrNotFound.
	NewReader(ctx context.Context, key string) (io.ReadCloser, error)
	// Put writes an object in one request. With ifNotExist set the write
	// fails with ErrExists if the key already exists, atomically.
	Put(ctx context.Context, key string, data []byte, ifNotExist bool) error
	// NewWriter streams an object that becomes visible atomically when
	// Close returns nil. Abort discards it. With ifNotExist set, Close fails
	// with ErrExists if the key already exists.
	NewWriter(ctx context.Context, key string, ifNotExist bool) (Writer, error)
	// Delete removes an object. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns every object whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Close releases the bucket (and any lock it holds). Operations after
	// Close fail with ErrClosed; a second Close returns nil.
	Close() error
}

// Writer is a streaming upload; see Bucket.NewWriter. A Writer is not safe
// for concurrent use.
type Writer interface {
	io.Writer
	// Close commits the object. After an error nothing may be assumed
	// about whether the object was written, unless the error is ErrExists
	// (see IsRetryable and the package documentation on ambiguous writes).
	Close() error
	// Abort discards the upload; the object is not created. Abort after
	// Close (successful or not) does nothing and returns nil, so
	// `defer w.Abort()` is a safe pattern.
	Abort() error
}

// ObjectInfo describes one listed object.
type ObjectInfo struct {
	// Key is the object's key, without the bucket's prefix.
	Key string
	// Size is the object's length in bytes.
	Size int64
}

// Locker is implemented by buckets that can hold an exclusive,
// process-lifetime lock on the store (the local-disk driver: flock on the
// store directory). The engine uses it instead of a heartbeat object.
//
// Wrappers (Counting, the objstoretest fault injector) do not implement
// Locker themselves; find the lock of a possibly wrapped bucket with
// AsLocker, never with a type assertion.
type Locker interface {
	// Lock takes the lock without blocking. If another process (or another
	// Bucket in this process) holds it, Lock returns ErrLocked. The lock is
	// released by Close and when the process dies. Calling Lock again on a
	// Bucket that already holds the lock returns nil.
	Lock() error
}

// AsLocker returns the Locker of b, looking through wrappers: a Bucket that
// wraps another exposes it with a method
//
//	Unwrap() Bucket
//
// and AsLocker follows that chain until it finds a Bucket that implements
// Locker. It reports false if no Bucket in the chain does (memory and cloud
// buckets).
func AsLocker(b Bucket) (Locker, bool) {
	for b != nil {
		if l, ok := b.(Locker); ok {
			return l, true
		}
		u, ok := b.(interface{ Unwrap() Bucket })
		if !ok {
			return nil, false
		}
		b = u.Unwrap()
	}
	return nil, false
}

// Segmenter is implemented by buckets that can hold log segments: objects
// created at a fixed size, full of zeros, and then overwritten in place,
// each write made durable by Segment.Sync without creating anything (the
// local-disk driver). A durable overwrite of allocated blocks is several
// times cheaper than a durable new object, which also needs its name and
// its allocation made durable. The engine keeps its WAL in segments where
// the bucket has them.
//
// Find the Segmenter of a possibly wrapped bucket with AsSegmenter.
type Segmenter interface {
	// NewSegment stages a segment of size zero bytes (size > 0), durable
	// but without a name: nothing can see it until Publish, and a crash
	// before Publish leaves nothing behind.
	NewSegment(ctx context.Context, size int64) (Segment, error)
	// ReuseSegment turns the object key, a segment the caller no longer
	// needs, into a staged segment of the same size that still holds the
	// old bytes (the log written into it must tell its records from stale
	// ones). The key is gone at once; its blocks, already allocated and
	// written, are overwritten later without the cost of new ones. A crash
	// may bring the key back, holding the old bytes.
	ReuseSegment(ctx context.Context, key string) (Segment, error)
	// SyncPrefix makes durable every object under prefix, its data and its
	// name, including writes a crashed process left unsynced in the
	// operating system's cache. A new writer calls it before it trusts
	// what it reads there.
	SyncPrefix(ctx context.Context, prefix string) error
	// OpenSegment opens the published segment key for reading in place, a
	// piece at a time: a reader following a log being written reads what
	// was added, not the whole segment again. A missing key is
	// ErrNotFound.
	OpenSegment(ctx context.Context, key string) (SegmentReader, error)
}

// SegmentReader reads a published segment in place; see
// Segmenter.OpenSegment. It reads the file it opened even if the key is
// deleted or renamed meanwhile. It is safe for concurrent use.
type SegmentReader interface {
	// Size is the segment's size in bytes.
	Size() int64
	// ReadAt reads len(p) bytes at off, as io.ReaderAt does: fewer only
	// at the segment's end, with io.EOF. It may see bytes a writer has
	// written but not yet synced.
	ReadAt(p []byte, off int64) (int, error)
	// Close releases the reader.
	Close() error
}

// Segment is a preallocated object being written in place; see Segmenter.
// A Segment is not safe for concurrent use, except that Close may be called
// at any time to release it.
type Segment interface {
	// Size is the segment's fixed size in bytes.
	Size() int64
	// Publish names the segment key, create-only (ErrExists if the key
	// exists), and makes the name durable. Writes made before Publish
	// are part of the object.
	Publish(ctx context.Context, key string) error
	// WriteAt writes p at offset off; off+len(p) must not exceed Size.
	// Readers may see the bytes before Sync.
	WriteAt(p []byte, off int64) error
	// Sync makes every completed WriteAt durable. After a failed Sync the
	// segment's content is unknown: do not retry, stop writing to it.
	Sync() error
	// WriteAtSync writes p at off and makes it durable, in one request
	// where the driver can (pwritev2 with RWF_DSYNC on Linux): p is
	// durable when it returns nil. Earlier WriteAts are not made durable
	// by it (RWF_DSYNC syncs the range it wrote): Sync them. After a failure
	// the segment's content from off on is unknown, as after a failed
	// Sync: do not retry, stop writing to it.
	WriteAtSync(p []byte, off int64) error
	// Close releases the segment. An unpublished segment is discarded.
	Close() error
}

// SegmentWrapper is implemented by wrappers (see AsLocker) that observe or
// alter segment requests: AsSegmenter hands the wrapped bucket's Segmenter
// to WrapSegmenter. A wrapper without it is bypassed for segment requests.
type SegmentWrapper interface {
	WrapSegmenter(Segmenter) Segmenter
}

// AsSegmenter returns the Segmenter of b, looking through wrappers as
// AsLocker does and letting each wrapper that implements SegmentWrapper wrap
// it. It reports false if no bucket in the chain has segments (memory and
// cloud buckets).
func AsSegmenter(b Bucket) (Segmenter, bool) {
	if s, ok := b.(Segmenter); ok {
		return s, true
	}
	u, ok := b.(interface{ Unwrap() Bucket })
	if !ok {
		return nil, false
	}
	s, ok := AsSegmenter(u.Unwrap())
	if !ok {
		return nil, false
	}
	if w, ok := b.(SegmentWrapper); ok {
		s = w.WrapSegmenter(s)
	}
	return s, true
}

// ModTimer is implemented by buckets that can tell when an object was last
// written (the cloud drivers: by the server's clock; the file driver: its
// modification time). The operator CLI uses it to show the age of a
// writer's last heartbeat; the engine never compares clocks.
type ModTimer interface {
	// ModTime returns when key was last written; ErrNotFound if it does
	// not exist.
	ModTime(ctx context.Context, key string) (time.Time, error)
}
