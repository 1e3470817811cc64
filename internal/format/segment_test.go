package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"testing"
)

// segment builds a segment of size bytes: a header with nonce, then one
// record per object for the segment first.
func segment(size int, first, nonce uint64, objs ...[]byte) []byte {
	b := AppendSegmentHeader(nil, nonce)
	b = append(b, make([]byte, SegmentAlign-len(b))...)
	for _, o := range objs {
		b = AppendSegmentRecord(b, first, nonce, o)
	}
	return append(b, make([]byte, size-len(b))...)
}

// appendV1Record appends a record as version 1 segments hold them (no
// header block, no nonce).
func appendV1Record(dst []byte, first uint64, obj []byte) []byte {
	start := len(dst)
	var h [segmentV1HeaderLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(obj)))
	binary.BigEndian.PutUint64(h[8:16], first)
	binary.BigEndian.PutUint32(h[4:8], crc32.Update(crc32.Checksum(h[8:16], castagnoli), castagnoli, obj))
	dst = append(append(dst, h[:]...), obj...)
	return append(dst, make([]byte, recordLen(segmentV1HeaderLen, len(obj))-(len(dst)-start))...)
}

func objs(n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, bytes.Repeat([]byte{byte('a' + i)}, 10+i*SegmentAlign/2))
	}
	return out
}

func checkScan(t *testing.T, data []byte, first uint64, want [][]byte) {
	t.Helper()
	for _, strict := range []bool{false, true} {
		got, err := ScanSegment(data, first, strict)
		if err != nil {
			t.Fatalf("ScanSegment(strict %v): %v", strict, err)
		}
		if len(got) != len(want) {
			t.Fatalf("ScanSegment(strict %v) read %d records, want %d", strict, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("record %d differs", i)
			}
		}
	}
}

func TestScanSegment(t *testing.T) {
	const first, nonce = 42, 0xfeedface
	recs := objs(4)
	data := segment(64<<10, first, nonce, recs...)
	checkScan(t, data, first, recs)
	// Another segment's first sequence: nothing.
	checkScan(t, data, first+1, nil)
	// Only zeros after the header: an empty log.
	checkScan(t, segment(16<<10, first, nonce), first, nil)
}

// TestScanSegmentEarlierUse: a reused file holds records of its earlier
// use after the new log's end, and user bytes (payloads) that may look
// like records. Neither extends the log nor, read strictly, makes it
// corrupt, even a record forged with the new use's first sequence: it
// lacks the new use's nonce.
func TestScanSegmentEarlierUse(t *testing.T) {
	const first = 100
	old := segment(64<<10, 7, 1, objs(6)...)
	// The earlier use also holds a record forged for sequence 100 (its
	// bytes came from a job payload), with a nonce of the forger's choice.
	// One sits where the new log ends, one further on.
	forged := AppendSegmentRecord(nil, first, 999, []byte("forged batch"))
	copy(old[3*SegmentAlign:], forged)
	copy(old[5*SegmentAlign:], forged)
	// A version 1 record forged for sequence 100, too.
	copy(old[6*SegmentAlign:], appendV1Record(nil, first, []byte("forged v1 batch")))
	// The new use: a fresh header and two records.
	fresh := segment(3*SegmentAlign, first, 2, []byte("one"), []byte("two"))
	data := append(fresh, old[len(fresh):]...)
	checkScan(t, data, first, [][]byte{[]byte("one"), []byte("two")})
}

