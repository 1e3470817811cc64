package format_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/format/codectest"
	"github.com/tinylib/msgp/msgp"
)

// msg is a field-numbered struct of every kind of field FieldWriter
// writes.
type msg struct {
	U   uint64
	I   int64
	B   bool
	Bin []byte
	S   string
	M   map[string]string
	SS  []string
	Sub *msg
}

func (m *msg) append(b []byte) []byte {
	w := format.BeginFields(b)
	w.Uint(1, m.U)
	w.Int(2, m.I)
	w.Bool(3, m.B)
	w.Bytes(4, m.Bin)
	w.String(5, m.S)
	w.StringMap(6, m.M)
	w.Strings(7, m.SS)
	if m.Sub != nil {
		w.Key(8)
		w.B = m.Sub.append(w.B)
	}
	return w.End()
}

func (m *msg) read(r *format.Reader) {
	r.Numbered("msg", func(f uint64) {
		switch f {
		case 1:
			m.U = r.Uint64()
		case 2:
			m.I = r.Int64()
		case 3:
			m.B = r.Bool()
		case 4:
			m.Bin = r.Bin()
		case 5:
			m.S = r.String()
		case 6:
			m.M = r.StringMap()
		case 7:
			n, ss := format.List[string](r)
			for i := 0; i < n && r.Err() == nil; i++ {
				ss = append(ss, r.String())
			}
			m.SS = ss
		case 8:
			m.Sub = new(msg)
			m.Sub.read(r)
		default:
			r.Skip()
		}
	})
}

// TestFieldsRoundTrip: what a FieldWriter writes, Numbered reads back,
// nil kept apart from empty, with byte fields aliasing the input (capped)
// or copied.
func TestFieldsRoundTrip(t *testing.T) {
	r := codectest.New(t)
	for range 2000 {
		m := &msg{U: codectest.Uint64(r), I: codectest.Int64(r), B: r.IntN(2) == 0, Bin: codectest.Bytes(r),
			S: codectest.String(r), M: codectest.Map(r, true)}
		if r.IntN(2) == 0 {
			m.SS = []string{}
			for range r.IntN(3) {
				m.SS = append(m.SS, codectest.String(r))
			}
		}
		if r.IntN(2) == 0 {
			m.Sub = &msg{S: codectest.String(r), Bin: []byte{}}
		}
		data := m.append(nil)
		for _, copying := range []bool{false, true} {
			rd := format.NewReader(data)
			if copying {
				rd = format.NewCopyingReader(data)
			}
			var got msg
			got.read(&rd)
			if err := rd.Finish(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, m) {
				t.Fatalf("got %#v\nwant %#v", &got, m)
			}
			if len(got.Bin) > 0 {
				if !copying && cap(got.Bin) != len(got.Bin) {
					t.Fatalf("Bin not capped: len %d cap %d", len(got.Bin), cap(got.Bin))
				}
				p, lo, hi := uintptr(unsafe.Pointer(&got.Bin[0])), uintptr(unsafe.Pointer(&data[0])), uintptr(unsafe.Pointer(&data[len(data)-1]))
				if shared := lo <= p && p <= hi; shared == copying {
					t.Fatalf("copying %v: Bin shares the input: %v", copying, shared)
				}
			}
		}
	}
	// The zero value is an empty map.
	if got := (&msg{}).append(nil); !bytes.Equal(got, []byte{0xde, 0, 0}) {
		t.Fatalf("zero: % x", got)
	}
}

// TestFieldsSkipUnknown: numbers a reader does not know are skipped, in
// any order, whatever their values.
func TestFieldsSkipUnknown(t *testing.T) {
	b := msgp.AppendMapHeader(nil, 4)
	b = msgp.AppendUint(b, 100)
	b, _ = msgp.AppendIntf(b, map[string]any{"x": []any{1, "y"}})
	b = msgp.AppendUint(b, 5)
	b = msgp.AppendString(b, "s")
	b = msgp.AppendUint(b, 101)
	b = msgp.AppendNil(b)
	b = msgp.AppendUint(b, 1)
	b = msgp.AppendUint(b, 7)
	rd := format.NewReader(b)
	var got msg
	got.read(&rd)
	if err := rd.Finish(); err != nil || !reflect.DeepEqual(got, msg{U: 7, S: "s"}) {
		t.Fatalf("got %#v, %v", got, err)
	}
}

// TestFieldsRejectOverlong: a header that counts more entries than the
// input holds is an error, named by the struct, before any allocation.
func TestFieldsRejectOverlong(t *testing.T) {
	for name, b := range map[string][]byte{
		"map":    {0xdf, 0x7f, 0xff, 0xff, 0xff},
		"array":  append(msgp.AppendUint(msgp.AppendMapHeader(nil, 1), 7), 0xdd, 0xff, 0xff, 0xff, 0xff),
		"header": append(msgp.AppendUint(msgp.AppendMapHeader(nil, 1), 6), 0xdf, 0x7f, 0xff, 0xff, 0xff),
		"short":  msgp.AppendMapHeader(nil, 1),
	} {
		rd := format.NewReader(b)
		var got msg
		got.read(&rd)
		if err := rd.Err(); err == nil || !strings.Contains(err.Error(), "msg") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzFields: Numbered reads any input to a value or an error, never a
// panic; a value read writes back to bytes that read to the same value.
func FuzzFields(f *testing.F) {
	f.Add((&msg{U: 1, I: -2, B: true, Bin: []byte("b"), S: "s", M: map[string]string{"k": "v"}, SS: []string{"a"},
		Sub: &msg{Bin: []byte{}}}).append(nil))
	f.Add([]byte{0xc0})
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := format.NewReader(data)
		var got msg
		got.read(&rd)
		if rd.Finish() != nil {
			return
		}
		again := got.append(nil)
		rd = format.NewReader(again)
		var back msg
		back.read(&rd)
		if err := rd.Finish(); err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("read %#v, wrote and read again %#v (%v)", got, back, err)
		}
	})
}
