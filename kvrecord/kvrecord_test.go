package kvrecord

import (
	"crypto/sha256"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/format/codectest"
)

// encodeRun and encodeTerminal encode as the runtime's encoders do
// (internal/runrec, whose tests hold them to format.Marshal).
func encodeRun(r *Run) []byte {
	r.Version = Version
	b, err := format.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

func encodeTerminal(t *Terminal) []byte {
	t.Version = Version
	b, err := format.Marshal(t)
	if err != nil {
		panic(err)
	}
	return b
}

func sampleRun() *Run {
	return &Run{RunID: "r1", SubmittedAt: 5, InputHash: sha256.Sum256([]byte("in")), State: StateActive,
		CurrentStep: 2, CurrentJob: "01J", Headers: map[string]string{"a": "b"}, Priority: 3, MaxAttempts: 4}
}

func TestRoundTrip(t *testing.T) {
	r := sampleRun()
	got, err := DecodeRun(encodeRun(r))
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("run round trip: %+v, %v", got, err)
	}
	term := &Terminal{RunID: "r1", Status: 1, Result: []byte("ok"), FinalStep: 2, EndedAt: 9}
	gotT, err := DecodeTerminal(encodeTerminal(term))
	if err != nil || !reflect.DeepEqual(gotT, term) {
		t.Fatalf("terminal round trip: %+v, %v", gotT, err)
	}
	for _, ns := range []int64{0, 123, math.MaxInt64} {
		at, id, err := ParseTerminalKey(TerminalKey(ns, "run/x"))
		if err != nil || at != ns || id != "run/x" {
			t.Fatalf("ParseTerminalKey(TerminalKey(%d)) = %d %q %v", ns, at, id, err)
		}
	}
}

func TestGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0x90}, {0xc1}, []byte("hello"), encodeRun(sampleRun())[:5]} {
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
	if _, _, err := ParseTerminalKey([]byte("workflow/terminal/99999999999999999999/x")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ParseTerminalKey of an out-of-range time: %v", err)
	}
}

func FuzzDecodeRun(f *testing.F) {
	f.Add(encodeRun(sampleRun()))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRun(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
			return
		}
		if _, err := DecodeRun(encodeRun(r)); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
	})
}

func FuzzDecodeTerminal(f *testing.F) {
	f.Add(encodeTerminal(&Terminal{RunID: "r", Status: 2, Error: "x"}))
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
		Retries: r.Uint32(), UpdatedAt: codectest.Int64(r),
		WaitFor: codectest.String(r), WaitDeadline: codectest.Int64(r), WaitTimer: codectest.String(r),
		Paused: r.IntN(2) == 0, Parked: r.IntN(2) == 0, MailSeq: r.Uint64(), Mailbox: r.Uint32(),
		StepTimeout: codectest.Int64(r), StartAt: codectest.Int64(r), RetryMaxAttempts: r.Uint32(),
		RetryInitialBackoff: codectest.Int64(r), RetryMaxBackoff: codectest.Int64(r),
		RetryMultiplier: 1 + r.Float64()*10, RetryJitter: r.Float64(),
		MemoKeys: r.Uint32(), MemoBytes: r.Uint64(), Queue: codectest.String(r),
		Parent: codectest.String(r), ParentStep: r.Uint32(), ChildIndex: r.Uint32(), Depth: r.Uint32(),
		JoinReported: r.UintN(2) == 1, Spawned: r.Uint32(), SpawnStep: r.Uint32(), Pending: r.Uint32(),
		Deadline: codectest.Int64(r), DeadlineJob: codectest.String(r),
		HistorySeq: r.Uint64(),
		ConcKey:    codectest.String(r), ConcLimit: r.Uint32(), ConcLine: r.Uint64(),
	}
	for i := range run.InputHash {
		run.InputHash[i] = byte(r.Uint32())
	}
	return run
}

// randCurrentRun returns a random active run of the current version.
func randCurrentRun(r *rand.Rand) *Run {
	run := randRun(r, false)
	run.State, run.Version = StateActive, Version
	if run.RunID == "" {
		run.RunID = "r"
	}
	return run
}

