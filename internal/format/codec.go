package format

import (
	"encoding/binary"

	"github.com/tinylib/msgp/msgp"
)

// Reflection-free record codecs.
//
// Marshal (the reflective msgpack encoder) is the reference encoding of
// every record. Hot records also have hand-listed codecs built from the
// functions below, which produce the same bytes field for field: structs as
// arrays of their fields in declaration order, integers in their shortest
// form (as Marshal writes them with compact integers: a non-negative one as
// a positive fixint or the smallest of uint8, uint16, uint32 and uint64, a
// negative one as a negative fixint or the smallest of int8 to int64,
// whatever the field's type), the shortest string, binary and container
// headers, and nil for a nil map, slice or byte slice. Tests compare each fast
// encoder with Marshal on generated values, so the two cannot drift apart.
//
// A fast decoder reads the shape its encoder writes: the exact field count
// (the reflective decoder, too, rejects an array-encoded struct whose field
// count differs from the type's) and the field types, integers in any
// width. Anything else (nil where a string belongs, a map-encoded struct)
// makes it fail, and the caller then decodes with UnmarshalExact, which
// accepts what the reflective decoder does: the fast path changes speed,
// never what decodes. Fuzz targets check that whatever a fast decoder
// accepts, the reflective one accepts with the same value.
//
// Records written before November 27, 2026 have fixed-width integers
// (uint8 as 0xcc xx, int32 as 0xd2, uint32 as 0xce, uint64 as 0xcf, int64
// as 0xd3, whatever the value): every decoder reads integers in any width,
// so they read as before, and so does a record of either kind read by the
// other's code. A zero took 5 or 9 bytes; a run record has a dozen of them.
//
// The append and read primitives come from github.com/tinylib/msgp (slice
// based, no interfaces or readers); only the integers, which msgp writes
// in another shortest form (positive numbers as signed types), are
// written here.
//
// The same Reader reads the field-numbered messages of cluster calls
// (fields.go), which are never stored.

// AppendArrayLen appends an array header (a struct's field count or a
// slice's length).
func AppendArrayLen(b []byte, n int) []byte { return msgp.AppendArrayHeader(b, uint32(n)) }

// AppendString appends a string.
func AppendString(b []byte, s string) []byte { return msgp.AppendString(b, s) }

// AppendBool appends a bool.
func AppendBool(b []byte, v bool) []byte { return msgp.AppendBool(b, v) }

// AppendNil appends nil.
func AppendNil(b []byte) []byte { return msgp.AppendNil(b) }

// AppendBytes appends a byte slice: nil for a nil slice, else binary.
func AppendBytes(b []byte, v []byte) []byte {
	if v == nil {
		return msgp.AppendNil(b)
	}
	return msgp.AppendBytes(b, v)
}

// AppendStringMap appends a map[string]string: nil for a nil map. Entries
// come in map iteration order, as with Marshal.
func AppendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return msgp.AppendNil(b)
	}
	b = msgp.AppendMapHeader(b, uint32(len(m)))
	for k, v := range m {
		b = msgp.AppendString(b, k)
		b = msgp.AppendString(b, v)
	}
	return b
}

// StringMapSize bounds the bytes AppendStringMap appends for m, for sizing
// a buffer up front.
func StringMapSize(m map[string]string) int {
	n := 5
	for k, v := range m {
		n += 10 + len(k) + len(v)
	}
	return n
}

// msgpack type codes of the fixed-width integers.
const (
	codeUint8  = 0xcc
	codeUint16 = 0xcd
	codeUint32 = 0xce
	codeUint64 = 0xcf
	codeInt8   = 0xd0
	codeInt16  = 0xd1
	codeInt32  = 0xd2
	codeInt64  = 0xd3
	codeNil    = 0xc0
)

// AppendUint8 appends a uint8 in its shortest form.
func AppendUint8(b []byte, v uint8) []byte { return appendUint(b, uint64(v)) }

// AppendInt32 appends an int32 in its shortest form.
func AppendInt32(b []byte, v int32) []byte { return appendInt(b, int64(v)) }

// AppendUint32 appends a uint32 in its shortest form.
func AppendUint32(b []byte, v uint32) []byte { return appendUint(b, uint64(v)) }

// AppendUint64 appends a uint64 in its shortest form.
func AppendUint64(b []byte, v uint64) []byte { return appendUint(b, v) }

