package format

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/s2"
)

// SnapshotMeta is the first frame of a snapshot.
type SnapshotMeta struct {
	Seq      uint64 // the state includes every batch up to and including Seq
	Writer   string
	Epoch    uint64
	UnixNano int64
}

// Entry is one key and its encoded value.
type Entry struct {
	Key   string
	Value []byte
}

// SnapshotEnd is the last frame of a snapshot.
type SnapshotEnd struct {
	End   bool // always true; distinguishes the end frame from an entry frame
	Count uint64
}

// chunkBytes is the target size of an entry frame.
const chunkBytes = 1 << 20

// frameBufs pools the snapshot writers' frame buffers (each grows to about
// chunkBytes); buffers grown past maxPooledBuf by large values are dropped.
var frameBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuf = 4 * chunkBytes

// SnapshotWriter streams a snapshot to w. Call Add for every entry in key
// order, then Finish.
type SnapshotWriter struct {
	w       io.Writer
	chunk   []Entry
	size    int
	count   uint64
	written int64
	err     error
	buf     []byte  // frame encoding buffer, reused
	pooled  *[]byte // buf's holder in frameBufs; nil once returned
	zbuf    []byte  // compressed frame buffer, reused
	decoded int64   // bytes of the header and frames before compression
}

// NewSnapshotWriter writes the header and meta frame. The snapshot is
// written in VersionCompressed: each frame's body compressed with S2.
func NewSnapshotWriter(w io.Writer, meta *SnapshotMeta) (*SnapshotWriter, error) {
	sw := &SnapshotWriter{w: w, pooled: frameBufs.Get().(*[]byte)}
	sw.buf = (*sw.pooled)[:0]
	var h [headerLen]byte
	putHeaderVersion(h[:], KindSnapshot, VersionCompressed)
	if err := sw.write(h[:]); err != nil {
		return nil, err
	}
	if err := sw.frame(appendSnapshotMeta(sw.buf[:0], meta)); err != nil {
		return nil, err
	}
	return sw, nil
}

func (sw *SnapshotWriter) write(p []byte) error {
	if sw.err != nil {
		return sw.err
	}
	n, err := sw.w.Write(p)
	sw.written += int64(n)
	sw.err = err
	return err
}

// frame writes body, compressed, as one frame; body may be sw.buf (kept
// for reuse).
func (sw *SnapshotWriter) frame(body []byte) error {
	sw.buf = body
	sw.decoded += frameHeaderLen + int64(len(body))
	if n := s2.MaxEncodedLen(len(body)); cap(sw.zbuf) < n {
		sw.zbuf = make([]byte, n)
	}
	z := s2.Encode(sw.zbuf[:cap(sw.zbuf)], body)
	var fh [frameHeaderLen]byte
	putFrameHeader(fh[:], z)
	if err := sw.write(fh[:]); err != nil {
		return err
	}
	return sw.write(z)
}

// Frame bodies, the bytes Marshal returns for each (see codec.go).

const (
	metaFields  = 4
	entryFields = 2
	endFields   = 2
)

func appendSnapshotMeta(b []byte, m *SnapshotMeta) []byte {
	b = AppendArrayLen(b, metaFields)
	b = AppendUint64(b, m.Seq)
	b = AppendString(b, m.Writer)
	b = AppendUint64(b, m.Epoch)
	return AppendInt64(b, m.UnixNano)
}

func readSnapshotMeta(r *Reader, m *SnapshotMeta) {
	r.Fields(metaFields)
	m.Seq = r.Uint64()
	m.Writer = r.String()
	m.Epoch = r.Uint64()
	m.UnixNano = r.Int64()
}

func appendEntries(b []byte, entries []Entry) []byte {
	if entries == nil {
		return AppendNil(b)
	}
	b = AppendArrayLen(b, len(entries))
	for i := range entries {
		b = AppendArrayLen(b, entryFields)
		b = AppendString(b, entries[i].Key)
		b = AppendBytes(b, entries[i].Value)
	}
	return b
}

func readEntries(r *Reader, entries *[]Entry) {
	*entries = ReadSlice[Entry](r)
	for i := range *entries {
		readEntry(r, &(*entries)[i])
	}
}

func readEntry(r *Reader, e *Entry) {
	r.Fields(entryFields)
	e.Key = r.String()
	e.Value = r.Bytes()
}

func appendSnapshotEnd(b []byte, e *SnapshotEnd) []byte {
	b = AppendArrayLen(b, endFields)
	b = AppendBool(b, e.End)
	return AppendUint64(b, e.Count)
}

func readSnapshotEnd(r *Reader, e *SnapshotEnd) {
	r.Fields(endFields)
	e.End = r.Bool()
	e.Count = r.Uint64()
}

// DecodedBytes returns the snapshot's size so far as it would be without
// compression: what reading it decodes.
func (sw *SnapshotWriter) DecodedBytes() int64 { return headerLen + sw.decoded }

// Add appends one entry. The value is referenced until the next flush.
func (sw *SnapshotWriter) Add(key string, value []byte) error {
	sw.chunk = append(sw.chunk, Entry{Key: key, Value: value})
	sw.size += len(key) + len(value) + 8
	sw.count++
	if sw.size >= chunkBytes {
		return sw.flush()
	}
	return sw.err
}

