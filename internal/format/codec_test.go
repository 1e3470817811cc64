package format_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/format/codectest"
)

// The fast codecs must write exactly the bytes of format.Marshal and read
// them back; see codec.go.

// TestAppendPrimitives checks each append function against Marshal of a
// one-field struct of its type.
func TestAppendPrimitives(t *testing.T) {
	r := codectest.New(t)
	one := func([]byte) []byte { return format.AppendArrayLen(nil, 1) }
	for range 2000 {
		s := codectest.String(r)
		codectest.Same(t, format.AppendString(one(nil), s), &struct{ V string }{s})
		bs := codectest.Bytes(r)
		codectest.Same(t, format.AppendBytes(one(nil), bs), &struct{ V []byte }{bs})
		m := codectest.Map(r, false)
		codectest.Same(t, format.AppendStringMap(one(nil), m), &struct{ V map[string]string }{m})
		mm := codectest.Map(r, true)
		codectest.RoundTrip(t, format.AppendStringMap(one(nil), mm), &struct{ V map[string]string }{mm})
		i := codectest.Int64(r)
		codectest.Same(t, format.AppendInt64(one(nil), i), &struct{ V int64 }{i})
		codectest.Same(t, format.AppendInt32(one(nil), int32(i)), &struct{ V int32 }{int32(i)})
		u := codectest.Uint64(r)
		codectest.Same(t, format.AppendUint64(one(nil), u), &struct{ V uint64 }{u})
		codectest.Same(t, format.AppendUint32(one(nil), uint32(u)), &struct{ V uint32 }{uint32(u)})
		codectest.Same(t, format.AppendUint8(one(nil), uint8(u)), &struct{ V uint8 }{uint8(u)})
		codectest.Same(t, format.AppendBool(one(nil), u&1 == 1), &struct{ V bool }{u&1 == 1})
		n := r.IntN(3)
		var sl []int64
		if n > 0 {
			sl = make([]int64, n-1)
		}
		b := one(nil)
		if sl == nil {
			b = format.AppendNil(b)
		} else {
			b = format.AppendArrayLen(b, len(sl))
			for _, v := range sl {
				b = format.AppendInt64(b, v)
			}
		}
		codectest.Same(t, b, &struct{ V []int64 }{sl})
	}
}

func randBatch(r *rand.Rand) *format.Batch {
	b := &format.Batch{
		Seq: codectest.Uint64(r), Writer: codectest.String(r), Epoch: codectest.Uint64(r),
		UnixNano: codectest.Int64(r), Marker: r.IntN(2) == 0, Txns: r.Uint32(),
	}
	if n := r.IntN(6); n > 0 {
		b.Muts = make([]format.Mutation, n-1)
		for i := range b.Muts {
			b.Muts[i] = format.Mutation{Op: uint8(r.UintN(4)), Key: codectest.String(r), Value: codectest.Bytes(r)}
		}
	}
	return b
}

func randEntries(r *rand.Rand) []format.Entry {
	n := r.IntN(6)
	if n == 0 {
		return nil
	}
	es := make([]format.Entry, n-1)
	for i := range es {
		es[i] = format.Entry{Key: codectest.String(r), Value: codectest.Bytes(r)}
	}
	return es
}

func TestFastCodecsMatchMarshal(t *testing.T) {
	r := codectest.New(t)
	for range 1000 {
		b := randBatch(r)
		codectest.Check(t, format.AppendBatchBody(nil, b), b, true, format.ReadBatchBody)
		m := &format.SnapshotMeta{Seq: codectest.Uint64(r), Writer: codectest.String(r), Epoch: codectest.Uint64(r), UnixNano: codectest.Int64(r)}
		codectest.Check(t, format.AppendMetaBody(nil, m), m, true, format.ReadMetaBody)
		es := randEntries(r)
		codectest.Check(t, format.AppendEntriesBody(nil, es), &es, true, format.ReadEntriesBody)
		e := &format.SnapshotEnd{End: r.IntN(2) == 0, Count: codectest.Uint64(r)}
		codectest.Check(t, format.AppendEndBody(nil, e), e, true, format.ReadEndBody)
	}
}

// TestEncodeBatchFraming checks that EncodeBatchUncompressed frames the
// fast body as EncodeFramed frames Marshal's, and that EncodeBatch's
// compressed batches decode to the same.
func TestEncodeBatchFraming(t *testing.T) {
	r := codectest.New(t)
	for range 200 {
		b := randBatch(r)
		got, err := format.EncodeBatchUncompressed(b)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := format.Marshal(b)
		if want := format.EncodeFramed(format.KindWAL, body); !bytes.Equal(got, want) {
			t.Fatalf("EncodeBatchUncompressed(%+v):\n%x\nwant\n%x", b, got, want)
		}
		z, err := format.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(z) > len(got) {
			t.Fatalf("EncodeBatch: %d bytes, more than the %d uncompressed", len(z), len(got))
		}
		d1, err1 := format.DecodeBatch(z)
		d2, err2 := format.DecodeBatch(got)
		if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(d1, d2) { // random ops may be invalid: both fail
			t.Fatalf("EncodeBatch decodes to %+v (%v), uncompressed to %+v (%v)", d1, err1, d2, err2)
		}
	}
}