// AppendInt64 appends an int64 in its shortest form.
func AppendInt64(b []byte, v int64) []byte { return appendInt(b, v) }

// appendUint appends v as Marshal's compact integers do: a positive
// fixint, or the smallest unsigned type that holds it.
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= 0xff:
		return append(b, codeUint8, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, codeUint16), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, codeUint32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, codeUint64), v)
}

// appendInt appends v as Marshal's compact integers do: a non-negative one
// as appendUint, a negative one as a negative fixint or the smallest
// signed type that holds it.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= -1<<7:
		return append(b, codeInt8, byte(v))
	case v >= -1<<15:
		return binary.BigEndian.AppendUint16(append(b, codeInt16), uint16(v))
	case v >= -1<<31:
		return binary.BigEndian.AppendUint32(append(b, codeInt32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, codeInt64), uint64(v))
}

// AppendFloat64 appends a float64 in its 9-byte form (as Marshal writes
// it).
func AppendFloat64(b []byte, v float64) []byte { return msgp.AppendFloat64(b, v) }

// Reader decodes msgpack values from a byte slice, in order. The first
// error sticks: later reads return zero values, and Finish reports it.
// Reads never allocate more than the input can hold (a declared length
// past the end of the input is an error before anything is allocated).
type Reader struct {
	b       []byte
	err     error
	copyBin bool // Bin copies (see NewCopyingReader)
}

// NewReader returns a Reader over b.
func NewReader(b []byte) Reader { return Reader{b: b} }

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = err
		r.b = nil
	}
}

// Finish returns the first error, or an error if bytes are left unread.
// Errors wrap ErrCorrupt.
func (r *Reader) Finish() error {
	if r.err != nil {
		return corrupt("msgpack: %v", r.err)
	}
	if len(r.b) != 0 {
		return corrupt("%d trailing bytes after msgpack body", len(r.b))
	}
	return nil
}

// Err returns the first error (not wrapped).
func (r *Reader) Err() error { return r.err }

// Fields reads a struct's array header and fails unless it has exactly n
// fields.
func (r *Reader) Fields(n int) {
	if got := r.ArrayLen(); got != n && r.err == nil {
		r.fail(msgp.ArrayError{Wanted: uint32(n), Got: uint32(got)})
	}
}

// FieldsIn reads a struct's array header and returns its field count,
// failing unless it is in [lo, hi]: the reader of a record that gained
// fields reads the older, shorter records too.
func (r *Reader) FieldsIn(lo, hi int) int {
	got := r.ArrayLen()
	if (got < lo || got > hi) && r.err == nil {
		r.fail(msgp.ArrayError{Wanted: uint32(hi), Got: uint32(got)})
	}
	return got
}

// nil reads nil if it comes next, and reports whether it did.
func (r *Reader) nil() bool {
	if r.err == nil && len(r.b) > 0 && r.b[0] == codeNil {
		r.b = r.b[1:]
		return true
	}
	return false
}

// header reads a container header with fn and fails if its n entries of
// minSize bytes each cannot fit in the rest of the input: a garbage length
// never gets to allocate.
func (r *Reader) header(fn func([]byte) (uint32, []byte, error), minSize int) int {
	n := read(r, fn)
	if uint64(n)*uint64(minSize) > uint64(len(r.b)) {
		r.fail(msgp.ErrShortBytes)
		return 0
	}
	return int(n)
}

// ArrayLen reads an array header, or nil as -1.
func (r *Reader) ArrayLen() int {
	if r.nil() {
		return -1
	}
	return r.header(msgp.ReadArrayHeaderBytes, 1)
}

