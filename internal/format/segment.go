package format

import (
	"encoding/binary"
	"hash/crc32"
)

// Segment records. A WAL segment (wal/<first seq:020d>.log, written only to
// stores with preallocated segments: file://) is a file of zeros into which
// the writer writes WAL batches one after another, in place, each as a
// record starting at a multiple of SegmentAlign:
//
//	0..4     n: length of the WAL object bytes (uint32, big endian)
//	4..8     CRC-32C of bytes 8..16 followed by the WAL object bytes
//	8..16    the segment's first sequence (uint64, big endian)
//	16..16+n a WAL object, byte for byte as EncodeBatch returns it
//	         zero padding up to the next multiple of SegmentAlign
//
// Records hold consecutive sequences from the segment's first. The log in
// a segment ends at the first position that does not hold a valid record:
// zeros (never written), a torn write (a crash during the write), or a
// record of an earlier use of the file (another first sequence). Records
// never share a SegmentAlign block, so a torn write cannot damage the
// record before it. DO NOT CHANGE: written to buckets.
const (
	// SegmentAlign is the alignment of segment records: a file system block.
	SegmentAlign = 4096
	// SegmentRecordHeaderLen is the size of a segment record's header.
	SegmentRecordHeaderLen = 16
)

// SegmentRecordLen is the space a record holding a WAL object of n bytes
// takes in a segment, padding included.
func SegmentRecordLen(n int) int {
	return (SegmentRecordHeaderLen + n + SegmentAlign - 1) / SegmentAlign * SegmentAlign
}

// AppendSegmentRecord appends to dst a segment record holding the WAL object
// obj for the segment whose first sequence is first, padded with zeros to
// SegmentRecordLen(len(obj)) bytes.
func AppendSegmentRecord(dst []byte, first uint64, obj []byte) []byte {
	start := len(dst)
	var h [SegmentRecordHeaderLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(obj)))
	binary.BigEndian.PutUint64(h[8:16], first)
	sum := crc32.Update(crc32.Checksum(h[8:16], castagnoli), castagnoli, obj)
	binary.BigEndian.PutUint32(h[4:8], sum)
	dst = append(dst, h[:]...)
	dst = append(dst, obj...)
	for pad := start + SegmentRecordLen(len(obj)) - len(dst); pad > 0; pad-- {
		dst = append(dst, 0)
	}
	return dst
}

// segmentRecordAt returns the WAL object of a valid record of the segment
// first at off in data, or false.
func segmentRecordAt(data []byte, off int, first uint64) ([]byte, bool) {
	if off < 0 || len(data)-off < SegmentRecordHeaderLen {
		return nil, false
	}
	h := data[off : off+SegmentRecordHeaderLen]
	n := binary.BigEndian.Uint32(h[0:4])
	if n == 0 || uint64(n) > uint64(len(data)-off-SegmentRecordHeaderLen) || binary.BigEndian.Uint64(h[8:16]) != first {
		return nil, false
	}
	obj := data[off+SegmentRecordHeaderLen : off+SegmentRecordHeaderLen+int(n)]
	if crc32.Update(crc32.Checksum(h[8:16], castagnoli), castagnoli, obj) != binary.BigEndian.Uint32(h[4:8]) {
		return nil, false
	}
	return obj, true
}

// ScanSegment returns the WAL objects of the segment data whose first
// sequence is first, in order, up to the end of its log (see the record
// layout above). The objects alias data.
//
// With strict set, which the store's writer uses when no other writer can
// be appending, a valid record after the end is corruption (ErrCorrupt):
// the end was then not a write cut short by a crash (after which nothing
// was written) but damage to a record that was acknowledged. A reader that
// may race the writer passes false: it can see a record still being
// written, and records after it.
func ScanSegment(data []byte, first uint64, strict bool) ([][]byte, error) {
	var objs [][]byte
	off := 0
	for {
		obj, ok := segmentRecordAt(data, off, first)
		if !ok {
			break
		}
		objs = append(objs, obj)
		off += SegmentRecordLen(len(obj))
	}
	if strict {
		for at := off + SegmentAlign; at < len(data); at += SegmentAlign {
			if _, ok := segmentRecordAt(data, at, first); ok {
				return nil, corrupt("segment record %d at offset %d is unreadable, but a later one at offset %d is valid", len(objs), off, at)
			}
		}
	}
	return objs, nil
}
