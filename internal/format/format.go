package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Format constants. DO NOT CHANGE: they are written to buckets.
const (
	magic = "STPW"

	// KindWAL marks a WAL batch object.
	KindWAL byte = 'W'
	// KindSnapshot marks a snapshot object.
	KindSnapshot byte = 'S'
	// KindOwner marks the owner (heartbeat) object.
	KindOwner byte = 'O'

	// Version is the current version of every object kind, and of WAL
	// batches whose body is stored as is.
	Version byte = 1
	// VersionCompressed is the version of a WAL batch whose body is
	// compressed: the frame holds the msgpack body compressed in the S2
	// block format (github.com/klauspost/compress/s2), and its length and
	// CRC are those of the compressed bytes. Written since November 27,
	// 2026; a batch that compression would not shrink is still written
	// in Version 1. A snapshot in this version has every frame's body so
	// compressed (see snapshot.go).
	VersionCompressed byte = 2

	headerLen      = 8
	frameHeaderLen = 8
	// FramedHeaderLen is the size of a framed object's fixed header.
	FramedHeaderLen = headerLen + frameHeaderLen

	// MaxFrame bounds one frame's body; a larger length is corruption (this
	// keeps a garbage length from allocating gigabytes).
	MaxFrame = 1 << 30
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt object")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func putHeader(dst []byte, kind byte) { putHeaderVersion(dst, kind, Version) }

func putHeaderVersion(dst []byte, kind, version byte) {
	copy(dst, magic)
	dst[4] = kind
	dst[5] = version
	dst[6], dst[7] = 0, 0
}

func checkHeader(h []byte, kind byte) error {
	if len(h) < headerLen {
		return corrupt("object of %d bytes is shorter than its header", len(h))
	}
	if string(h[:4]) != magic {
		return corrupt("bad magic %q", h[:4])
	}
	if h[4] != kind {
		return corrupt("object kind %q, want %q", h[4], kind)
	}
	if h[5] != Version && (kind == KindOwner || h[5] != VersionCompressed) {
		return corrupt("unsupported format version %d", h[5])
	}
	if h[6] != 0 || h[7] != 0 {
		return corrupt("reserved header bytes are not zero")
	}
	return nil
}

func putFrameHeader(dst []byte, body []byte) {
	binary.BigEndian.PutUint32(dst[0:4], uint32(len(body)))
	binary.BigEndian.PutUint32(dst[4:8], crc32.Checksum(body, castagnoli))
}

// EncodeFramed returns a framed object of the given kind around body.
func EncodeFramed(kind byte, body []byte) []byte {
	out := make([]byte, FramedHeaderLen+len(body))
	putHeader(out, kind)
	putFrameHeader(out[headerLen:], body)
	copy(out[FramedHeaderLen:], body)
	return out
}

// DecodeFramed checks a framed object of the given kind and returns its body
// (aliasing data).
func DecodeFramed(kind byte, data []byte) ([]byte, error) {
	if err := checkHeader(data, kind); err != nil {
		return nil, err
	}
	if len(data) < FramedHeaderLen {
		return nil, corrupt("truncated: %d bytes, header needs %d", len(data), FramedHeaderLen)
	}
	n := binary.BigEndian.Uint32(data[headerLen:])
	sum := binary.BigEndian.Uint32(data[headerLen+4:])
	body := data[FramedHeaderLen:]
	if uint64(len(body)) != uint64(n) {
		return nil, corrupt("body is %d bytes, header says %d (truncated or extended)", len(body), n)
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, corrupt("checksum mismatch")
	}
	return body, nil
}
