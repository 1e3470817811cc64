package format

import (
	"encoding/binary"
	"hash/crc32"
)

// Segment records. A WAL segment (wal/<first seq:020d>.log, written only to
// stores with preallocated segments: file://) is a file of zeros into which
// the writer writes WAL batches one after another, in place. Its first
// SegmentAlign bytes are the segment header, written and synced before the
// segment is published (SegmentHeaderLen bytes, then zeros):
//
//	0..8     "stepwseg" (SegmentMagic)
//	8..16    the nonce: random, drawn each time the file is staged (new or
//	         reused), the same in every record of this use of the file
//	16..20   CRC-32C of bytes 0..16
//
// Each batch is then a record starting at a multiple of SegmentAlign, the
// first at SegmentAlign:
//
//	0..4     n: length of the WAL object bytes (uint32, big endian)
//	4..8     CRC-32C of bytes 8..24 followed by the WAL object bytes
//	8..16    the segment's first sequence (uint64, big endian)
//	16..24   the segment's nonce, as in its header
//	24..24+n a WAL object, byte for byte as EncodeBatch returns it
//	         zero padding up to the next multiple of SegmentAlign
//
// Records hold consecutive sequences from the segment's first. The log in
// a segment ends at the first position that does not hold a valid record
// with the header's nonce: zeros (never written), a torn write (a crash
// during the write), or a record of an earlier use of the file (another
// first sequence and nonce). Records never share a SegmentAlign block, so a
// torn write cannot damage the record before it. The nonce also makes
// bytes of an earlier use that happen to look like a record of this one (a
// job payload is user data) fail their checksum, with odds of 2^-32 for
// each position checked: they can neither extend the log nor make the
// writer refuse it as damaged.
//
// Segments without the header were written before it (version 1): records
// from offset 0, each with the 16-byte header above less the nonce (the
// CRC over bytes 8..16 and the object). They are still read. DO NOT
// CHANGE: written to buckets.
const (
	// SegmentAlign is the alignment of segment records: a file system block.
	SegmentAlign = 4096
	// SegmentRecordHeaderLen is the size of a segment record's header.
	SegmentRecordHeaderLen = 24
	// SegmentHeaderLen is the meaningful part of a segment header; the
	// rest of its SegmentAlign bytes are zeros.
	SegmentHeaderLen = 20
	// SegmentMagic starts a segment header.
	SegmentMagic = "stepwseg"

	segmentV1HeaderLen = 16
)

// SegmentRecordLen is the space a record holding a WAL object of n bytes
// takes in a segment, padding included.
func SegmentRecordLen(n int) int { return recordLen(SegmentRecordHeaderLen, n) }

func recordLen(header, n int) int {
	return (header + n + SegmentAlign - 1) / SegmentAlign * SegmentAlign
}

// AppendSegmentHeader appends the SegmentHeaderLen bytes of a segment
// header with nonce.
func AppendSegmentHeader(dst []byte, nonce uint64) []byte {
	start := len(dst)
	dst = append(dst, SegmentMagic...)
	dst = binary.BigEndian.AppendUint64(dst, nonce)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// segmentNonce returns the nonce of a segment's header, or false if data
// does not start with one (a version 1 segment, whose first bytes are a
// record's length). A header that starts with the magic but fails its
// checksum is damage: ErrCorrupt.
func segmentNonce(data []byte) (uint64, bool, error) {
	if len(data) < len(SegmentMagic) || string(data[:len(SegmentMagic)]) != SegmentMagic {
		return 0, false, nil
	}
	if len(data) < SegmentHeaderLen || crc32.Checksum(data[:16], castagnoli) != binary.BigEndian.Uint32(data[16:20]) {
		return 0, false, corrupt("segment header is damaged")
	}
	return binary.BigEndian.Uint64(data[8:16]), true, nil
}

// AppendSegmentRecord appends to dst a segment record holding the WAL object
// obj for the segment whose first sequence is first and whose header holds
// nonce, padded with zeros to SegmentRecordLen(len(obj)) bytes.
func AppendSegmentRecord(dst []byte, first, nonce uint64, obj []byte) []byte {
	start := len(dst)
	var h [SegmentRecordHeaderLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(obj)))
	binary.BigEndian.PutUint64(h[8:16], first)
	binary.BigEndian.PutUint64(h[16:24], nonce)
	sum := crc32.Update(crc32.Checksum(h[8:24], castagnoli), castagnoli, obj)
	binary.BigEndian.PutUint32(h[4:8], sum)
	dst = append(dst, h[:]...)
	dst = append(dst, obj...)
	for pad := start + SegmentRecordLen(len(obj)) - len(dst); pad > 0; pad-- {
		dst = append(dst, 0)
	}
	return dst
}

// segLayout is how a segment's records are checked: their header length
// (with or without a nonce) and the nonce.
type segLayout struct {
	header int
	nonce  uint64
}

// recordAt returns the WAL object of a valid record at off in data for the
// segment first, and the record's length with padding; false if there is
// none.
func (l segLayout) recordAt(data []byte, off int, first uint64) ([]byte, int, bool) {
	if off < 0 || len(data)-off < l.header {
		return nil, 0, false
	}
	h := data[off:]
	n := uint64(binary.BigEndian.Uint32(h[0:4]))
	if n == 0 || uint64(l.header)+n > uint64(len(h)) || binary.BigEndian.Uint64(h[8:16]) != first {
		return nil, 0, false
	}
	if l.header == SegmentRecordHeaderLen && binary.BigEndian.Uint64(h[16:24]) != l.nonce {
		return nil, 0, false
	}
	obj := h[l.header : l.header+int(n)]
	if crc32.Update(crc32.Checksum(h[8:l.header], castagnoli), castagnoli, obj) != binary.BigEndian.Uint32(h[4:8]) {
		return nil, 0, false
	}
	return obj, recordLen(l.header, int(n)), true
}

// ScanSegment returns the WAL objects of the segment data whose first
// sequence is first, in order, up to the end of its log (see the layout
// above). The objects alias data.
//
// With strict set, which the store's writer uses when no other writer can
// be appending, a valid record after the end is corruption (ErrCorrupt):
// the end was then not a write cut short by a crash (after which nothing
// was written) but damage to a record that was acknowledged. A reader that
// may race the writer passes false: it can see a record still being
// written, and records after it.
func ScanSegment(data []byte, first uint64, strict bool) ([][]byte, error) {
	l, off := segLayout{header: segmentV1HeaderLen}, 0
	nonce, ok, err := segmentNonce(data)
	if err != nil {
		return nil, err
	}
	if ok {
		l, off = segLayout{header: SegmentRecordHeaderLen, nonce: nonce}, SegmentAlign
	}
	var objs [][]byte
	for {
		obj, n, ok := l.recordAt(data, off, first)
		if !ok {
			break
		}
		objs = append(objs, obj)
		off += n
	}
	if strict {
		for at := off + SegmentAlign; at < len(data); at += SegmentAlign {
			if _, _, ok := l.recordAt(data, at, first); ok {
				return nil, corrupt("segment record %d at offset %d is unreadable, but a later one at offset %d is valid", len(objs), off, at)
			}
		}
	}
	return objs, nil
}
