package objstore

import (
	"context"
	"io"
	"sync/atomic"
)

// Counting wraps a Bucket and counts the requests made through it, for
// cost accounting and for tests that assert how many requests an operation
// takes. It is safe for concurrent use.
//
// Counting does not implement Locker; AsLocker finds the inner bucket's
// lock through Unwrap. It counts segment requests (see Segmenter, found
// with AsSegmenter) as writes: staging a segment is a put of its size,
// reusing one a put of nothing, publishing one a put, and each
// Segment.Sync is a put of the bytes written since the previous one;
// SyncPrefix is a list. Opening a segment to read it is not counted; each
// SegmentReader.ReadAt is a get of the bytes read.
type Counting struct {
	inner Bucket

	puts, gets, lists, deletes, heads atomic.Int64
	bytesWritten, bytesRead           atomic.Int64
}

// Counts is a snapshot of a Counting bucket's counters. Requests are
// counted when made, whether or not they succeed.
type Counts struct {
	// Puts counts Put calls and Writer.Close calls (an aborted Writer makes
	// no request), and segment writes (see Counting). A large streamed object may really take several
	// requests (a multipart upload); it counts as one.
	Puts int64
	// Gets counts Get and NewReader calls.
	Gets int64
	// Lists counts listing requests: a List call counts one per started
	// page of 1000 keys (the S3 and GCS page size), and at least one.
	Lists int64
	// Deletes counts Delete calls.
	Deletes int64
	// Heads is reserved for metadata requests; Bucket has none yet, so it
	// is always zero.
	Heads int64
	// BytesWritten counts bytes passed to Put and Writer.Write.
	BytesWritten int64
	// BytesRead counts bytes returned by Get and read from NewReader's
	// readers.
	BytesRead int64
}

// Sub returns c minus prev, field by field: the requests made between two
// snapshots.
func (c Counts) Sub(prev Counts) Counts {
	return Counts{
		Puts:         c.Puts - prev.Puts,
		Gets:         c.Gets - prev.Gets,
		Lists:        c.Lists - prev.Lists,
		Deletes:      c.Deletes - prev.Deletes,
		Heads:        c.Heads - prev.Heads,
		BytesWritten: c.BytesWritten - prev.BytesWritten,
		BytesRead:    c.BytesRead - prev.BytesRead,
	}
}

// Requests returns the total number of requests counted.
func (c Counts) Requests() int64 {
	return c.Puts + c.Gets + c.Lists + c.Deletes + c.Heads
}

// NewCounting returns a Counting bucket wrapping b, with all counters at
// zero.
func NewCounting(b Bucket) *Counting {
	return &Counting{inner: b}
}

// Counts returns a snapshot of the counters. Each counter is read
// atomically, but the snapshot is not atomic across counters while
// requests are in flight.
func (c *Counting) Counts() Counts {
	return Counts{
		Puts:         c.puts.Load(),
		Gets:         c.gets.Load(),
		Lists:        c.lists.Load(),
		Deletes:      c.deletes.Load(),
		Heads:        c.heads.Load(),
		BytesWritten: c.bytesWritten.Load(),
		BytesRead:    c.bytesRead.Load(),
	}
}

// Unwrap returns the wrapped bucket.
func (c *Counting) Unwrap() Bucket { return c.inner }

// Get implements Bucket.
func (c *Counting) Get(ctx context.Context, key string) ([]byte, error) {
	c.gets.Add(1)
	data, err := c.inner.Get(ctx, key)
	c.bytesRead.Add(int64(len(data)))
	return data, err
}

// NewReader implements Bucket.
func (c *Counting) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	r, err := c.inner.NewReader(ctx, key)
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: r, n: &c.bytesRead}, nil
}

// Put implements Bucket.
func (c *Counting) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	c.puts.Add(1)
	c.bytesWritten.Add(int64(len(data)))
	return c.inner.Put(ctx, key, data, ifNotExist)
}

