package cluster

import (
	"bytes"
	"fmt"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// CodecName is the gRPC content-subtype of Codec.
const CodecName = "stepwell-msgpack"

// Codec encodes requests and replies, each a Message: a field-numbered
// struct of internal/format (see its documentation, "Field-numbered
// messages"), so that a field added on one side is ignored by the other.
//
// A Message's decoder may keep slices of the bytes it decodes: Codec hands
// it a buffer of its own, which nothing else writes to or reuses.
type Codec struct{}

// Message is a request or a reply: it encodes and decodes itself, slice
// based (no reflection, no reader interface), as the msgp.Marshaler and
// msgp.Unmarshaler of github.com/tinylib/msgp do.
type Message interface {
	// MarshalMsg appends the message to b.
	MarshalMsg(b []byte) ([]byte, error)
	// UnmarshalMsg decodes the message at the start of b and returns the
	// rest of b.
	UnmarshalMsg(b []byte) ([]byte, error)
}

// buffers are reused: a busy member's commit call is tens of KiB, and a
// buffer grown from empty for each one costs more than encoding it.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled bounds the buffers kept for reuse: an encoding larger than
// that is returned as it is, not copied.
const maxPooled = 1 << 20

// Encode returns v's encoding; v must be a Message.
func Encode(v any) ([]byte, error) {
	m, ok := v.(Message)
	if !ok {
		return nil, fmt.Errorf("cluster: %T is not a Message", v)
	}
	p := buffers.Get().(*[]byte)
	out, err := m.MarshalMsg((*p)[:0])
	if cap(out) > maxPooled {
		return out, err // not reused: out is the caller's
	}
	*p = out
	if err == nil {
		out = bytes.Clone(out)
	}
	buffers.Put(p)
	return out, err
}

// Decode decodes data into v, a Message, which may keep slices of data:
// the caller must not change data afterwards.
func Decode(data []byte, v any) error {
	m, ok := v.(Message)
	if !ok {
		return fmt.Errorf("cluster: %T is not a Message", v)
	}
	rest, err := m.UnmarshalMsg(data)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("cluster: %d bytes after a %T", len(rest), v)
	}
	return nil
}

// Marshal implements encoding.CodecV2. It hands gRPC the pooled buffer
// the message was encoded in, not a copy: gRPC frees it once the message
// is written (see encodePool). A small message is copied, as gRPC does not
// pool buffers that small.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(Message)
	if !ok {
		return nil, fmt.Errorf("cluster: %T is not a Message", v)
	}
	p := buffers.Get().(*[]byte)
	out, err := m.MarshalMsg((*p)[:0])
	switch {
	case err != nil:
		buffers.Put(p)
		return nil, err
	case cap(out) > maxPooled:
		buffers.Put(p)
		return mem.BufferSlice{mem.SliceBuffer(out)}, nil
	case mem.IsBelowBufferPoolingThreshold(cap(out)):
		*p = out
		out = bytes.Clone(out)
		buffers.Put(p)
		return mem.BufferSlice{mem.SliceBuffer(out)}, nil
	}
	*p = out
	return mem.BufferSlice{mem.NewBuffer(p, encodePool{})}, nil
}

// encodePool takes back the buffers Marshal handed gRPC, for buffers.
type encodePool struct{}

// Get implements mem.BufferPool; gRPC only puts buffers back to it.
func (encodePool) Get(n int) *[]byte {
	p := buffers.Get().(*[]byte)
	if cap(*p) < n {
		*p = make([]byte, n)
	}
	*p = (*p)[:n]
	return p
}

// Put implements mem.BufferPool.
func (encodePool) Put(p *[]byte) {
	*p = (*p)[:0]
	buffers.Put(p)
}

// Copier is a Message whose decoder copies every byte it keeps (a
// member's replies): Codec decodes it from gRPC's buffer in place, when
// the message arrived in one, without copying the message first.
type Copier interface {
	Message
	// DecodesCopies marks the message.
	DecodesCopies()
}

// Unmarshal implements encoding.CodecV2. It decodes from a copy of data
// (gRPC frees data's buffers when it returns), which the message may keep;
// a Copier in one buffer is decoded from the buffer itself.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(Copier); ok && len(data) == 1 {
		return Decode(data[0].ReadOnlyData(), v)
	}
	return Decode(data.Materialize(), v)
}

// Name implements encoding.CodecV2.
func (Codec) Name() string { return CodecName }

func init() { encoding.RegisterCodecV2(Codec{}) }
