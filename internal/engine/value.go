package engine

import (
	"encoding/binary"
	"errors"
)

// Values in the tree and in WAL mutations are tagged byte strings.
//
//	tag 0x00: inline, the rest is the value
//	tag 0x01: blob reference: uvarint size, 32-byte SHA-256 of the
//	          contents, then the blob's object key
//
// DO NOT CHANGE: the tags are part of the on-bucket format.
const (
	tagInline byte = 0
	tagBlob   byte = 1
)

// Inline returns the encoded form of an inline value (copying data).
func Inline(data []byte) []byte {
	v := make([]byte, 1+len(data))
	v[0] = tagInline
	copy(v[1:], data)
	return v
}

// NewInline returns an empty inline value with room for n bytes of data:
// append the data to it (saves Inline's copy).
func NewInline(n int) []byte {
	v := make([]byte, 1, 1+n)
	v[0] = tagInline
	return v
}

// AppendInline appends to dst the tag of an inline value: append the
// data after it.
func AppendInline(dst []byte) []byte { return append(dst, tagInline) }

// BlobRef returns the encoded form of a reference to a blob object whose
// contents have the given size and SHA-256.
func BlobRef(key string, size int64, sum [32]byte) []byte {
	v := make([]byte, 1, 1+binary.MaxVarintLen64+32+len(key))
	v[0] = tagBlob
	v = binary.AppendUvarint(v, uint64(size))
	v = append(v, sum[:]...)
	return append(v, key...)
}

// ErrBadValue is returned for an encoded value that does not parse.
var ErrBadValue = errors.New("malformed encoded value")

// Decoded is a parsed value: either Data (inline) or a blob reference.
type Decoded struct {
	Data    []byte   // inline data (aliases the encoded value)
	BlobKey string   // non-empty for a blob reference
	Sum     [32]byte // SHA-256 of a blob's contents
	Size    int64    // logical size of the value
}

// Decode parses an encoded value.
func Decode(v []byte) (Decoded, error) {
	if len(v) == 0 {
		return Decoded{}, ErrBadValue
	}
	switch v[0] {
	case tagInline:
		return Decoded{Data: v[1:], Size: int64(len(v) - 1)}, nil
	case tagBlob:
		size, n := binary.Uvarint(v[1:])
		if n <= 0 || len(v) <= 1+n+32 || size > 1<<62 {
			return Decoded{}, ErrBadValue
		}
		d := Decoded{BlobKey: string(v[1+n+32:]), Size: int64(size)}
		copy(d.Sum[:], v[1+n:])
		return d, nil
	default:
		return Decoded{}, ErrBadValue
	}
}

// blobKeyOf returns the blob key referenced by v, or "".
func blobKeyOf(v []byte) string {
	if len(v) == 0 || v[0] != tagBlob {
		return ""
	}
	d, err := Decode(v)
	if err != nil {
		return ""
	}
	return d.BlobKey
}
