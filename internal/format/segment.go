package format

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
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

// records returns the WAL objects of the valid records in data from off on,
// up to the first position that holds none, and that position.
func (l segLayout) records(data []byte, off int, first uint64) ([][]byte, int) {
	var objs [][]byte
	for {
		obj, n, ok := l.recordAt(data, off, first)
		if !ok {
			return objs, off
		}
		objs = append(objs, obj)
		off += n
	}
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
	objs, off := l.records(data, off, first)
	if strict {
		for at := off + SegmentAlign; at < len(data); at += SegmentAlign {
			if _, _, ok := l.recordAt(data, at, first); ok {
				return nil, corrupt("segment record %d at offset %d is unreadable, but a later one at offset %d is valid", len(objs), off, at)
			}
		}
	}
	return objs, nil
}

// SegmentCursor reads a segment's log a piece at a time, for a reader that
// follows a segment being written: it reads the records written since it
// last looked, instead of the whole segment (up to its zero tail). Start
// one with NewSegmentCursor, then hand Scan the segment's bytes from Off
// on, as many as it asks for. Only segments with a header (see above) are
// followed: a version 1 segment has no nonce to tell a reused file by.
type SegmentCursor struct {
	first uint64
	l     segLayout
	// Off is the offset of the next record.
	Off int64
	// N counts the records scanned so far.
	N uint64
}

// NewSegmentCursor returns a cursor at the first record of the segment
// whose first sequence is first, given its first SegmentHeaderLen bytes
// (or more). It reports false for a version 1 segment, and ErrCorrupt for
// a damaged header.
func NewSegmentCursor(head []byte, first uint64) (SegmentCursor, bool, error) {
	nonce, ok, err := segmentNonce(head)
	if !ok || err != nil {
		return SegmentCursor{}, false, err
	}
	l := segLayout{header: SegmentRecordHeaderLen, nonce: nonce}
	return SegmentCursor{first: first, l: l, Off: SegmentAlign}, true, nil
}

// Next returns the sequence of the record at c.Off: the segment's first
// plus the records scanned.
func (c SegmentCursor) Next() uint64 { return c.first + c.N }

// SameUse reports whether c and d were started on the same use of a
// segment file: the same first sequence and nonce.
func (c SegmentCursor) SameUse(d SegmentCursor) bool {
	return c.first == d.first && c.l == d.l
}

// Scan returns the WAL objects of the valid records at the start of data,
// which holds the segment's bytes from c.Off on, and advances c past them.
// The objects alias data. need is zero if the log ends in data (at a
// position that holds no valid record); otherwise the last record may go
// on past data, and need is how many bytes from the new c.Off to read to
// tell: the caller reads them, if the segment has them, and scans again.
func (c *SegmentCursor) Scan(data []byte) (objs [][]byte, need int) {
	objs, off := c.l.records(data, 0, c.first)
	c.Off += int64(off)
	c.N += uint64(len(objs))
	if off >= len(data) { // the last record's padding may lie past data
		return objs, SegmentAlign
	}
	rest := data[off:]
	if len(rest) < c.l.header {
		return objs, SegmentAlign
	}
	// A record of this use whose object goes on past data: its header
	// names this segment and nonce (its checksum is over the whole object).
	n := int64(binary.BigEndian.Uint32(rest[0:4]))
	if n > 0 && int64(c.l.header)+n > int64(len(rest)) &&
		binary.BigEndian.Uint64(rest[8:16]) == c.first && binary.BigEndian.Uint64(rest[16:24]) == c.l.nonce {
		return objs, recordLen(c.l.header, int(n))
	}
	return objs, 0
}

// maxReadChunk bounds the growth of the pieces ReadFrom reads a segment
// in; a piece holding one larger record is as large as the record.
const maxReadChunk = 8 << 20

// ReadFrom reads the records of a segment of size bytes from r, from c.Off
// on, a piece at a time: chunk bytes first, doubling up to 8 MiB, so that
// the zeros after the log's end cost one piece at most. On success it
// returns their WAL objects and advances c past them; on a read error it
// returns the error and leaves c as it was.
func (c *SegmentCursor) ReadFrom(r io.ReaderAt, size int64, chunk int) ([][]byte, error) {
	d := *c
	var all [][]byte
	for need := 0; d.Off < size; {
		at := d.Off
		buf := make([]byte, min(int64(max(chunk, need)), size-at))
		got, err := r.ReadAt(buf, at)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		var objs [][]byte
		objs, need = d.Scan(buf[:got])
		all = append(all, objs...)
		if need == 0 || at+int64(got) >= size || got < len(buf) {
			break // the log ends, or so does the segment
		}
		chunk = min(max(chunk, 1)*2, maxReadChunk)
	}
	*c = d
	return all, nil
}
