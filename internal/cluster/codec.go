package cluster

import (
	"bytes"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/encoding"
)

// CodecName is the gRPC content-subtype of Codec.
const CodecName = "stepwell-msgpack"

// Codec encodes requests and replies as msgpack: structs as maps of their
// field names, or of field numbers for the types that encode themselves
// (msgpack.CustomEncoder), so that a field added on one side is ignored by
// the other.
type Codec struct{}

// encoders are reused: a busy member's commit call is tens of KiB, and a
// buffer grown from empty for each one cost more than encoding it.
var encoders = sync.Pool{New: func() any {
	e := &pooledEncoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}}

type pooledEncoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

// maxPooled bounds the buffer a pooled encoder keeps.
const maxPooled = 1 << 20

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) {
	e := encoders.Get().(*pooledEncoder)
	defer func() {
		if e.buf.Cap() <= maxPooled {
			encoders.Put(e)
		}
	}()
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

// Unmarshal implements encoding.Codec.
func (Codec) Unmarshal(data []byte, v any) error { return msgpack.Unmarshal(data, v) }

// Name implements encoding.Codec.
func (Codec) Name() string { return CodecName }

func init() { encoding.RegisterCodec(Codec{}) }
