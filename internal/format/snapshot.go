package format

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
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

// SnapshotWriter streams a snapshot to w. Call Add for every entry in key
// order, then Finish.
type SnapshotWriter struct {
	w       io.Writer
	chunk   []Entry
	size    int
	count   uint64
	written int64
	err     error
}

// NewSnapshotWriter writes the header and meta frame.
func NewSnapshotWriter(w io.Writer, meta *SnapshotMeta) (*SnapshotWriter, error) {
	sw := &SnapshotWriter{w: w}
	var h [headerLen]byte
	putHeader(h[:], KindSnapshot)
	if err := sw.write(h[:]); err != nil {
		return nil, err
	}
	if err := sw.frame(meta); err != nil {
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

func (sw *SnapshotWriter) frame(v any) error {
	body, err := Marshal(v)
	if err != nil {
		return err
	}
	var fh [frameHeaderLen]byte
	putFrameHeader(fh[:], body)
	if err := sw.write(fh[:]); err != nil {
		return err
	}
	return sw.write(body)
}

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
	err := sw.frame(sw.chunk)
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
	err := sw.frame(&SnapshotEnd{End: true, Count: sw.count})
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
	body, err := readFrame(br)
	if err != nil {
		return nil, err
	}
	var meta SnapshotMeta
	if err := unmarshalExact(body, &meta); err != nil {
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
			if err := unmarshalExact(body, &end); err != nil {
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
		if err := unmarshalExact(body, &entries); err != nil {
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
