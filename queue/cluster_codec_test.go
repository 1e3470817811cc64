package queue

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/format/codectest"
	"github.com/vmihailenco/msgpack/v5"
)

func randTxnOp(r *rand.Rand) txnOp {
	return txnOp{
		Kind: uint8(r.UintN(256)), Key: codectest.Bytes(r), Value: codectest.Bytes(r), Expect: codectest.Bytes(r),
		Absent: r.IntN(2) == 0, Queue: codectest.String(r), JobID: codectest.String(r), Token: codectest.Uint64(r),
		Priority: int32(codectest.Int64(r)), RunAt: codectest.Int64(r), MaxAttempts: uint32(codectest.Uint64(r)),
		Headers: codectest.Map(r, true), DedupKey: codectest.String(r), Error: codectest.String(r),
		States: uint32(codectest.Uint64(r)), DeadNotify: codectest.String(r), Claim: r.IntN(2) == 0,
		Dispatch: r.IntN(2) == 0,
	}
}

func randWireJob(r *rand.Rand) *wireJob {
	w := &wireJob{Token: codectest.Uint64(r), Prefetched: codectest.Bytes(r)}
	if r.IntN(4) == 0 {
		return w // no Job
	}
	w.Job = &Job{
		ID: codectest.String(r), Queue: codectest.String(r), Payload: codectest.Bytes(r),
		Headers: codectest.Map(r, true), Priority: int32(codectest.Int64(r)), DedupKey: codectest.String(r),
		State: State(r.UintN(6)), Attempt: uint32(codectest.Uint64(r)), MaxAttempts: uint32(codectest.Uint64(r)),
		EnqueuedAt: unixNano(codectest.Int64(r)), RunAt: unixNano(codectest.Int64(r)), CancelRequested: r.IntN(2) == 0,
	}
	for range r.IntN(4) {
		w.Job.History = append(w.Job.History, Attempt{At: unixNano(codectest.Int64(r)), Error: codectest.String(r)})
	}
	return w
}

// wireRoundTrip encodes v with the cluster codec and decodes it into a new
// value of its type.
func wireRoundTrip[T any](t *testing.T, v *T) *T {
	t.Helper()
	data, err := cluster.Codec{}.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := new(T)
	if err := (cluster.Codec{}).Unmarshal(data, got); err != nil {
		t.Fatalf("decoding %T: %v", v, err)
	}
	return got
}

// TestClusterWireRoundTrip holds the hand-written codecs of the hot wire
// types to their values: every field at msgpack's size boundaries, nil
// kept apart from empty, inside the requests and replies that carry them.
func TestClusterWireRoundTrip(t *testing.T) {
	r := codectest.New(t)
	for range 500 {
		req := &commitReq{Member: codectest.String(r), Dispatch: r.IntN(2) == 0}
		for range r.IntN(4) {
			var ops []txnOp
			for range 1 + r.IntN(3) {
				ops = append(ops, randTxnOp(r))
			}
			req.Txns = append(req.Txns, ops)
		}
		if got := wireRoundTrip(t, req); !reflect.DeepEqual(got, req) {
			t.Fatalf("commitReq:\n got %#v\nwant %#v", got, req)
		}

		reply := &commitReply{}
		for range r.IntN(4) {
			var res wireTxnResult
			for range r.IntN(3) {
				e := wireEnqueued{JobID: codectest.String(r), Duplicate: r.IntN(2) == 0}
				if r.IntN(2) == 0 {
					e.Claimed = randWireJob(r)
				}
				res.Enqueued = append(res.Enqueued, e)
			}
			reply.Results = append(reply.Results, res)
		}
		if got := wireRoundTrip(t, reply); !reflect.DeepEqual(got, reply) {
			t.Fatalf("commitReply:\n got %#v\nwant %#v", got, reply)
		}

		claim := &claimReply{Jobs: []*wireJob{randWireJob(r), nil, randWireJob(r)}}
		if got := wireRoundTrip(t, claim); !reflect.DeepEqual(got, claim) {
			t.Fatalf("claimReply:\n got %#v\nwant %#v", got, claim)
		}
	}
}