// NewWriter implements Bucket.
func (c *Counting) NewWriter(ctx context.Context, key string, ifNotExist bool) (Writer, error) {
	w, err := c.inner.NewWriter(ctx, key, ifNotExist)
	if err != nil {
		return nil, err
	}
	return &countingWriter{Writer: w, c: c}, nil
}

// Delete implements Bucket.
func (c *Counting) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	return c.inner.Delete(ctx, key)
}

// List implements Bucket.
func (c *Counting) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	objs, err := c.inner.List(ctx, prefix)
	c.lists.Add(max(1, (int64(len(objs))+listPageSize-1)/listPageSize))
	return objs, err
}

// Close implements Bucket; it closes the wrapped bucket.
func (c *Counting) Close() error { return c.inner.Close() }

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

type countingWriter struct {
	Writer
	c      *Counting
	closed bool
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.Writer.Write(p)
	w.c.bytesWritten.Add(int64(n))
	return n, err
}

func (w *countingWriter) Close() error {
	if !w.closed {
		w.closed = true
		w.c.puts.Add(1)
	}
	return w.Writer.Close()
}

func (w *countingWriter) Abort() error {
	w.closed = true
	return w.Writer.Abort()
}

// WrapSegmenter implements SegmentWrapper: it counts segment requests.
func (c *Counting) WrapSegmenter(s Segmenter) Segmenter { return &countingSegmenter{s, c} }

type countingSegmenter struct {
	inner Segmenter
	c     *Counting
}

func (s *countingSegmenter) NewSegment(ctx context.Context, size int64) (Segment, error) {
	s.c.puts.Add(1)
	s.c.bytesWritten.Add(size)
	seg, err := s.inner.NewSegment(ctx, size)
	if err != nil {
		return nil, err
	}
	return &countingSegment{Segment: seg, c: s.c}, nil
}

func (s *countingSegmenter) ReuseSegment(ctx context.Context, key string) (Segment, error) {
	s.c.puts.Add(1)
	seg, err := s.inner.ReuseSegment(ctx, key)
	if err != nil {
		return nil, err
	}
	return &countingSegment{Segment: seg, c: s.c}, nil
}

func (s *countingSegmenter) SyncPrefix(ctx context.Context, prefix string) error {
	s.c.lists.Add(1)
	return s.inner.SyncPrefix(ctx, prefix)
}

// OpenSegment counts each read of the segment as a get of the bytes read.
func (s *countingSegmenter) OpenSegment(ctx context.Context, key string) (SegmentReader, error) {
	r, err := s.inner.OpenSegment(ctx, key)
	if err != nil {
		return nil, err
	}
	return &countingSegReader{SegmentReader: r, c: s.c}, nil
}

type countingSegReader struct {
	SegmentReader
	c *Counting
}

func (r *countingSegReader) ReadAt(p []byte, off int64) (int, error) {
	r.c.gets.Add(1)
	n, err := r.SegmentReader.ReadAt(p, off)
	r.c.bytesRead.Add(int64(n))
	return n, err
}

type countingSegment struct {
	Segment
	c *Counting
}

func (s *countingSegment) Publish(ctx context.Context, key string) error {
	s.c.puts.Add(1)
	return s.Segment.Publish(ctx, key)
}

func (s *countingSegment) WriteAt(p []byte, off int64) error {
	s.c.bytesWritten.Add(int64(len(p)))
	return s.Segment.WriteAt(p, off)
}

func (s *countingSegment) Sync() error {
	s.c.puts.Add(1)
	return s.Segment.Sync()
}

// WriteAtSync counts as a WriteAt and a Sync: one put of p's bytes.
func (s *countingSegment) WriteAtSync(p []byte, off int64) error {
	s.c.bytesWritten.Add(int64(len(p)))
	s.c.puts.Add(1)
	return s.Segment.WriteAtSync(p, off)
}