// checkOldShape holds the run decoders to records of an older shape:
// recOf(run) written as a record decodes as run with zero applied, on
// both paths, for 500 random runs; and records of each of corrupt field
// counts are ErrCorrupt.
func checkOldShape(t *testing.T, shape string, zero func(*Run), recOf func(*Run) any, corrupt ...int) {
	t.Helper()
	r := codectest.New(t)
	for range 500 {
		run := randCurrentRun(r)
		old := *run
		zero(&old)
		checkOldRun(t, shape, recOf(run), &old)
	}
	for _, n := range corrupt {
		bad, _ := format.Marshal(make([]int, n))
		if _, err := DecodeRun(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeRun(%d fields) = %v, want ErrCorrupt", n, err)
		}
	}
}

func runV2Of(r *Run) *runV2 {
	return &runV2{runV1: *runV1Of(r), Retries: r.Retries, UpdatedAt: r.UpdatedAt}
}

// TestDecodeShape2 holds the run decoders to records written before the
// signal, pause and RunSpec fields (shape 3) were appended: they decode
// with those fields zero on both paths. Fails if a decoder insists on 30
// fields.
func TestDecodeShape2(t *testing.T) {
	checkOldShape(t, "shape 2", zeroShape3, func(run *Run) any { return runV2Of(run) }, 15, 17, 22, 24)
}

func randTerminal(r *rand.Rand) *Terminal {
	return &Terminal{Version: Version, RunID: codectest.String(r), Status: uint8(r.UintN(5)),
		Result: codectest.Bytes(r), Error: codectest.String(r), FinalStep: r.Uint32(), EndedAt: codectest.Int64(r),
		Attempt: r.Uint32(), DeadJob: codectest.String(r), Payload: codectest.Bytes(r), Queue: codectest.String(r)}
}

// TestCodecsMatchMarshal holds the fast readers to the reflective decoder
// on the bytes of format.Marshal (the runtime's encoders write those:
// internal/runrec's tests).
func TestCodecsMatchMarshal(t *testing.T) {
	r := codectest.New(t)
	for i := range 2000 {
		multi := i%2 == 1
		run := randRun(r, multi)
		codectest.Check(t, encodeRun(run), run, !multi, readRun)
		term := randTerminal(r)
		codectest.Check(t, encodeTerminal(term), term, true, readTerminal)
	}
}

// FuzzFastReaders: the fast readers agree with the reflective decoder.
func FuzzFastReaders(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 3 {
		f.Add(encodeRun(randRun(r, false)))
		f.Add(encodeTerminal(randTerminal(r)))
	}
	for range 3 {
		run := randRun(r, false)
		v1, _ := format.Marshal(runV1Of(run))
		f.Add(v1)
		v2, _ := format.Marshal(runV2Of(run))
		f.Add(v2)
		v3, _ := format.Marshal(runV3Of(run))
		f.Add(v3)
		v4, _ := format.Marshal(runV4Of(run))
		f.Add(v4)
		term := randTerminal(r)
		tv1, _ := format.Marshal(terminalV1Of(term))
		f.Add(tv1)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		codectest.AgreeWith(t, b, readRun, unmarshalRun)
		codectest.AgreeWith(t, b, readTerminal, unmarshalTerminal)
	})
}

// zeroShape3 zeroes the fields shapes 3 and 4 appended: what a record of
// an older shape decodes with.
func zeroShape3(r *Run) {
	zeroShape4(r)
	r.WaitFor, r.WaitDeadline, r.WaitTimer, r.Paused, r.Parked, r.MailSeq, r.Mailbox = "", 0, "", false, false, 0, 0
	r.StepTimeout, r.StartAt, r.RetryMaxAttempts = 0, 0, 0
	r.RetryInitialBackoff, r.RetryMaxBackoff, r.RetryMultiplier, r.RetryJitter = 0, 0, 0, 0
}