func TestScanSegmentDamage(t *testing.T) {
	const first, nonce = 5, 77
	recs := objs(3)
	data := segment(32<<10, first, nonce, recs...)
	// Damage to record 1, with record 2 valid after it: corruption to the
	// writer, the prefix to a reader.
	bad := bytes.Clone(data)
	bad[SegmentAlign+SegmentRecordLen(len(recs[0]))+SegmentRecordHeaderLen+3] ^= 1
	if _, err := ScanSegment(bad, first, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("strict scan of a damaged record before a valid one: %v, want ErrCorrupt", err)
	}
	got, err := ScanSegment(bad, first, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("reader's scan = %d records, %v; want the 1 before the damage", len(got), err)
	}
	// A torn last record ends the log.
	torn := bytes.Clone(data)
	last := SegmentAlign + SegmentRecordLen(len(recs[0])) + SegmentRecordLen(len(recs[1]))
	clear(torn[last+SegmentRecordHeaderLen+5 : last+SegmentRecordLen(len(recs[2]))])
	checkScan(t, torn, first, recs[:2])
	// A damaged header is corruption, not a version 1 segment.
	hdr := bytes.Clone(data)
	hdr[9] ^= 1
	for _, strict := range []bool{false, true} {
		if _, err := ScanSegment(hdr, first, strict); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("scan of a damaged header (strict %v): %v, want ErrCorrupt", strict, err)
		}
	}
}

// TestScanSegmentVersion1: segments written before the header and nonce
// are still read.
func TestScanSegmentVersion1(t *testing.T) {
	const first = 9
	recs := objs(3)
	var data []byte
	for _, o := range recs {
		data = appendV1Record(data, first, o)
	}
	data = append(data, make([]byte, 8*SegmentAlign)...)
	checkScan(t, data, first, recs)
	// Reused by a version 2 writer: the header replaces record 0, and the
	// old records, version 1 and without the nonce, are not read.
	reused := segment(2*SegmentAlign, first+10, 3, []byte("new"))
	reused = append(reused, data[len(reused):]...)
	checkScan(t, reused, first+10, [][]byte{[]byte("new")})
}

// countingReader counts the bytes read through it; fail makes reads fail.
type countingReader struct {
	r    io.ReaderAt
	read int
	fail bool
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	if c.fail {
		return 0, errors.New("read failed")
	}
	n, err := c.r.ReadAt(p, off)
	c.read += n
	return n, err
}

// A cursor reads in pieces what ScanSegment reads whole, whatever the
// piece size, including pieces that cut records.
func TestSegmentCursorReadsInPieces(t *testing.T) {
	want := objs(5) // records of one to three blocks
	seg := segment(64*SegmentAlign, 9, 77, want...)
	for _, chunk := range []int{1, 100, SegmentAlign, SegmentAlign + 1, 3 * SegmentAlign, 1 << 20} {
		c, ok, err := NewSegmentCursor(seg, 9)
		if !ok || err != nil {
			t.Fatalf("NewSegmentCursor: %v %v", ok, err)
		}
		got, err := c.ReadFrom(bytes.NewReader(seg), int64(len(seg)), chunk)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("chunk %d: read %d records, want %d", chunk, len(got), len(want))
		}
		end := int64(SegmentAlign)
		for _, o := range want {
			end += int64(SegmentRecordLen(len(o)))
		}
		if c.N != uint64(len(want)) || c.Off != end {
			t.Fatalf("chunk %d: cursor at record %d, offset %d; want %d, %d", chunk, c.N, c.Off, len(want), end)
		}
	}
}