// TestFastReadersFallBack checks that bodies the fast readers do not take
// (here: nil where a string belongs, which the reflective decoder reads as
// "") still decode through the reflective path.
func TestFastReadersFallBack(t *testing.T) {
	type looseBatch struct {
		Seq      uint64
		Writer   any
		Epoch    uint64
		UnixNano int64
		Marker   bool
		Txns     uint32
		Muts     []format.Mutation
	}
	body, _ := format.Marshal(&looseBatch{Seq: 7, Txns: 2})
	var fast format.Batch
	if err := format.ReadExact(body, &fast, format.ReadBatchBody); err == nil {
		t.Fatal("fast reader took a nil Writer")
	}
	b, err := format.DecodeBatch(format.EncodeFramed(format.KindWAL, body))
	if err != nil || b.Seq != 7 || b.Writer != "" || b.Txns != 2 || b.Muts != nil {
		t.Fatalf("DecodeBatch = %+v, %v", b, err)
	}
}

// FuzzFastReaders: whatever a fast reader accepts, the reflective decoder
// accepts with the same value; what it rejects wraps ErrCorrupt.
func FuzzFastReaders(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 4 {
		f.Add(format.AppendBatchBody(nil, randBatch(r)))
		f.Add(format.AppendEntriesBody(nil, randEntries(r)))
	}
	f.Add(format.AppendMetaBody(nil, &format.SnapshotMeta{Seq: 1, Writer: "w"}))
	f.Add(format.AppendEndBody(nil, &format.SnapshotEnd{End: true, Count: 3}))
	f.Fuzz(func(t *testing.T, data []byte) {
		codectest.Agree(t, data, format.ReadBatchBody)
		codectest.Agree(t, data, format.ReadMetaBody)
		codectest.Agree(t, data, format.ReadEntriesBody)
		codectest.Agree(t, data, format.ReadEndBody)
	})
}

func TestStringMapSizeBounds(t *testing.T) {
	long := strings.Repeat("x", 70000) // a str32 header
	for _, m := range []map[string]string{nil, {}, {"a": ""}, {"k": long, long: "v", "": ""}} {
		if n, max := len(format.AppendStringMap(nil, m)), format.StringMapSize(m); n > max {
			t.Errorf("AppendStringMap wrote %d bytes, StringMapSize said at most %d", n, max)
		}
	}
}

// Integers are written in their shortest form, as Marshal's compact
// integers, at every width's edges; the fixed-width forms that records
// written before carry still read back.
func TestIntegersShortestAndOldFixedForms(t *testing.T) {
	one := format.AppendArrayLen(nil, 1)
	for _, c := range []struct {
		v    int64
		size int
	}{
		{0, 1}, {127, 1}, {128, 2}, {255, 2}, {256, 3}, {65535, 3}, {65536, 5},
		{math.MaxUint32, 5}, {math.MaxUint32 + 1, 9}, {math.MaxInt64, 9},
		{-1, 1}, {-32, 1}, {-33, 2}, {-128, 2}, {-129, 3}, {-32768, 3},
		{-32769, 5}, {math.MinInt32, 5}, {math.MinInt32 - 1, 9}, {math.MinInt64, 9},
	} {
		b := format.AppendInt64(nil, c.v)
		if len(b) != c.size {
			t.Errorf("AppendInt64(%d) = %x, want %d bytes", c.v, b, c.size)
		}
		codectest.Same(t, append(one, b...), &struct{ V int64 }{c.v})
		// The fixed 9-byte form, as written before.
		old := binary.BigEndian.AppendUint64([]byte{0xd3}, uint64(c.v))
		r := format.NewReader(old)
		if got := r.Int64(); got != c.v || r.Finish() != nil {
			t.Errorf("Int64 of %x = %d (%v), want %d", old, got, r.Finish(), c.v)
		}
		if c.v >= 0 {
			u := uint64(c.v)
			if b := format.AppendUint64(nil, u); len(b) != c.size {
				t.Errorf("AppendUint64(%d) = %x, want %d bytes", u, b, c.size)
			}
			old := binary.BigEndian.AppendUint64([]byte{0xcf}, u)
			r := format.NewReader(old)
			if got := r.Uint64(); got != u || r.Finish() != nil {
				t.Errorf("Uint64 of %x = %d (%v), want %d", old, got, r.Finish(), u)
			}
		}
	}
	for _, old := range [][]byte{{0xce, 0, 0, 0, 7}, {0xcc, 7}, {0xd2, 0, 0, 0, 7}} {
		r := format.NewReader(old)
		if got := r.Uint32(); got != 7 || r.Finish() != nil {
			t.Errorf("Uint32 of old form %x = %d (%v), want 7", old, got, r.Finish())
		}
	}
}