// checkOldRun encodes rec, a run record of an older shape, and checks that
// the fast and the reflective decoder both read it as want.
func checkOldRun(t *testing.T, shape string, rec any, want *Run) {
	t.Helper()
	b, err := format.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRun(b)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeRun(%s) = %+v, %v; want %+v", shape, got, err, want)
	}
	var slow Run
	if err := unmarshalRun(b, &slow); err != nil || !reflect.DeepEqual(&slow, want) {
		t.Fatalf("unmarshalRun(%s) = %+v, %v", shape, slow, err)
	}
	codectest.AgreeWith(t, b, readRun, unmarshalRun)
}

// zeroShape4 zeroes the fields shapes 4 and 5 appended.
func zeroShape4(r *Run) { r.MemoKeys, r.MemoBytes = 0, 0; zeroShape5(r) }

// zeroShape5 zeroes the fields shapes 5 and 6 appended.
func zeroShape5(r *Run) { r.Queue = ""; zeroShape6(r) }

// zeroShape6 zeroes the fields shape 6 and the run deadlines appended.
func zeroShape6(r *Run) {
	r.Parent, r.ParentStep, r.ChildIndex, r.Depth, r.JoinReported = "", 0, 0, 0, false
	r.Spawned, r.SpawnStep, r.Pending = 0, 0, 0
	zeroDeadline(r)
}

// zeroDeadline zeroes the run deadline fields, and the newer ones.
func zeroDeadline(r *Run) { r.Deadline, r.DeadlineJob = 0, ""; zeroHistory(r) }

// zeroHistory zeroes the field run history appended, and the newer ones.
func zeroHistory(r *Run) { r.HistorySeq = 0; zeroConc(r) }

// zeroConc zeroes the per-key concurrency fields.
func zeroConc(r *Run) { r.ConcKey, r.ConcLimit, r.ConcLine = "", 0, 0 }

// dlOf returns run as a record with the deadline fields and no newer ones.
func dlOf(run *Run) runDL {
	return runDL{runV6: runV6{runV5: runV5{runV4: *runV4Of(run), Queue: run.Queue},
		Parent: run.Parent, ParentStep: run.ParentStep, ChildIndex: run.ChildIndex, Depth: run.Depth,
		JoinReported: run.JoinReported, Spawned: run.Spawned, SpawnStep: run.SpawnStep, Pending: run.Pending},
		Deadline: run.Deadline, DeadlineJob: run.DeadlineJob}
}

// TestDecodeHistoryShape holds the run decoders to records written
// before the per-key concurrency fields were appended (44 fields): they
// decode with no key on both paths. Fails if a decoder insists on 47.
func TestDecodeHistoryShape(t *testing.T) {
	checkOldShape(t, "44 fields", zeroConc, func(run *Run) any {
		return &runH{runDL: dlOf(run), HistorySeq: run.HistorySeq}
	}, 45, 46)
}

// TestDecodeWithoutHistory holds the run decoders to records written
// before run history was appended (43 fields: deadlines, no history):
// they decode with HistorySeq 0 on both paths. Fails if a decoder
// insists on 44 fields.
func TestDecodeWithoutHistory(t *testing.T) {
	checkOldShape(t, "deadlines, no history", zeroHistory, func(run *Run) any {
		dl := dlOf(run)
		return &dl
	})
}

// TestDecodeShape6 holds the run decoders to records written before run
// deadlines were appended (41 fields): they decode with no deadline on
// both paths. Fails if a decoder insists on 43 fields.
func TestDecodeShape6(t *testing.T) {
	checkOldShape(t, "shape 6", zeroDeadline, func(run *Run) any {
		dl := dlOf(run)
		return &dl.runV6
	}, 42)
}

// TestDecodeShape5 holds the run decoders to records written before child
// runs (shape 6) were appended: they decode with no parent and no
// children on both paths. Fails if a decoder insists on 41 fields.
func TestDecodeShape5(t *testing.T) {
	checkOldShape(t, "shape 5", zeroShape6, func(run *Run) any {
		return &runV5{runV4: *runV4Of(run), Queue: run.Queue}
	}, 35)
}

