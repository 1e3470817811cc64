package kvrecord

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stepwell/stepwell/internal/format/codectest"
)

func sampleRun() *Run {
	return &Run{RunID: "r1", SubmittedAt: 5, InputHash: HashInput([]byte("in")), State: StateActive,
		CurrentStep: 2, CurrentJob: "01J", Headers: map[string]string{"a": "b"}, Priority: 3, MaxAttempts: 4}
}

func TestRoundTrip(t *testing.T) {
	r := sampleRun()
	got, err := DecodeRun(EncodeRun(r))
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("run round trip: %+v, %v", got, err)
	}
	term := &Terminal{RunID: "r1", Status: 1, Result: []byte("ok"), FinalStep: 2, EndedAt: 9}
	gotT, err := DecodeTerminal(EncodeTerminal(term))
	if err != nil || !reflect.DeepEqual(gotT, term) {
		t.Fatalf("terminal round trip: %+v, %v", gotT, err)
	}
	at, id, err := ParseTerminalKey(TerminalKey(123, "run/x"))
	if err != nil || at != 123 || id != "run/x" {
		t.Fatalf("ParseTerminalKey = %d %q %v", at, id, err)
	}
}

func TestGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0x90}, {0xc1}, []byte("hello"), EncodeRun(sampleRun())[:5]} {
		if _, err := DecodeRun(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeRun(%x) = %v", b, err)
		}
		if _, err := DecodeTerminal(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeTerminal(%x) = %v", b, err)
		}
	}
	if _, _, err := ParseTerminalKey([]byte("workflow/terminal/12x")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ParseTerminalKey: %v", err)
	}
}

func FuzzDecodeRun(f *testing.F) {
	f.Add(EncodeRun(sampleRun()))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRun(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
			return
		}
		if _, err := DecodeRun(EncodeRun(r)); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
	})
}

func FuzzDecodeTerminal(f *testing.F) {
	f.Add(EncodeTerminal(&Terminal{RunID: "r", Status: 2, Error: "x"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := DecodeTerminal(b); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
	})
}

func randRun(r *rand.Rand, multi bool) *Run {
	run := &Run{
		Version: Version, RunID: codectest.String(r), SubmittedAt: codectest.Int64(r), State: uint8(r.UintN(5)),
		CurrentStep: r.Uint32(), CurrentJob: codectest.String(r), Cancel: r.IntN(2) == 0,
		Headers: codectest.Map(r, multi), Priority: int32(codectest.Int64(r)), MaxAttempts: r.Uint32(),
		Status: uint8(r.UintN(5)), EndedAt: codectest.Int64(r), NotifyQueue: codectest.String(r),
	}
	for i := range run.InputHash {
		run.InputHash[i] = byte(r.Uint32())
	}
	return run
}

func randTerminal(r *rand.Rand) *Terminal {
	return &Terminal{Version: Version, RunID: codectest.String(r), Status: uint8(r.UintN(5)),
		Result: codectest.Bytes(r), Error: codectest.String(r), FinalStep: r.Uint32(), EndedAt: codectest.Int64(r)}
}

// TestCodecsMatchMarshal holds the record codecs to the bytes of
// format.Marshal and to the reflective decoder.
func TestCodecsMatchMarshal(t *testing.T) {
	r := codectest.New(t)
	for i := range 2000 {
		multi := i%2 == 1
		run := randRun(r, multi)
		codectest.Check(t, EncodeRun(run), run, !multi, readRun)
		term := randTerminal(r)
		codectest.Check(t, EncodeTerminal(term), term, true, readTerminal)
	}
}

// FuzzFastReaders: the fast readers agree with the reflective decoder.
func FuzzFastReaders(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 3 {
		f.Add(EncodeRun(randRun(r, false)))
		f.Add(EncodeTerminal(randTerminal(r)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		codectest.Agree(t, b, readRun)
		codectest.Agree(t, b, readTerminal)
	})
}
