package format

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"
)

// Mutation operations. DO NOT CHANGE.
const (
	// OpPut sets Key to Value.
	OpPut uint8 = 1
	// OpDelete removes Key.
	OpDelete uint8 = 2
)

// Mutation is one physical change to the state: the WAL records effects,
// never intentions, so replay needs no validation, clock or randomness.
type Mutation struct {
	Op    uint8
	Key   string
	Value []byte // OpPut only: an encoded value (see package engine)
}

// Batch is the body of one WAL object: one group commit.
type Batch struct {
	// Seq is the batch's sequence number, equal to the one in its object
	// name (checked on replay).
	Seq uint64
	// Writer identifies the process that wrote the batch (random per open);
	// it makes two writers' batches for one sequence never byte-identical.
	Writer string
	// Epoch is the sequence number of the writer's open marker.
	Epoch uint64
	// UnixNano is the writer's clock when the batch was sealed (informative).
	UnixNano int64
	// Marker is set on the open-marker batch a writer writes at Open.
	Marker bool
	// Txns is the number of transactions in the batch.
	Txns uint32
	// Muts are applied in order.
	Muts []Mutation
}

// EncodeBatch returns the WAL object bytes for b: its body compressed
// (VersionCompressed), or as is (Version) if compression would not make
// it smaller.
func EncodeBatch(b *Batch) ([]byte, error) { return encodeBatch(nil, b, MaxFrame, true) }

// AppendBatch appends to dst the WAL object bytes EncodeBatch returns for
// b: a committer that reuses dst allocates nothing per batch once it has
// grown. On error dst is returned unchanged.
func AppendBatch(dst []byte, b *Batch) ([]byte, error) { return encodeBatch(dst, b, MaxFrame, true) }

// EncodeBatchUncompressed returns the WAL object bytes for b in Version 1,
// as written before VersionCompressed (for tests of old stores).
func EncodeBatchUncompressed(b *Batch) ([]byte, error) { return encodeBatch(nil, b, MaxFrame, false) }

// bodyPool holds the buffers batch bodies are built in before they are
// compressed.
var bodyPool sync.Pool

// encodeBatch is AppendBatch with a frame limit of max bytes (on the
// body before compression).
func encodeBatch(dst []byte, b *Batch, max int, compress bool) ([]byte, error) {
	size := FramedHeaderLen + 64 + len(b.Writer)
	for i := range b.Muts {
		size += 16 + len(b.Muts[i].Key) + len(b.Muts[i].Value)
	}
	start := len(dst)
	if !compress {
		out := appendBatch(append(slices.Grow(dst, size), make([]byte, FramedHeaderLen)...), b)
		if n := len(out) - start - FramedHeaderLen; n > max {
			return dst, &BatchTooLargeError{Size: n, Max: max}
		}
		putHeader(out[start:], KindWAL)
		putFrameHeader(out[start+headerLen:], out[start+FramedHeaderLen:])
		return out, nil
	}
	var body []byte
	if p, ok := bodyPool.Get().(*[]byte); ok && cap(*p) >= size {
		body = (*p)[:0]
	} else {
		body = make([]byte, 0, size)
	}
	body = appendBatch(body, b)
	defer func() {
		if cap(body) <= 4<<20 { // do not keep a rare huge batch's buffer
			bodyPool.Put(&body)
		}
	}()
	if n := len(body); n > max {
		return dst, &BatchTooLargeError{Size: n, Max: max}
	}
	full := start + FramedHeaderLen + s2.MaxEncodedLen(len(body))
	out := slices.Grow(dst, full-start)[:full]
	z := s2.Encode(out[start+FramedHeaderLen:], body)
	version := VersionCompressed
	if len(z) >= len(body) {
		z, version = out[start+FramedHeaderLen:start+FramedHeaderLen+copy(out[start+FramedHeaderLen:], body)], Version
	}
	out = out[:start+FramedHeaderLen+len(z)]
	putHeaderVersion(out[start:], KindWAL, version)
	putFrameHeader(out[start+headerLen:], z)
	return out, nil
}

// BatchTooLargeError is returned by EncodeBatch for a batch whose body
// exceeds MaxFrame: its length would not fit the frame header, and no
// reader would accept it. A retry cannot help.
type BatchTooLargeError struct {
	Size, Max int
}

func (e *BatchTooLargeError) Error() string {
	return fmt.Sprintf("format: WAL batch of %d bytes exceeds the %d-byte frame limit", e.Size, e.Max)
}

// BatchBodyLen returns the length of the body of WAL object data, as
// encoded before any compression: what replaying it decodes. data must
// have decoded (DecodeBatch).
func BatchBodyLen(data []byte) int {
	if len(data) > 5 && data[5] == VersionCompressed {
		n, _ := s2.DecodedLen(data[FramedHeaderLen:])
		return n
	}
	return len(data) - FramedHeaderLen
}

// DecodeBatch parses a WAL object of either version. The mutations'
// values alias data, or the buffer its body was decompressed into (the
// engine copies what it keeps); everything else is copied.
func DecodeBatch(data []byte) (*Batch, error) {
	body, err := DecodeFramed(KindWAL, data)
	if err != nil {
		return nil, err
	}
	if data[5] == VersionCompressed {
		n, err := s2.DecodedLen(body)
		if err != nil {
			return nil, corrupt("compressed batch: %v", err)
		}
		if n > MaxFrame {
			return nil, corrupt("compressed batch of %d bytes exceeds the %d-byte frame limit", n, MaxFrame)
		}
		if body, err = s2.Decode(make([]byte, n), body); err != nil {
			return nil, corrupt("compressed batch: %v", err)
		}
	}
	var b Batch
	r := NewReader(body)
	readBatch(&r, &b)
	if err := Exact(&r, body, &b); err != nil {
		return nil, err
	}
	for i := range b.Muts {
		switch b.Muts[i].Op {
		case OpPut:
		case OpDelete:
			if b.Muts[i].Value != nil {
				return nil, corrupt("delete mutation %d carries a value", i)
			}
		default:
			return nil, corrupt("mutation %d has unknown op %d", i, b.Muts[i].Op)
		}
	}
	return &b, nil
}