// A cursor following a segment as records are written reads each time the
// new records and a piece past them, not the whole segment again.
func TestSegmentCursorFollowsAWriter(t *testing.T) {
	const size, chunk = 256 * SegmentAlign, 4 * SegmentAlign
	seg := segment(size, 5, 1)
	c, _, _ := NewSegmentCursor(seg, 5)
	var written [][]byte
	for round := range 5 {
		for range round { // append round records in place
			o := bytes.Repeat([]byte{byte(len(written))}, 100)
			rec := AppendSegmentRecord(nil, 5, 1, o)
			off := SegmentAlign * (1 + len(written))
			copy(seg[off:], rec)
			written = append(written, o)
		}
		before := c.N
		r := &countingReader{r: bytes.NewReader(seg)}
		got, err := c.ReadFrom(r, size, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != round || c.N != before+uint64(round) {
			t.Fatalf("round %d: read %d new records (cursor at %d), want %d", round, len(got), c.N, round)
		}
		for i, o := range got {
			if !bytes.Equal(o, written[before+uint64(i)]) {
				t.Fatalf("round %d: record %d differs", round, i)
			}
		}
		// Pieces double from chunk: the last one overshoots the log's end.
		if limit := 2*round*SegmentAlign + 2*chunk; r.read > limit {
			t.Fatalf("round %d: read %d bytes for %d new one-block records, want <= %d", round, r.read, round, limit)
		}
	}
}

// A read error leaves the cursor where it was; so does a segment of
// another use, whose cursor is not the same use.
func TestSegmentCursorErrorsAndReuse(t *testing.T) {
	seg := segment(8*SegmentAlign, 5, 1, []byte("a"), []byte("b"))
	c, _, _ := NewSegmentCursor(seg, 5)
	if _, err := c.ReadFrom(&countingReader{fail: true}, int64(len(seg)), SegmentAlign); err == nil {
		t.Fatal("a failed read reported no error")
	}
	if c.N != 0 || c.Off != SegmentAlign {
		t.Fatalf("a failed read moved the cursor to record %d, offset %d", c.N, c.Off)
	}
	// The file reused by segment 9: its old records are not the log's.
	again := segment(8*SegmentAlign, 9, 2)
	copy(again[SegmentAlign:], seg[SegmentAlign:])
	d, _, _ := NewSegmentCursor(again, 9)
	if d.SameUse(c) {
		t.Fatal("cursors of two uses of a file are the same use")
	}
	if got, err := d.ReadFrom(bytes.NewReader(again), int64(len(again)), SegmentAlign); err != nil || len(got) != 0 {
		t.Fatalf("reused file: %d records, %v; want none", len(got), err)
	}
	if same, _, _ := NewSegmentCursor(seg, 5); !same.SameUse(c) {
		t.Fatal("two cursors on one use are not the same use")
	}
	if _, ok, err := NewSegmentCursor(appendV1Record(nil, 5, []byte("v1")), 5); ok || err != nil {
		t.Fatalf("version 1 segment: cursor %v, %v; want none, no error", ok, err)
	}
	bad := bytes.Clone(seg)
	bad[10] ^= 1
	if _, _, err := NewSegmentCursor(bad, 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged header: %v, want ErrCorrupt", err)
	}
}

// FuzzSegmentCursor: a cursor reading a segment in pieces of any size
// reads what ScanSegment reads (as a reader, not strict), and terminates.
func FuzzSegmentCursor(f *testing.F) {
	f.Add(segment(8*SegmentAlign, 3, 4, []byte("x"), bytes.Repeat([]byte("y"), 5000)), uint64(3), uint16(100))
	f.Add(segment(3*SegmentAlign, 3, 4, bytes.Repeat([]byte("y"), 5000))[:SegmentAlign+30], uint64(3), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, first uint64, chunk uint16) {
		c, ok, err := NewSegmentCursor(data, first)
		if !ok || err != nil {
			return
		}
		got, err := c.ReadFrom(bytes.NewReader(data), int64(len(data)), int(chunk))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ScanSegment(data, first, false)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("cursor read %d records, ScanSegment %d", len(got), len(want))
		}
		if c.N != uint64(len(want)) {
			t.Fatalf("cursor counted %d records, read %d", c.N, len(want))
		}
	})
}

// FuzzScanSegment: ScanSegment never panics; objects lie inside the
// input; a strict scan that succeeds agrees with a reader's.
func FuzzScanSegment(f *testing.F) {
	f.Add(segment(4*SegmentAlign, 3, 4, []byte("x"), []byte("yz")), uint64(3))
	f.Add(appendV1Record(nil, 3, []byte("v1")), uint64(3))
	f.Add([]byte(SegmentMagic), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, first uint64) {
		loose, err := ScanSegment(data, first, false)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
		strict, serr := ScanSegment(data, first, true)
		if serr == nil && fmt.Sprint(strict) != fmt.Sprint(loose) {
			t.Fatalf("strict scan read %d records, reader %d", len(strict), len(loose))
		}
		total := 0
		for _, o := range loose {
			total += len(o)
		}
		if total > len(data) {
			t.Fatalf("%d bytes of objects from %d of input", total, len(data))
		}
	})
}
