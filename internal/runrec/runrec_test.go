package runrec

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/format/codectest"
	"github.com/stepwell/stepwell/kvrecord"
)

func randRun(r *rand.Rand, multi bool) *kvrecord.Run {
	run := &kvrecord.Run{
		Version: kvrecord.Version, RunID: codectest.String(r), SubmittedAt: codectest.Int64(r), State: uint8(r.UintN(5)),
		CurrentStep: r.Uint32(), CurrentJob: codectest.String(r), Cancel: r.IntN(2) == 0,
		Headers: codectest.Map(r, multi), Priority: int32(codectest.Int64(r)), MaxAttempts: r.Uint32(),
		Status: uint8(r.UintN(5)), EndedAt: codectest.Int64(r), NotifyQueue: codectest.String(r),
		Retries: r.Uint32(), UpdatedAt: codectest.Int64(r),
		WaitFor: codectest.String(r), WaitDeadline: codectest.Int64(r), WaitTimer: codectest.String(r),
		Paused: r.IntN(2) == 0, Parked: r.IntN(2) == 0, MailSeq: r.Uint64(), Mailbox: r.Uint32(),
		StepTimeout: codectest.Int64(r), StartAt: codectest.Int64(r), RetryMaxAttempts: r.Uint32(),
		RetryInitialBackoff: codectest.Int64(r), RetryMaxBackoff: codectest.Int64(r),
		RetryMultiplier: 1 + r.Float64()*10, RetryJitter: r.Float64(),
		MemoKeys: r.Uint32(), MemoBytes: r.Uint64(), Queue: codectest.String(r),
	}
	if multi || r.IntN(2) == 0 { // a child or a parent (else: shape 5 is written)
		run.Parent, run.ParentStep, run.ChildIndex, run.Depth = codectest.String(r), r.Uint32(), r.Uint32(), r.Uint32()
		run.JoinReported, run.Spawned, run.SpawnStep, run.Pending = r.IntN(2) == 0, r.Uint32(), r.Uint32(), r.Uint32()
	}
	if multi || r.IntN(2) == 0 { // a run with history entries (else: shape 6 or 5)
		run.HistorySeq = max(1, r.Uint64())
	}
	for i := range run.InputHash {
		run.InputHash[i] = byte(r.Uint32())
	}
	return run
}

func randTerminal(r *rand.Rand) *kvrecord.Terminal {
	return &kvrecord.Terminal{Version: kvrecord.Version, RunID: codectest.String(r), Status: uint8(r.UintN(5)),
		Result: codectest.Bytes(r), Error: codectest.String(r), FinalStep: r.Uint32(), EndedAt: codectest.Int64(r),
		Attempt: r.Uint32(), DeadJob: codectest.String(r), Payload: codectest.Bytes(r), Queue: codectest.String(r)}
}

// TestEncodersMatchMarshal holds the encoders to the bytes of
// format.Marshal (kvrecord's tests hold its fast readers to those), field
// counts included.
func TestEncodersMatchMarshal(t *testing.T) {
	r := codectest.New(t)
	for i := range 2000 {
		multi := i%2 == 1
		run := randRun(r, multi)
		switch b := EncodeRun(run); {
		case multi:
			codectest.RoundTrip(t, b, run)
		case run.HistorySeq == 0 && noChildFields(run):
			// Shape 5: format.Marshal's bytes without the zero fields of
			// shape 6 ("" and false one byte each, six uint32 five) and
			// the history's (a zero uint64, one byte), and 33 for the
			// count.
			want, err := format.Marshal(run)
			if err != nil {
				t.Fatal(err)
			}
			want = append([]byte{want[0], 0, runFieldsV5}, want[3:len(want)-41]...)
			if string(b) != string(want) {
				t.Fatalf("EncodeRun(no child fields) = %x, want %x", b, want)
			}
			if got, err := kvrecord.DecodeRun(b); err == nil && !reflect.DeepEqual(got, run) {
				t.Fatalf("shape 5 round trip: %+v, want %+v", got, run)
			}
		case run.HistorySeq == 0:
			// Shape 6: without the history's zero field, 41 for the count.
			want, err := format.Marshal(run)
			if err != nil {
				t.Fatal(err)
			}
			want = append([]byte{want[0], 0, runFieldsV6}, want[3:len(want)-9]...)
			if string(b) != string(want) {
				t.Fatalf("EncodeRun(no history) = %x, want %x", b, want)
			}
			if got, err := kvrecord.DecodeRun(b); err == nil && !reflect.DeepEqual(got, run) {
				t.Fatalf("shape 6 round trip: %+v, want %+v", got, run)
			}
		default:
			codectest.Same(t, b, run)
		}
		term := randTerminal(r)
		codectest.Same(t, EncodeTerminal(term), term)
	}
}