func runV4Of(r *Run) *runV4 {
	return &runV4{runV3: *runV3Of(r), MemoKeys: r.MemoKeys, MemoBytes: r.MemoBytes}
}

// TestDecodeShape4 holds the run decoders to records written before the
// step queue (shape 5) was appended: they decode with Queue "" on both
// paths. Fails if a decoder insists on 33 fields.
func TestDecodeShape4(t *testing.T) {
	checkOldShape(t, "shape 4", zeroShape5, func(run *Run) any { return runV4Of(run) }, 34)
}

func runV3Of(r *Run) *runV3 {
	return &runV3{runV2: *runV2Of(r), WaitFor: r.WaitFor, WaitDeadline: r.WaitDeadline, WaitTimer: r.WaitTimer,
		Paused: r.Paused, Parked: r.Parked, MailSeq: r.MailSeq, Mailbox: r.Mailbox,
		StepTimeout: r.StepTimeout, StartAt: r.StartAt, RetryMaxAttempts: r.RetryMaxAttempts,
		RetryInitialBackoff: r.RetryInitialBackoff, RetryMaxBackoff: r.RetryMaxBackoff,
		RetryMultiplier: r.RetryMultiplier, RetryJitter: r.RetryJitter}
}

// TestDecodeShape3 holds the run decoders to records written before the
// memory counts (shape 4) were appended: they decode with MemoKeys and
// MemoBytes zero on both paths. Fails if a decoder insists on 32 fields.
func TestDecodeShape3(t *testing.T) {
	checkOldShape(t, "shape 3", zeroShape4, func(run *Run) any { return runV3Of(run) }, 31, 34)
}

func runV1Of(r *Run) *runV1 {
	return &runV1{Version: r.Version, RunID: r.RunID, SubmittedAt: r.SubmittedAt, InputHash: r.InputHash,
		State: r.State, CurrentStep: r.CurrentStep, CurrentJob: r.CurrentJob, Cancel: r.Cancel,
		Headers: r.Headers, Priority: r.Priority, MaxAttempts: r.MaxAttempts, Status: r.Status,
		EndedAt: r.EndedAt, NotifyQueue: r.NotifyQueue}
}

func terminalV1Of(t *Terminal) *terminalV1 {
	return &terminalV1{Version: t.Version, RunID: t.RunID, Status: t.Status, Result: t.Result,
		Error: t.Error, FinalStep: t.FinalStep, EndedAt: t.EndedAt}
}

// TestDecodeShape1 holds the decoders to records written before Retries,
// UpdatedAt (run) and Attempt, DeadJob, Payload (terminal) were appended:
// they decode, with those fields zero, on the fast and the reflective path
// alike. Fails if a decoder insists on the current field count.
func TestDecodeShape1(t *testing.T) {
	r := codectest.New(t)
	for range 500 {
		run := randCurrentRun(r)
		old := *run
		old.Retries, old.UpdatedAt = 0, 0
		zeroShape3(&old)
		checkOldRun(t, "shape 1", runV1Of(run), &old)

		term := randTerminal(r)
		term.Status, term.Version = 2, Version
		oldT := *term
		oldT.Attempt, oldT.DeadJob, oldT.Payload, oldT.Queue = 0, "", nil, ""
		tb, err := format.Marshal(terminalV1Of(term))
		if err != nil {
			t.Fatal(err)
		}
		gotT, err := DecodeTerminal(tb)
		if err != nil || !reflect.DeepEqual(gotT, &oldT) {
			t.Fatalf("DecodeTerminal(shape 1) = %+v, %v; want %+v", gotT, err, oldT)
		}
		codectest.AgreeWith(t, tb, readTerminal, unmarshalTerminal)
	}
	// A count that is neither shape's is corrupt.
	bad, _ := format.Marshal([]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	if _, err := DecodeRun(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("DecodeRun(15 fields) = %v, want ErrCorrupt", err)
	}
}