// batchFields is the number of fields of Batch.
const batchFields = 7

// appendBatch appends b's msgpack body, the bytes Marshal(b) returns.
func appendBatch(out []byte, b *Batch) []byte {
	out = AppendArrayLen(out, batchFields)
	out = AppendUint64(out, b.Seq)
	out = AppendString(out, b.Writer)
	out = AppendUint64(out, b.Epoch)
	out = AppendInt64(out, b.UnixNano)
	out = AppendBool(out, b.Marker)
	out = AppendUint32(out, b.Txns)
	if b.Muts == nil {
		return AppendNil(out)
	}
	out = AppendArrayLen(out, len(b.Muts))
	for i := range b.Muts {
		m := &b.Muts[i]
		out = AppendArrayLen(out, 3)
		out = AppendUint8(out, m.Op)
		out = AppendString(out, m.Key)
		out = AppendBytes(out, m.Value)
	}
	return out
}

// readBatch is the fast reader of appendBatch's output.
func readBatch(r *Reader, b *Batch) {
	r.Fields(batchFields)
	b.Seq = r.Uint64()
	b.Writer = r.String()
	b.Epoch = r.Uint64()
	b.UnixNano = r.Int64()
	b.Marker = r.Bool()
	b.Txns = r.Uint32()
	b.Muts = ReadSlice[Mutation](r)
	for i := range b.Muts {
		readMutation(r, &b.Muts[i])
	}
}

func readMutation(r *Reader, m *Mutation) {
	r.Fields(3)
	m.Op = r.Uint8()
	m.Key = r.String()
	m.Value = r.BytesZC()
}

// Marshal encodes v as msgpack with every struct as an array of its fields
// in declaration order: the project's record encoding. Field order is
// therefore part of each format; append new fields at the end only, and
// note that the decoder rejects an array whose field count differs from the
// struct's, so records written before the change need their own decoding.
// Hot records have reflection-free codecs that write the same bytes (see
// codec.go); Marshal stays the reference their tests compare with.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseArrayEncodedStructs(true)
	enc.UseCompactInts(true) // as the hand codecs write them (see codec.go)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// UnmarshalExact decodes one msgpack value that must fill all of body into
// v. Any failure wraps ErrCorrupt. Use it for every record read back from a
// bucket.
func UnmarshalExact(body []byte, v any) error { return unmarshalExact(body, v) }

// unmarshalExact decodes one msgpack value filling all of body.
//
// The msgpack decoder preallocates slices by their declared length, so a
// garbage length could allocate gigabytes. A first pass skips over the
// value without allocating (msgp.Skip on the slice): it fails as soon as a
// declared length runs past the end of body, so the decoding pass only sees
// lengths that fit.
func unmarshalExact(body []byte, v any) error {
	rest, err := msgp.Skip(body)
	if err != nil {
		return corrupt("msgpack: %v", err)
	}
	if len(rest) != 0 {
		return corrupt("%d trailing bytes after msgpack body", len(rest))
	}
	r := bytes.NewReader(body)
	dec := msgpack.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		return corrupt("msgpack: %v", err)
	}
	if r.Len() != 0 {
		return corrupt("%d trailing bytes after msgpack body", r.Len())
	}
	return nil
}

// Owner is the body of the owner (heartbeat) object.
type Owner struct {
	Writer string
	Epoch  uint64
	Beat   uint64 // incremented on every heartbeat
	Closed bool   // set by a clean Close: the store is free at once
	// Durable is the highest WAL sequence the writer knew durable when it
	// wrote this object: the log must reach at least this far (a store
	// whose WAL ends below it has lost acknowledged batches). Added in
	// November 2026; DecodeOwner reads the older four-field body with
	// Durable zero.
	Durable uint64
	// Addr is where the writer serves the other processes of a cluster
	// (host:port), and Secret the random secret of its epoch that their
	// calls must carry: whoever can read the store can join it. Both empty
	// outside cluster mode. Added with Durable.
	Addr   string
	Secret []byte
}

// EncodeOwner returns the owner object bytes.
func EncodeOwner(o *Owner) ([]byte, error) {
	body, err := Marshal(o)
	if err != nil {
		return nil, err
	}
	return EncodeFramed(KindOwner, body), nil
}

// DecodeOwner parses the owner object.
func DecodeOwner(data []byte) (*Owner, error) {
	body, err := DecodeFramed(KindOwner, data)
	if err != nil {
		return nil, err
	}
	var o Owner
	if err := unmarshalExact(body, &o); err != nil {
		// An owner object written before Owner.Durable existed.
		var v1 ownerV1
		if unmarshalExact(body, &v1) != nil {
			return nil, err
		}
		o = Owner{Writer: v1.Writer, Epoch: v1.Epoch, Beat: v1.Beat, Closed: v1.Closed}
	}
	return &o, nil
}

// ownerV1 is the owner object's body before Owner.Durable.
type ownerV1 struct {
	Writer string
	Epoch  uint64
	Beat   uint64
	Closed bool
}
