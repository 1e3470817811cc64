package cluster

import (
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/encoding"
)

// CodecName is the gRPC content-subtype of Codec.
const CodecName = "stepwell-msgpack"

// Codec encodes requests and replies as msgpack (structs as maps of their
// field names, so that a field added on one side is ignored by the other).
type Codec struct{}

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) { return msgpack.Marshal(v) }

// Unmarshal implements encoding.Codec.
func (Codec) Unmarshal(data []byte, v any) error { return msgpack.Unmarshal(data, v) }

// Name implements encoding.Codec.
func (Codec) Name() string { return CodecName }

func init() { encoding.RegisterCodec(Codec{}) }
