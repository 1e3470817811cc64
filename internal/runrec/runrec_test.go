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
	if multi || r.IntN(2) == 0 { // a run with a deadline (else: no deadline fields are written)
		run.Deadline, run.DeadlineJob = codectest.Int64(r), "j"+codectest.String(r)
	}
	if multi || r.IntN(2) == 0 { // a run with history entries (else: no history field is written)
		run.HistorySeq = max(1, r.Uint64())
	}
	if multi || r.IntN(2) == 0 { // a run with a concurrency key (else: no concurrency fields are written)
		run.ConcKey, run.ConcLimit, run.ConcLine = "k"+codectest.String(r), r.Uint32(), r.Uint64()
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
		b := EncodeRun(run)
		// RunKV: the same key and record (the bytes of its header map
		// may come in another order).
		if k, v := RunKV(run); string(k) != string(kvrecord.RunKey(run.RunID)) || len(v) != len(b) {
			t.Fatalf("RunKV(run %d): key %q (want %q), %d bytes (want %d)", i, k, kvrecord.RunKey(run.RunID), len(v), len(b))
		} else if got, err := kvrecord.DecodeRun(v); err == nil && !reflect.DeepEqual(got, run) {
			t.Fatalf("RunKV(run %d): decodes to another record", i)
		}
		if multi {
			codectest.RoundTrip(t, b, run)
		} else {
			// format.Marshal's bytes without the trailing groups of
			// fields that are all zero, each cut with its zeros' bytes
			// (a zero of any kind is one byte: "", false, and integers in
			// their shortest form): the concurrency fields (3: 44 fields
			// left), history (1: 43), the deadline (2: 41), shape 6 (8:
			// 33).
			want, err := format.Marshal(run)
			if err != nil {
				t.Fatal(err)
			}
			groups := []struct {
				zero   bool
				bytes  int
				fields byte
			}{
				{noConcFields(run), runFields - runFieldsH, runFieldsH},
				{run.HistorySeq == 0, runFieldsH - runFieldsDL, runFieldsDL},
				{noDeadlineFields(run), runFieldsDL - runFieldsV6, runFieldsV6},
				{noChildFields(run), runFieldsV6 - runFieldsV5, runFieldsV5},
			}
			for _, g := range groups {
				if !g.zero {
					break
				}
				want = append([]byte{want[0], 0, g.fields}, want[3:len(want)-g.bytes]...)
			}
			if string(b) != string(want) {
				t.Fatalf("EncodeRun(%+v) = %x, want %x", run, b, want)
			}
			if got, err := kvrecord.DecodeRun(b); err == nil && !reflect.DeepEqual(got, run) {
				t.Fatalf("round trip: %+v, want %+v", got, run)
			}
		}
		term := randTerminal(r)
		codectest.Same(t, EncodeTerminal(term), term)
		if k, v := TerminalKV(term); string(k) != string(kvrecord.TerminalKey(term.EndedAt, term.RunID)) || string(v) != string(EncodeTerminal(term)) {
			t.Fatalf("TerminalKV(terminal %d) = %q, %d bytes; want %q, %d bytes", i, k, len(v), kvrecord.TerminalKey(term.EndedAt, term.RunID), len(EncodeTerminal(term)))
		}
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

func randSchedule(r *rand.Rand) *Schedule {
	s := &Schedule{Version: kvrecord.Version, Name: codectest.String(r), Every: codectest.Int64(r),
		Cron: codectest.String(r), Location: codectest.String(r), AllowOverlap: r.IntN(2) == 0,
		Queue: codectest.String(r), SpecQueue: codectest.String(r), Input: codectest.Bytes(r),
		Headers: codectest.Map(r, false), MaxAttempts: r.Uint32(), Priority: int32(codectest.Int64(r)),
		StepTimeout: codectest.Int64(r), HasRetry: r.IntN(2) == 0, RetryMaxAttempts: r.Uint32(),
		RetryInitialBackoff: codectest.Int64(r), RetryMaxBackoff: codectest.Int64(r),
		RetryMultiplier: r.Float64() * 10, RetryJitter: r.Float64(), NextAt: codectest.Int64(r),
		NextJob: codectest.String(r), LastRunID: codectest.String(r), LastAt: codectest.Int64(r),
		Skipped: r.Uint64(), UpdatedAt: codectest.Int64(r)}
	if r.IntN(2) == 0 { // with a concurrency key (else: shape 1 is written)
		s.ConcKey, s.ConcLimit = "k"+codectest.String(r), r.Uint32()
	}
	return s
}

// TestScheduleCodec: EncodeSchedule writes format.Marshal's bytes (without
// the concurrency fields when they are zero: shape 1), and DecodeSchedule
// reads them back, a shape 1 record with them zero; anything else is
// ErrCorrupt.
func TestScheduleCodec(t *testing.T) {
	r := codectest.New(t)
	for range 1000 {
		s := randSchedule(r)
		if s.Name == "" {
			s.Name = "n"
		}
		b := EncodeSchedule(s)
		if s.ConcKey != "" {
			codectest.Same(t, b, s)
		} else {
			// format.Marshal's bytes without the concurrency fields,
			// all zero ("" and a zero uint32 one byte each): shape 1, 25
			// fields.
			want, err := format.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			want = append([]byte{want[0], 0, scheduleFieldsV1}, want[3:len(want)-2]...)
			if string(b) != string(want) {
				t.Fatalf("EncodeSchedule(%+v) = %x, want %x", s, b, want)
			}
		}
		got, err := DecodeSchedule(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Headers) == 0 && len(got.Headers) == 0 {
			got.Headers = s.Headers
		}
		if len(s.Input) == 0 && len(got.Input) == 0 {
			got.Input = s.Input
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("round trip: %+v, want %+v", got, s)
		}
		if _, err := DecodeSchedule(b[:len(b)-1]); !errors.Is(err, kvrecord.ErrCorrupt) {
			t.Fatalf("a truncated record: %v, want ErrCorrupt", err)
		}
	}
	if _, err := DecodeSchedule(EncodeSchedule(&Schedule{})); !errors.Is(err, kvrecord.ErrCorrupt) {
		t.Fatalf("a record without a name: %v, want ErrCorrupt", err)
	}
}
