package runrec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/format/codectest"
	"github.com/stepwell/stepwell/kvrecord"
)

// TestHistoryRoundTrip: DecodeHistory reads what EncodeHistory writes,
// zero fields left out, and skips the fields it does not know.
func TestHistoryRoundTrip(t *testing.T) {
	r := codectest.New(t)
	for range 2000 {
		h := &History{Kind: "k" + codectest.String(r), Step: r.Uint32(), Attempt: r.Uint32(),
			Queue: codectest.String(r), Worker: codectest.String(r), Start: codectest.Int64(r), End: codectest.Int64(r),
			Error: codectest.String(r), PayloadSize: codectest.Uint64(r), ResultSize: codectest.Uint64(r),
			Preview: codectest.Bytes(r), Signal: codectest.String(r), Due: codectest.Int64(r), Job: codectest.String(r)}
		if len(h.Preview) == 0 {
			h.Preview = nil // an empty preview is not kept
		}
		b := EncodeHistory(h)
		got, err := DecodeHistory(b)
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Fatalf("DecodeHistory = %+v, %v; want %+v", got, err, h)
		}
		if len(b) > HistorySize(h) {
			t.Fatalf("HistorySize %d < %d", HistorySize(h), len(b))
		}
		seq := codectest.Uint64(r)
		if k, v := HistoryKV(h.Queue, seq, h); string(k) != string(HistoryKey(h.Queue, seq)) || string(v) != string(b) {
			t.Fatalf("HistoryKV = %q, %x; want %q, %x", k, v, HistoryKey(h.Queue, seq), b)
		}
	}
	// A field of a newer version is skipped.
	w := format.BeginFields(nil)
	w.String(hfKind, "continue")
	w.String(99, "from the future")
	w.Uint(hfStep, 7)
	if got, err := DecodeHistory(w.End()); err != nil || got.Kind != "continue" || got.Step != 7 {
		t.Fatalf("DecodeHistory(with an unknown field) = %+v, %v", got, err)
	}
	// The encoding is small: a typical step's entry.
	typical := &History{Kind: "continue", Step: 2, Attempt: 1, Queue: "workflow-steps", Worker: "host-1:12345",
		Start: 1_800_000_000_000_000_000, End: 1_800_000_000_001_000_000, PayloadSize: 64, ResultSize: 64,
		Preview: make([]byte, 64), Job: "01M8DWKSBQ48P6184YJT4VENGR"}
	if n := len(EncodeHistory(typical)); n > 175 {
		t.Errorf("a typical entry takes %d bytes, want at most 175", n)
	}
	for _, bad := range [][]byte{nil, {0xc0}, {0x90}, EncodeHistory(&History{}), EncodeHistory(typical)[:10]} {
		if _, err := DecodeHistory(bad); !errors.Is(err, kvrecord.ErrCorrupt) {
			t.Errorf("DecodeHistory(%x) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestHistoryKey(t *testing.T) {
	for _, seq := range []uint64{1, 999, 1_000_000_000, 1<<63 + 5} {
		k := HistoryKey("r-1", seq)
		got, err := ParseHistorySeq(k, "r-1")
		if err != nil || got != seq {
			t.Fatalf("ParseHistorySeq(%q) = %d, %v", k, got, err)
		}
	}
	if k := string(HistoryKey("r", 7)); k != "workflow/history/r/0000000007" {
		t.Fatalf("HistoryKey = %q", k)
	}
	if a, b := HistoryKey("r", 9), HistoryKey("r", 10); string(a) >= string(b) {
		t.Fatalf("%q does not sort before %q", a, b)
	}
	if _, err := ParseHistorySeq([]byte("workflow/history/r/x"), "r"); !errors.Is(err, kvrecord.ErrCorrupt) {
		t.Fatalf("ParseHistorySeq(garbage) = %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { AppendHistoryKey(make([]byte, 0, 64), "run", 123) }); n > 1 {
		t.Fatalf("AppendHistoryKey allocates %v times", n)
	}
}

func TestHistoryPreview(t *testing.T) {
	text := strings.Repeat("é", 200) // 400 bytes, 2 each: cut at 256
	if p := HistoryPreview([]byte(text)); len(p) != 256 || !utf8.Valid(p) {
		t.Fatalf("preview of text: %d bytes, valid %v", len(p), utf8.Valid(p))
	}
	odd := "x" + text // the rune at 255..256 is split: cut before it
	if p := HistoryPreview([]byte(odd)); len(p) != 255 || !utf8.Valid(p) {
		t.Fatalf("preview of odd text: %d bytes, valid %v", len(p), utf8.Valid(p))
	}
	bin := make([]byte, 1000)
	bin[3] = 0xff
	if p := HistoryPreview(bin); len(p) != HistoryPreviewMax {
		t.Fatalf("preview of binary: %d bytes", len(p))
	}
	if p := HistoryPreview([]byte("short")); string(p) != "short" {
		t.Fatalf("preview of short: %q", p)
	}
}

// FuzzDecodeHistory: garbage never panics, and what decodes encodes back
// to an entry that decodes the same.
func FuzzDecodeHistory(f *testing.F) {
	f.Add(EncodeHistory(&History{Kind: "continue", Step: 1, Attempt: 2, Preview: []byte("p"), Job: "j"}))
	f.Add([]byte{0xde, 0, 1, 1, 0xa1, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHistory(b)
		if err != nil {
			if !errors.Is(err, kvrecord.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if len(h.Preview) == 0 {
			h.Preview = nil
		}
		again, err := DecodeHistory(EncodeHistory(h))
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", h, again, err)
		}
	})
}