// TestClusterWireSkipsUnknownFields: a field number this side does not
// know (a newer peer's) is skipped, whatever its value.
func TestClusterWireSkipsUnknownFields(t *testing.T) {
	enc := func(fields ...any) []byte {
		data, err := msgpack.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	// A map: write it by hand (msgpack.Marshal of a Go map orders keys
	// at random, and the test wants the unknown fields in between).
	var b strings.Builder
	e := msgpack.NewEncoder(&b)
	_ = e.EncodeMapLen(4)
	_ = e.EncodeUint(fopJobID)
	_ = e.EncodeString("job-1")
	_ = e.EncodeUint(200)
	_ = e.Encode(map[string]any{"nested": []any{1, "x", enc(2)}})
	_ = e.EncodeUint(fopToken)
	_ = e.EncodeUint(42)
	_ = e.EncodeUint(201)
	_ = e.EncodeString("later")
	var op txnOp
	if err := msgpack.Unmarshal([]byte(b.String()), &op); err != nil {
		t.Fatal(err)
	}
	if want := (txnOp{JobID: "job-1", Token: 42}); !reflect.DeepEqual(op, want) {
		t.Fatalf("got %#v, want %#v", op, want)
	}
}

// TestClusterWireRejectsCorrupt: a truncated or mistyped message is an
// error, never a half-read value taken as whole.
func TestClusterWireRejectsCorrupt(t *testing.T) {
	r := codectest.New(t)
	w := randWireJob(r)
	w.Job = &Job{ID: "j", Queue: "q", Payload: []byte("payload")}
	data, err := cluster.Codec{}.Marshal(&claimReply{Jobs: []*wireJob{w}})
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(data) - 1 {
		var got claimReply
		if err := (cluster.Codec{}).Unmarshal(data[:n], &got); err == nil {
			t.Fatalf("%d of %d bytes decoded without an error", n, len(data))
		}
	}
	// The job's ID (field 1) as a number.
	var b strings.Builder
	e := msgpack.NewEncoder(&b)
	_ = e.EncodeMapLen(1)
	_ = e.EncodeUint(fjID)
	_ = e.EncodeUint(7)
	var got wireJob
	if err := msgpack.Unmarshal([]byte(b.String()), &got); err == nil || !strings.Contains(err.Error(), "wireJob") {
		t.Fatalf("a mistyped field: %v", err)
	}
	// A value out of its field's range, and a history that is not pairs
	// (which would throw the rest of the map out of step).
	for name, fields := range map[string][]any{
		"kind 257":     {uint64(fopKind), uint64(257)},
		"priority":     {uint64(fopPriority), int64(1) << 40},
		"odd history":  {uint64(fjHistory), []any{int64(1), "e", int64(2)}, uint64(fjToken), uint64(99)},
		"max attempts": {uint64(fopMaxAttempts), uint64(1) << 33},
	} {
		var b strings.Builder
		e := msgpack.NewEncoder(&b)
		_ = e.EncodeMapLen(len(fields) / 2)
		for _, f := range fields {
			_ = e.Encode(f)
		}
		var op txnOp
		var job wireJob
		errOp := msgpack.Unmarshal([]byte(b.String()), &op)
		errJob := msgpack.Unmarshal([]byte(b.String()), &job)
		if name == "odd history" && errJob == nil || name != "odd history" && errOp == nil {
			t.Errorf("%s: decoded without an error (txnOp %v, wireJob %v)", name, errOp, errJob)
		}
	}
}

// settlementCall is a commit call as a busy member sends it: 17
// transactions, each settling a step (ack, the run record's
// compare-and-put, the next step's enqueue).
func settlementCall() *commitReq {
	rec := []byte(strings.Repeat("r", 280))
	req := &commitReq{Member: "01M8CT8DYXQZKC2F20ZEBPCAN5", Opts: wireOpts{Lease: 30e9, MaxAttempts: 5}, Dispatch: true}
	for i := range 17 {
		run := "run-" + strings.Repeat("0", 30) + string(rune('a'+i))
		req.Txns = append(req.Txns, []txnOp{
			{Kind: opAck, Queue: "steps", JobID: "01M8CT8E3J9GNVAHYJXQG190XT", Token: 1 << 60},
			{Kind: opCompareAndPut, Key: []byte("workflow/runs/" + run), Value: rec, Expect: rec},
			{Kind: opEnqueue, Queue: "steps", JobID: "01M8CT8ECA99T3QZFZREFMNZJV", Value: make([]byte, 64),
				Headers:  map[string]string{"workflow.run_id": run, "workflow.step": "1"},
				DedupKey: "run:" + run + ":1", DeadNotify: "steps.dead", Claim: true},
		})
	}
	return req
}

// BenchmarkClusterWire encodes and decodes a busy member's commit call.
func BenchmarkClusterWire(b *testing.B) {
	req := settlementCall()
	data, err := cluster.Codec{}.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := (cluster.Codec{}).Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var got commitReq
			if err := (cluster.Codec{}).Unmarshal(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