// TestRoundTrip: what the encoders write, kvrecord decodes, for records
// that it accepts (valid states and statuses).
func TestRoundTrip(t *testing.T) {
	r := &kvrecord.Run{RunID: "r1", SubmittedAt: 5, InputHash: HashInput([]byte("in")), State: kvrecord.StateActive,
		CurrentStep: 2, CurrentJob: "01J", Headers: map[string]string{"a": "b"}, Priority: 3, MaxAttempts: 4}
	got, err := kvrecord.DecodeRun(EncodeRun(r))
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("run round trip: %+v, %v", got, err)
	}
	term := &kvrecord.Terminal{RunID: "r1", Status: 1, Result: []byte("ok"), FinalStep: 2, EndedAt: 9}
	gotT, err := kvrecord.DecodeTerminal(EncodeTerminal(term))
	if err != nil || !reflect.DeepEqual(gotT, term) {
		t.Fatalf("terminal round trip: %+v, %v", gotT, err)
	}
}

func TestSubmittedKey(t *testing.T) {
	for _, ns := range []int64{0, 1, 1_700_000_000_000_000_000, math.MaxInt64} {
		at, id, err := ParseSubmittedKey(SubmittedKey(ns, "r-1"))
		if err != nil || at != ns || id != "r-1" {
			t.Fatalf("ParseSubmittedKey(SubmittedKey(%d)) = %d %q %v", ns, at, id, err)
		}
	}
	// Newer runs sort first.
	if older, newer := SubmittedKey(100, "b"), SubmittedKey(200, "a"); string(newer) >= string(older) {
		t.Fatalf("SubmittedKey(200) %q does not sort before SubmittedKey(100) %q", newer, older)
	}
	for _, k := range []string{"workflow/submitted/99999999999999999999/x", "workflow/submitted/12x", "workflow/runs/x"} {
		if _, _, err := ParseSubmittedKey([]byte(k)); !errors.Is(err, kvrecord.ErrCorrupt) {
			t.Errorf("ParseSubmittedKey(%q): %v", k, err)
		}
	}
}

// TestParked: the parked step round-trips, matches format.Marshal, and
// garbage is ErrCorrupt.
func TestParked(t *testing.T) {
	p := &Parked{RunID: "r1", Step: 3, Payload: []byte("p"), DueAt: 7, Signal: "approve", TimedOut: true}
	b := EncodeParked(p)
	want, err := format.Marshal(p)
	if err != nil || string(want) != string(b) {
		t.Fatalf("EncodeParked = %x, format.Marshal = %x (%v)", b, want, err)
	}
	got, err := DecodeParked(b)
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("DecodeParked = %+v, %v", got, err)
	}
	for _, g := range [][]byte{nil, {0x90}, []byte("x"), b[:4]} {
		if _, err := DecodeParked(g); !errors.Is(err, kvrecord.ErrCorrupt) {
			t.Errorf("DecodeParked(%x) = %v", g, err)
		}
	}
	if k := string(MailboxKey("r", "n", 2)); k != "workflow/mailbox/r/n/00000000000000000002" {
		t.Errorf("MailboxKey = %q", k)
	}
}

func TestInternalQueues(t *testing.T) {
	if got := NoticesQueue("steps"); got != "steps.dead" {
		t.Errorf("NoticesQueue = %q: the name is on-bucket state and must not change", got)
	}
	if got := TimersQueue("steps"); got != "steps.timers" {
		t.Errorf("TimersQueue = %q: the name is on-bucket state and must not change", got)
	}
	names := []string{"emails", "steps", "steps.dead", "steps.timers", "orphan.dead"}
	for _, c := range []struct {
		name string
		want bool
	}{
		{"steps.dead", true},
		{"steps.timers", true},
		{"steps", false},
		{"emails", false},
		{"orphan.dead", false}, // no queue "orphan": a user's queue
	} {
		if got := IsInternalQueue(c.name, names); got != c.want {
			t.Errorf("IsInternalQueue(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}