// Bytes reads binary into a new slice, or nil as a nil slice (so an empty
// binary reads as an empty, non-nil slice, as with the reflective decoder).
func (r *Reader) Bytes() []byte {
	v := r.BytesZC()
	if v == nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

// BytesZC is Bytes without the copy: the result aliases the input (nil for
// nil; empty binary reads as an empty, non-nil slice).
func (r *Reader) BytesZC() []byte {
	if r.nil() {
		return nil
	}
	v := read(r, msgp.ReadBytesZC)
	if r.err != nil {
		return nil
	}
	return v
}

// BytesArray reads binary of exactly len(dst) bytes into dst.
func (r *Reader) BytesArray(dst []byte) {
	v := read(r, msgp.ReadBytesZC)
	if r.err == nil && len(v) != len(dst) {
		r.fail(msgp.ArrayError{Wanted: uint32(len(dst)), Got: uint32(len(v))})
	}
	copy(dst, v)
}

// StringMap reads a map[string]string, or nil as a nil map.
func (r *Reader) StringMap() map[string]string {
	if r.nil() {
		return nil
	}
	n := r.header(msgp.ReadMapHeaderBytes, 2) // a key and a value take a byte each at least
	if r.err != nil {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := r.StringBytes()
		v := r.String()
		if r.err != nil {
			return nil
		}
		m[intern(k)] = v // keys recur: a header's name
	}
	return m
}

// SkipStringMap reads a map[string]string (or nil) without keeping it.
func (r *Reader) SkipStringMap() {
	if r.nil() {
		return
	}
	n := r.header(msgp.ReadMapHeaderBytes, 2)
	for range n {
		r.StringBytes()
		r.StringBytes()
	}
}

// read runs one msgp slice reader at the current position.
func read[T any](r *Reader, fn func([]byte) (T, []byte, error)) T {
	var zero T
	if r.err != nil {
		return zero
	}
	v, rest, err := fn(r.b)
	if err != nil {
		r.fail(err)
		return zero
	}
	r.b = rest
	return v
}

// Bool reads a bool.
func (r *Reader) Bool() bool { return read(r, msgp.ReadBoolBytes) }

// Uint8 reads an integer that fits a uint8.
func (r *Reader) Uint8() uint8 { return read(r, msgp.ReadUint8Bytes) }

// Int32 reads an integer that fits an int32.
func (r *Reader) Int32() int32 { return read(r, msgp.ReadInt32Bytes) }

// Uint32 reads an integer that fits a uint32.
func (r *Reader) Uint32() uint32 { return read(r, msgp.ReadUint32Bytes) }

// Uint64 reads an integer that fits a uint64.
func (r *Reader) Uint64() uint64 { return read(r, msgp.ReadUint64Bytes) }

// Int64 reads an integer that fits an int64.
func (r *Reader) Int64() int64 { return read(r, msgp.ReadInt64Bytes) }

// Float64 reads a float64 (or a float32).
func (r *Reader) Float64() float64 { return read(r, msgp.ReadFloat64Bytes) }

// StringBytes reads a string without copying it: the result aliases the
// input.
func (r *Reader) StringBytes() []byte { return read(r, msgp.ReadStringZC) }

// String reads a string.
func (r *Reader) String() string { return string(r.StringBytes()) }

// Skip skips one value of any type without allocating.
func (r *Reader) Skip() {
	read(r, func(b []byte) (struct{}, []byte, error) {
		rest, err := msgp.Skip(b)
		return struct{}{}, rest, err
	})
}

// ReadSlice reads an array header and returns a slice of that many zero
// elements (nil for nil) for the caller to read the elements into:
//
//	s := format.ReadSlice[T](r)
//	for i := range s {
//		readT(r, &s[i])
//	}
//
// (A reader taking the element reader as a function value would make r
// escape to the heap.) The length is bounded by the input left.
func ReadSlice[T any](r *Reader) []T {
	n := r.ArrayLen()
	if n < 0 {
		return nil
	}
	return make([]T, n)
}

// ReadExact reads body into v with the fast reader readV and fails (with
// an error wrapping ErrCorrupt) unless it read all of body without error.
//
// Hot paths call their reader directly and then Exact: a Reader passed to
// a function value escapes to the heap, a Reader passed to a known function
// does not.
func ReadExact[T any](body []byte, v *T, readV func(*Reader, *T)) error {
	r := NewReader(body)
	readV(&r, v)
	return r.Finish()
}

// Exact completes the decoding of body into v after a fast reader read it
// with r: when r failed or left bytes over, v is reset and decoded with
// UnmarshalExact instead. Any failure wraps ErrCorrupt. Use it as
//
//	r := format.NewReader(body)
//	readThing(&r, &v)
//	err := format.Exact(&r, body, &v)
func Exact[T any](r *Reader, body []byte, v *T) error {
	if r.Finish() == nil {
		return nil
	}
	var zero T
	*v = zero
	return unmarshalExact(body, v)
}
