package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
