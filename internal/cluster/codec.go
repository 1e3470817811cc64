package cluster

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// CodecName is the gRPC content-subtype of Codec.
const CodecName = "stepwell-msgpack"

// Codec encodes requests and replies as msgpack: structs as maps of their
// field names (the reflective codec of github.com/vmihailenco/msgpack), or
// of field numbers for the hot messages that encode themselves, so that a
// field added on one side is ignored by the other.
//
// A hot message implements msgp.Marshaler and msgp.Unmarshaler (slice
// based: no reflection, no reader interface). Its decoder may keep slices
// of the bytes it decodes: Codec hands it a buffer of its own, which
// nothing else writes to or reuses.
type Codec struct{}

// buffers are reused: a busy member's commit call is tens of KiB, and a
// buffer grown from empty for each one cost more than encoding it.
var buffers = sync.Pool{New: func() any { return new(pooledBuffer) }}

type pooledBuffer struct {
	b   []byte
	buf bytes.Buffer
	enc *msgpack.Encoder
}

// maxPooled bounds the buffers kept for reuse: an encoding larger than
// that is returned as it is, not copied.
const maxPooled = 1 << 20

// Encode returns v's encoding.
func Encode(v any) ([]byte, error) {
	p := buffers.Get().(*pooledBuffer)
	var out []byte
	var err error
	if m, ok := v.(msgp.Marshaler); ok {
		p.b, err = m.MarshalMsg(p.b[:0])
		out = p.b
	} else {
		if p.enc == nil {
			p.enc = msgpack.NewEncoder(&p.buf)
		}
		p.buf.Reset()
		err = p.enc.Encode(v)
		out = p.buf.Bytes()
	}
	if cap(p.b) > maxPooled || p.buf.Cap() > maxPooled {
		return out, err // p is not reused: out is the caller's
	}
	if err == nil {
		out = bytes.Clone(out)
	}
	buffers.Put(p)
	return out, err
}

// Decode decodes data into v. A hot message (msgp.Unmarshaler) may keep
// slices of data: the caller must not change data afterwards.
func Decode(data []byte, v any) error {
	u, ok := v.(msgp.Unmarshaler)
	if !ok {
		return msgpack.Unmarshal(data, v)
	}
	rest, err := u.UnmarshalMsg(data)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("cluster: %d bytes after a %T", len(rest), v)
	}
	return nil
}

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := Encode(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal implements encoding.CodecV2. It decodes from a copy of data
// (gRPC frees data's buffers when it returns), which the message may keep.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error { return Decode(data.Materialize(), v) }

// Name implements encoding.CodecV2.
func (Codec) Name() string { return CodecName }

func init() { encoding.RegisterCodecV2(Codec{}) }
