// Package codectest generates values for the tests that hold the fast
// record codecs (see internal/format/codec.go) to the bytes of
// format.Marshal: field values at every msgpack size boundary, nil and
// empty containers.
package codectest

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stepwell/stepwell/internal/format"
)

// New returns a seeded generator and logs the seed.
func New(t testing.TB) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// lengths around the msgpack fixstr/str8/str16/str32 boundaries.
var lengths = []int{0, 1, 31, 32, 255, 256, 65535, 65536}

func length(r *rand.Rand) int {
	if r.IntN(4) == 0 {
		return lengths[r.IntN(len(lengths))]
	}
	return r.IntN(40)
}

// String returns a string of a boundary or small random length.
func String(r *rand.Rand) string {
	n := length(r)
	return strings.Repeat(string(rune('a'+r.IntN(26))), n)
}

// Bytes returns nil, an empty slice, or bytes of a boundary or small length.
func Bytes(r *rand.Rand) []byte {
	switch r.IntN(5) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, length(r))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Map returns nil, an empty map, or a map of one entry; with multi, up to
// 20 entries (whose order on the wire follows map iteration: compare those
// by decoding, not by bytes).
func Map(r *rand.Rand, multi bool) map[string]string {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	}
	n := 1
	if multi {
		n = 1 + r.IntN(20)
	}
	m := make(map[string]string, n)
	for i := range n {
		m[String(r)+string(rune('A'+i))] = String(r)
	}
	return m
}

// Int64 returns a boundary or random int64.
func Int64(r *rand.Rand) int64 {
	edges := []int64{0, 1, -1, 127, 128, -32, -33, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64}
	if r.IntN(3) == 0 {
		return edges[r.IntN(len(edges))]
	}
	return int64(r.Uint64())
}

// Uint64 returns a boundary or random uint64.
func Uint64(r *rand.Rand) uint64 {
	edges := []uint64{0, 1, 127, 128, 255, 256, math.MaxUint32, math.MaxUint64}
	if r.IntN(3) == 0 {
		return edges[r.IntN(len(edges))]
	}
	return r.Uint64()
}

// Same fails t unless fast is the bytes format.Marshal returns for v.
func Same(t testing.TB, fast []byte, v any) {
	t.Helper()
	want, err := format.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fast, want) {
		t.Fatalf("fast encoding of %+v differs from format.Marshal:\nfast    %x\nMarshal %x", v, fast, want)
	}
}

// RoundTrip fails t unless fast decodes with format.UnmarshalExact into a
// value deeply equal to v (a *T), for encodings that Same cannot compare
// byte for byte.
func RoundTrip[T any](t testing.TB, fast []byte, v *T) {
	t.Helper()
	var got T
	if err := format.UnmarshalExact(fast, &got); err != nil {
		t.Fatalf("fast encoding does not decode reflectively: %v", err)
	}
	if !reflect.DeepEqual(&got, v) {
		t.Fatalf("fast encoding decodes to %+v, want %+v", got, *v)
	}
}

// Agree fails t unless the fast reader readV agrees with the reflective
// decoder on data: either it rejects data with an error wrapping
// format.ErrCorrupt, or format.UnmarshalExact accepts data too, into a
// deeply equal value. Use it in fuzz targets.
func Agree[T any](t testing.TB, data []byte, readV func(*format.Reader, *T)) {
	t.Helper()
	AgreeWith(t, data, readV, func(b []byte, v *T) error { return format.UnmarshalExact(b, v) })
}

// AgreeWith is Agree with another reflective decoder: for records whose
// fast reader also reads older versions of the record, which decode
// reflectively into another type.
func AgreeWith[T any](t testing.TB, data []byte, readV func(*format.Reader, *T), decode func([]byte, *T) error) {
	t.Helper()
	var got T
	if err := format.ReadExact(data, &got, readV); err != nil {
		if !errors.Is(err, format.ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
		return
	}
	var want T
	if err := decode(data, &want); err != nil {
		t.Fatalf("fast reader accepted %x, reflective decoder: %v", data, err)
	}
	if !reflect.DeepEqual(&got, &want) {
		t.Fatalf("fast reader read %+v, reflective %+v", got, want)
	}
}

// Check fails t unless fast is the bytes of format.Marshal(v) (when exact)
// or decodes reflectively to v (when not: multi-entry maps), and the fast
// reader readV reads it back as the reflective decoder does.
func Check[T any](t testing.TB, fast []byte, v *T, exact bool, readV func(*format.Reader, *T)) {
	t.Helper()
	if exact {
		Same(t, fast, v)
	} else {
		RoundTrip(t, fast, v)
	}
	var got T
	if err := format.ReadExact(fast, &got, readV); err != nil {
		t.Fatalf("fast reader: %v", err)
	}
	Agree(t, fast, readV)
}
