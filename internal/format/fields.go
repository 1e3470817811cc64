package format

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// Field-numbered structs: the messages of cluster calls (see the package
// documentation, "Field-numbered messages"). They are written with a
// FieldWriter and read with a Reader's Numbered, from the same primitives
// as the records above.

// FieldWriter appends a struct as a map of field numbers, leaving out the
// fields at their zero value (a nil slice or map too; an empty one is
// written). The map's header has room for any count (map16) and End writes
// the count into it.
//
// A value the methods do not cover (a nested message, an array of them)
// is appended to B after its number, with Key or Array.
type FieldWriter struct {
	B  []byte // the message so far
	at int    // where the header is
	n  int    // fields written
}

const codeMap16 = 0xde

// BeginFields starts a field-numbered struct at the end of b.
func BeginFields(b []byte) FieldWriter {
	return FieldWriter{B: append(b, codeMap16, 0, 0), at: len(b)}
}

// End writes the field count into the header and returns the bytes.
func (w *FieldWriter) End() []byte {
	binary.BigEndian.PutUint16(w.B[w.at+1:], uint16(w.n))
	return w.B
}

// Key appends a field number; its value comes next, appended to B.
func (w *FieldWriter) Key(num uint8) {
	w.B = msgp.AppendUint8(w.B, num)
	w.n++
}

// Array appends a field number and the header of an array of n values,
// which come next.
func (w *FieldWriter) Array(num uint8, n int) {
	w.Key(num)
	w.B = msgp.AppendArrayHeader(w.B, uint32(n))
}

// Uint appends a non-zero unsigned integer in its shortest form.
func (w *FieldWriter) Uint(num uint8, v uint64) {
	if v != 0 {
		w.Key(num)
		w.B = msgp.AppendUint64(w.B, v)
	}
}

// Int appends a non-zero integer in its shortest form.
func (w *FieldWriter) Int(num uint8, v int64) {
	if v != 0 {
		w.Key(num)
		w.B = msgp.AppendInt64(w.B, v)
	}
}

// Bool appends true.
func (w *FieldWriter) Bool(num uint8, v bool) {
	if v {
		w.Key(num)
		w.B = msgp.AppendBool(w.B, v)
	}
}

// Bytes appends a non-nil byte slice (an empty one too).
func (w *FieldWriter) Bytes(num uint8, v []byte) {
	if v != nil {
		w.Key(num)
		w.B = msgp.AppendBytes(w.B, v)
	}
}

// String appends a non-empty string.
func (w *FieldWriter) String(num uint8, v string) {
	if v != "" {
		w.Key(num)
		w.B = msgp.AppendString(w.B, v)
	}
}

// StringMap appends a non-nil map[string]string (an empty one too).
func (w *FieldWriter) StringMap(num uint8, m map[string]string) {
	if m != nil {
		w.Key(num)
		w.B = AppendStringMap(w.B, m)
	}
}

// Strings appends a non-nil []string (an empty one too).
func (w *FieldWriter) Strings(num uint8, v []string) {
	if v != nil {
		w.Array(num, len(v))
		for _, s := range v {
			w.B = msgp.AppendString(w.B, s)
		}
	}
}

// AppendInt appends an integer in its shortest form (an element of an
// array of a FieldWriter's).
func AppendInt(b []byte, v int64) []byte { return msgp.AppendInt64(b, v) }

// AppendUint appends an unsigned integer in its shortest form.
func AppendUint(b []byte, v uint64) []byte { return msgp.AppendUint64(b, v) }

// NewCopyingReader returns a Reader over b whose Bin copies what it reads:
// for a message whose byte fields must outlive its buffer, or must not
// keep all of it alive.
func NewCopyingReader(b []byte) Reader { return Reader{b: b, copyBin: true} }

// Numbered reads a field-numbered struct, calling field for each of its
// fields, which must read the field's value (Skip, for a number it does
// not know). nil reads as a struct of no fields. An error is prefixed with
// what.
func (r *Reader) Numbered(what string, field func(num uint64)) {
	if r.err != nil || r.nil() {
		return
	}
	n := r.header(msgp.ReadMapHeaderBytes, 2) // a number and a value take a byte each at least
	for i := 0; i < n && r.err == nil; i++ {
		if num := r.Uint64(); r.err == nil {
			field(num)
		}
	}
	if r.err != nil {
		r.err = fmt.Errorf("%s: %w", what, r.err)
	}
}

// Nil reads nil if it comes next, and reports whether it did.
func (r *Reader) Nil() bool { return r.nil() }

// Fail makes err the Reader's error, unless it has one.
func (r *Reader) Fail(err error) { r.fail(err) }

// Rest returns the input not read yet (nil after an error).
func (r *Reader) Rest() []byte { return r.b }

// Bin reads binary, or nil as a nil slice: a slice of the input capped to
// its length (appending to it cannot write over what follows), or a copy
// for a Reader from NewCopyingReader.
func (r *Reader) Bin() []byte {
	v := r.BytesZC()
	if v == nil {
		return nil
	}
	if r.copyBin {
		return bytes.Clone(v)
	}
	return v[:len(v):len(v)]
}

// maxPrealloc is the longest slice List allocates up front: a header's
// count is not trusted with more (the slice grows as values are read).
const maxPrealloc = 1024

// List reads an array header (nil: -1) and returns an empty slice (nil
// for nil) with room for up to maxPrealloc of its elements, for the
// caller to append them as it reads them:
//
//	n, s := format.List[T](r)
//	for i := 0; i < n && r.Err() == nil; i++ {
//		s = append(s, readT(r))
//	}
func List[T any](r *Reader) (int, []T) {
	n := r.ArrayLen()
	if n < 0 || r.err != nil {
		return 0, nil
	}
	return n, make([]T, 0, min(n, maxPrealloc))
}

// AppendMapLen appends a map header of n entries (a key and a value each,
// which come next).
func AppendMapLen(b []byte, n int) []byte { return msgp.AppendMapHeader(b, uint32(n)) }

// MapLen reads a map header, or nil as -1. The count is bounded by the
// input left (each entry takes two bytes at least).
func (r *Reader) MapLen() int {
	if r.nil() {
		return -1
	}
	return r.header(msgp.ReadMapHeaderBytes, 2)
}