func (sw *SnapshotWriter) flush() error {
	if len(sw.chunk) == 0 {
		return sw.err
	}
	err := sw.frame(appendEntries(sw.buf[:0], sw.chunk))
	clear(sw.chunk)
	sw.chunk = sw.chunk[:0]
	sw.size = 0
	return err
}

// Finish writes the last entries and the end frame. It returns the number of
// bytes written in all.
func (sw *SnapshotWriter) Finish() (int64, error) {
	if err := sw.flush(); err != nil {
		return sw.written, err
	}
	err := sw.frame(appendSnapshotEnd(sw.buf[:0], &SnapshotEnd{End: true, Count: sw.count}))
	if sw.pooled != nil && cap(sw.buf) <= maxPooledBuf {
		*sw.pooled = sw.buf[:0]
		frameBufs.Put(sw.pooled)
	}
	sw.pooled, sw.buf = nil, nil
	return sw.written, err
}

// ReadSnapshot parses a snapshot from r, calling fn for each entry in order.
// Keys must be strictly increasing. Any malformation (including a missing
// end frame) is an error wrapping ErrCorrupt; errors from fn are returned
// as they are.
func ReadSnapshot(r io.Reader, fn func(key string, value []byte) error) (*SnapshotMeta, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var h [headerLen]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, readErr(err, "header")
	}
	if err := checkHeader(h[:], KindSnapshot); err != nil {
		return nil, err
	}
	readFrame := func(br *bufio.Reader) ([]byte, error) { return readFrameVersion(br, h[5]) }
	body, err := readFrame(br)
	if err != nil {
		return nil, err
	}
	var meta SnapshotMeta
	mr := NewReader(body)
	readSnapshotMeta(&mr, &meta)
	if err := Exact(&mr, body, &meta); err != nil {
		return nil, err
	}
	var count uint64
	last, first := "", true
	for {
		body, err := readFrame(br)
		if err != nil {
			return nil, err
		}
		// An end frame is a msgpack array of [true, count]; an entry frame is
		// an array of arrays. Peek at the first element to tell them apart.
		if isEndFrame(body) {
			var end SnapshotEnd
			er := NewReader(body)
			readSnapshotEnd(&er, &end)
			if err := Exact(&er, body, &end); err != nil {
				return nil, err
			}
			if !end.End || end.Count != count {
				return nil, corrupt("snapshot end frame counts %d entries, read %d", end.Count, count)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				return nil, corrupt("bytes after the snapshot end frame")
			}
			return &meta, nil
		}
		var entries []Entry
		er := NewReader(body)
		readEntries(&er, &entries)
		if err := Exact(&er, body, &entries); err != nil {
			return nil, err
		}
		for i := range entries {
			e := &entries[i]
			if !first && e.Key <= last {
				return nil, corrupt("snapshot keys out of order at %q", e.Key)
			}
			first, last = false, e.Key
			count++
			if err := fn(e.Key, e.Value); err != nil {
				return nil, err
			}
		}
	}
}

func isEndFrame(body []byte) bool {
	// fixarray of 2 followed by msgpack true (0xc3) or false (0xc2).
	return len(body) >= 2 && body[0] == 0x92 && (body[1] == 0xc3 || body[1] == 0xc2)
}

// readFrameVersion reads a frame of a snapshot of the given version and
// returns its body, decompressed if the version says so.
func readFrameVersion(br *bufio.Reader, version byte) ([]byte, error) {
	body, err := readFrame(br)
	if err != nil || version != VersionCompressed {
		return body, err
	}
	n, err := s2.DecodedLen(body)
	if err != nil {
		return nil, corrupt("compressed snapshot frame: %v", err)
	}
	if n > MaxFrame {
		return nil, corrupt("compressed snapshot frame of %d bytes exceeds %d", n, MaxFrame)
	}
	if body, err = s2.Decode(make([]byte, n), body); err != nil {
		return nil, corrupt("compressed snapshot frame: %v", err)
	}
	return body, nil
}

func readFrame(br *bufio.Reader) ([]byte, error) {
	var fh [frameHeaderLen]byte
	if _, err := io.ReadFull(br, fh[:]); err != nil {
		return nil, readErr(err, "frame header")
	}
	n := binary.BigEndian.Uint32(fh[0:4])
	sum := binary.BigEndian.Uint32(fh[4:8])
	if n > MaxFrame {
		return nil, corrupt("frame length %d exceeds %d", n, MaxFrame)
	}
	// Read in bounded steps so a bogus length on a short object fails
	// without allocating the claimed size up front.
	body := make([]byte, 0, min(int(n), 1<<20))
	for uint32(len(body)) < n {
		step := min(int(n)-len(body), 1<<20)
		start := len(body)
		body = append(body, make([]byte, step)...)
		if _, err := io.ReadFull(br, body[start:]); err != nil {
			return nil, readErr(err, "frame body")
		}
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, corrupt("frame checksum mismatch")
	}
	return body, nil
}

func readErr(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("truncated in %s", what)
	}
	return fmt.Errorf("reading snapshot %s: %w", what, err)
}
