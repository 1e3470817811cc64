package queue

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/format/codectest"
	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/tinylib/msgp/msgp"
	"google.golang.org/grpc/mem"
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
	data, err := cluster.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	got := new(T)
	if err := cluster.Decode(data, got); err != nil {
		t.Fatalf("decoding %T: %v", v, err)
	}
	return got
}

func randErr(r *rand.Rand) *wireErr {
	if r.IntN(3) > 0 {
		return nil
	}
	return &wireErr{Kind: codectest.String(r), Msg: codectest.String(r), JobID: codectest.String(r),
		Key: codectest.Bytes(r), What: codectest.String(r), Size: int(codectest.Int64(r)), Max: int(codectest.Int64(r))}
}

func randClaimReply(r *rand.Rand) claimReply {
	c := claimReply{Err: randErr(r)}
	if r.IntN(4) > 0 {
		c.Jobs = []*wireJob{}
		for range r.IntN(4) {
			if r.IntN(5) == 0 {
				c.Jobs = append(c.Jobs, nil)
			} else {
				c.Jobs = append(c.Jobs, randWireJob(r))
			}
		}
	}
	return c
}

// TestClusterWireRoundTrip holds the hand-written codecs of the hot wire
// types to their values: every field at msgpack's size boundaries, nil
// kept apart from empty, inside the requests and replies that carry them.
func TestClusterWireRoundTrip(t *testing.T) {
	r := codectest.New(t)
	for range 500 {
		req := &commitReq{Member: codectest.String(r), Dispatch: r.IntN(2) == 0,
			Opts: wireOpts{Lease: time.Duration(codectest.Int64(r)), MaxAttempts: uint32(codectest.Uint64(r)),
				BackoffBase: time.Duration(codectest.Int64(r)), BackoffMax: time.Duration(codectest.Int64(r))}}
		if r.IntN(3) == 0 {
			req.Opts.Queues = map[string]QueueConfig{codectest.String(r): {Lease: time.Duration(codectest.Int64(r)),
				MaxAttempts: uint32(codectest.Uint64(r)), DeadRetention: time.Hour}}
		}
		for range r.IntN(4) {
			var ops []txnOp
			for range 1 + r.IntN(3) {
				ops = append(ops, randTxnOp(r))
			}
			req.Txns = append(req.Txns, ops)
		}
		for range r.IntN(3) {
			req.Claims = append(req.Claims, claimWant{Queue: codectest.String(r), N: r.IntN(1 << 20),
				Prefetch: handoff.Prefetch{Header: codectest.String(r), Prefix: codectest.String(r)}, IfTxn: r.IntN(600)})
		}
		if got := wireRoundTrip(t, req); !reflect.DeepEqual(got, req) {
			t.Fatalf("commitReq:\n got %#v\nwant %#v", got, req)
		}

		reply := &commitReply{}
		for range r.IntN(4) {
			res := wireTxnResult{Err: randErr(r)}
			for range r.IntN(3) {
				e := wireEnqueued{JobID: codectest.String(r), Duplicate: r.IntN(2) == 0}
				if r.IntN(2) == 0 {
					e.Claimed = randWireJob(r)
				}
				res.Enqueued = append(res.Enqueued, e)
			}
			for range r.IntN(3) {
				res.Cancelled = append(res.Cancelled, CancelOutcome(r.UintN(256)))
			}
			reply.Results = append(reply.Results, res)
		}
		for range r.IntN(3) {
			reply.Claims = append(reply.Claims, randClaimReply(r))
		}
		if got := wireRoundTrip(t, reply); !reflect.DeepEqual(got, reply) {
			t.Fatalf("commitReply:\n got %#v\nwant %#v", got, reply)
		}

		claim := randClaimReply(r)
		if got := wireRoundTrip(t, &claim); !reflect.DeepEqual(got, &claim) {
			t.Fatalf("claimReply:\n got %#v\nwant %#v", got, &claim)
		}
	}
}

// TestClusterWireColdRoundTrip holds the codecs of the other messages to
// their values: every field set, and every field zero.
func TestClusterWireColdRoundTrip(t *testing.T) {
	r := codectest.New(t)
	refs := func() []claimRef {
		var refs []claimRef
		for range r.IntN(4) {
			refs = append(refs, claimRef{ID: codectest.String(r), Token: codectest.Uint64(r), Queue: codectest.String(r)})
		}
		return refs
	}
	opts := wireOpts{Lease: time.Duration(codectest.Int64(r)), MaxAttempts: uint32(codectest.Uint64(r)),
		Queues: map[string]QueueConfig{"q": {Lease: 1, MaxAttempts: 2, BackoffBase: 3, BackoffMax: 4, DoneRetention: 5, DeadRetention: 6}, "": {}}}
	for range 200 {
		since := time.Unix(0, codectest.Int64(r))
		if r.IntN(3) == 0 || since.UnixNano() == 0 {
			since = time.Time{} // unix ns 0 is the zero time (see unixNano)
		}
		health := healthReply{Healthy: r.IntN(2) == 0, Since: since, LastError: codectest.String(r), Stalled: time.Duration(codectest.Int64(r))}
		for _, pair := range [][2]message{
			{&claimReq{Member: codectest.String(r), Opts: opts, Queue: codectest.String(r), N: r.IntN(1 << 20),
				Wait: time.Duration(codectest.Int64(r)), Prefetch: handoff.Prefetch{Header: codectest.String(r), Prefix: codectest.String(r)}}, new(claimReq)},
			{&renewReq{Member: codectest.String(r), Opts: opts, Claims: refs()}, new(renewReq)},
			{&renewReply{Lost: []bool{true, false, r.IntN(2) == 0}}, new(renewReply)},
			{&eventsReq{Member: codectest.String(r), Claims: refs(), Wait: time.Duration(codectest.Int64(r))}, new(eventsReq)},
			{&eventsReply{Events: []claimEvent{{ID: codectest.String(r), Token: codectest.Uint64(r), Cancel: true}, {Lost: true}},
				Health: health, Closing: r.IntN(2) == 0}, new(eventsReply)},
			{&health, new(healthReply)},
			{&getReq{Keys: []string{codectest.String(r), ""}}, new(getReq)},
			{&getReply{Values: [][]byte{codectest.Bytes(r), nil, {}}, Errs: []*wireErr{nil, randErr(r), {Kind: "key-not-found"}}}, new(getReply)},
			{&scanReq{Prefix: codectest.String(r), After: codectest.String(r), Limit: int(int32(codectest.Int64(r)))}, new(scanReq)},
			{&scanReply{KVs: []KV{{Key: codectest.Bytes(r), Value: codectest.Bytes(r)}, {Key: []byte("k"), Value: []byte{}}}, More: true, Err: randErr(r)}, new(scanReply)},
			{&statsReq{Queue: codectest.String(r)}, new(statsReq)},
			{&statsReply{Stats: Stats{Pending: codectest.Int64(r), Scheduled: codectest.Int64(r), Claimed: codectest.Int64(r),
				Dead: codectest.Int64(r), Done: codectest.Int64(r), OldestPendingAge: time.Duration(codectest.Int64(r))}, Err: randErr(r)}, new(statsReply)},
			{&queuesReply{Names: []string{codectest.String(r)}, Err: randErr(r)}, new(queuesReply)},
			{&getJobReq{ID: codectest.String(r)}, new(getJobReq)},
			{&jobReply{Job: randWireJob(r), Err: randErr(r)}, new(jobReply)},
			{&deadJobsReq{Queue: codectest.String(r), After: codectest.String(r), Limit: int(int32(codectest.Int64(r)))}, new(deadJobsReq)},
			{&deadJobsReply{Jobs: []*wireJob{randWireJob(r), nil}, Next: codectest.String(r), Err: randErr(r)}, new(deadJobsReply)},
			{&watchReq{Keys: []string{codectest.String(r), ""}, Sums: codectest.Bytes(r), Wait: time.Duration(codectest.Int64(r))}, new(watchReq)},
			{&watchReply{Changed: []string{codectest.String(r)}}, new(watchReply)},
			{&noArgs{}, new(noArgs)},
		} {
			want, got := pair[0], pair[1]
			data, err := cluster.Encode(want)
			if err != nil {
				t.Fatal(err)
			}
			if err := cluster.Decode(data, got); err != nil {
				t.Fatalf("decoding %T: %v", want, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%T:\n got %#v\nwant %#v", want, got, want)
			}
			// Zero values stay zero (left out, nil kept apart from empty).
			zero := reflect.New(reflect.TypeOf(want).Elem()).Interface().(message)
			again := reflect.New(reflect.TypeOf(want).Elem()).Interface().(message)
			if data, err = cluster.Encode(zero); err != nil {
				t.Fatal(err)
			}
			if err := cluster.Decode(data, again); err != nil || !reflect.DeepEqual(again, zero) {
				t.Fatalf("zero %T: got %#v (%v)", zero, again, err)
			}
		}
	}
}

// fieldMap appends a map of field numbers and values, in the order given.
func fieldMap(t *testing.T, b []byte, fields ...any) []byte {
	t.Helper()
	b = msgp.AppendMapHeader(b, uint32(len(fields)/2))
	for _, f := range fields {
		var err error
		if b, err = msgp.AppendIntf(b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// commitOf is a commit call of one transaction of one operation, op (an
// encoded map).
func commitOf(op []byte) []byte {
	b := msgp.AppendMapHeader(nil, 1)
	b = msgp.AppendUint(b, fcTxns)
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendArrayHeader(b, 1)
	return append(b, op...)
}

// TestClusterWireSkipsUnknownFields: a field number this side does not
// know (a newer peer's) is skipped, whatever its value.
func TestClusterWireSkipsUnknownFields(t *testing.T) {
	op := fieldMap(t, nil, uint64(fopJobID), "job-1",
		uint64(200), map[string]any{"nested": []any{1, "x", []byte{2}}},
		uint64(fopToken), uint64(42),
		uint64(201), "later")
	var got commitReq
	if err := cluster.Decode(commitOf(op), &got); err != nil {
		t.Fatal(err)
	}
	if want := [][]txnOp{{{JobID: "job-1", Token: 42}}}; !reflect.DeepEqual(got.Txns, want) {
		t.Fatalf("got %#v, want %#v", got.Txns, want)
	}
}

// TestClusterWireRejectsCorrupt: a truncated, mistyped or overlong message
// is an error, never a half-read value taken as whole.
func TestClusterWireRejectsCorrupt(t *testing.T) {
	r := codectest.New(t)
	w := randWireJob(r)
	w.Job = &Job{ID: "j", Queue: "q", Payload: []byte("payload")}
	data, err := cluster.Encode(&claimReply{Jobs: []*wireJob{w}})
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(data) - 1 {
		var got claimReply
		if err := cluster.Decode(data[:n], &got); err == nil {
			t.Fatalf("%d of %d bytes decoded without an error", n, len(data))
		}
	}
	if err := cluster.Decode(append(data, 0xc0), new(claimReply)); err == nil {
		t.Fatal("a byte after the message decoded without an error")
	}
	for name, op := range map[string][]byte{
		"job ID as a number": fieldMap(t, nil, uint64(fopJobID), uint64(7)),
		"kind 257":           fieldMap(t, nil, uint64(fopKind), uint64(257)),
		"priority":           fieldMap(t, nil, uint64(fopPriority), int64(1)<<40),
		"max attempts":       fieldMap(t, nil, uint64(fopMaxAttempts), uint64(1)<<33),
		// Containers that claim more values than the message holds: an
		// error, not an allocation of their claimed size.
		"headers":   append(msgp.AppendUint(msgp.AppendMapHeader(nil, 1), fopHeaders), 0xdf, 0x7f, 0xff, 0xff, 0xff),
		"ops array": append(msgp.AppendMapHeader(nil, 0), 0xdd, 0xff, 0xff, 0xff, 0xff),
	} {
		var got commitReq
		if err := cluster.Decode(commitOf(op), &got); err == nil || !strings.Contains(err.Error(), "txnOp") && name != "ops array" {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A history that is not pairs (which would throw the rest of the map
	// out of step).
	job := fieldMap(t, nil, uint64(fjHistory), []any{int64(1), "e", int64(2)}, uint64(fjToken), uint64(99))
	// A claim reply of one job: the array's header, then the job.
	claims := append(msgp.AppendUint(msgp.AppendMapHeader(nil, 1), fclJobs), msgp.AppendArrayHeader(nil, 1)...)
	if err := cluster.Decode(claims, new(claimReply)); err == nil {
		t.Error("an array without its value decoded")
	}
	if err := cluster.Decode(append(claims, job...), new(claimReply)); err == nil || !strings.Contains(err.Error(), "pairs") {
		t.Errorf("odd history: %v", err)
	}
}

// TestClusterWireBytesAreCapped: a byte field the writer decodes shares
// the message, and appending to it does not write over the next field.
func TestClusterWireBytesAreCapped(t *testing.T) {
	req := &commitReq{Txns: [][]txnOp{{{Kind: opPut, Key: []byte("k"), Value: []byte("value"), Expect: []byte("old")}}}}
	got := wireRoundTrip(t, req)
	op := &got.Txns[0][0]
	_ = append(op.Key, "XXXXXXXX"...)
	_ = append(op.Value, "XXXXXXXX"...)
	if string(op.Value) != "value" || string(op.Expect) != "old" {
		t.Fatalf("after appends: value %q, expect %q", op.Value, op.Expect)
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
	data, err := cluster.Encode(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := cluster.Encode(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var got commitReq
			if err := cluster.Decode(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzClusterWire: whatever bytes arrive as a commit call, its reply, a
// claim's reply or another message decode to a value or an error, never a
// panic; a value decoded encodes again to bytes that decode to the same
// value.
func FuzzClusterWire(f *testing.F) {
	for _, v := range []any{settlementCall(), &commitReply{Results: []wireTxnResult{{Enqueued: []wireEnqueued{{JobID: "j",
		Claimed: &wireJob{Job: &Job{ID: "j", Queue: "q", Payload: []byte("p"), Headers: map[string]string{"a": "b"},
			History: []Attempt{{Error: "e"}}}, Token: 3}}}, Cancelled: []CancelOutcome{CancelRemoved}}},
		Claims: []claimReply{{Err: &wireErr{Kind: "closed", Msg: "closed"}}}},
		&eventsReply{Events: []claimEvent{{ID: "j", Token: 1, Lost: true}}, Health: healthReply{Healthy: true, LastError: "e"}},
		&getReply{Values: [][]byte{[]byte("v"), nil}, Errs: []*wireErr{nil, {Kind: "key-not-found"}}},
		&scanReply{KVs: []KV{{Key: []byte("k"), Value: []byte("v")}}, More: true},
		&renewReq{Member: "m", Opts: wireOpts{Queues: map[string]QueueConfig{"q": {Lease: 1}}}, Claims: []claimRef{{ID: "j", Token: 2}}}} {
		data, err := cluster.Encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(v, again any) {
			if cluster.Decode(bytes.Clone(data), v) != nil {
				return
			}
			enc, err := cluster.Encode(v)
			if err != nil {
				t.Fatalf("%T: decoded, then encoding: %v", v, err)
			}
			if err := cluster.Decode(enc, again); err != nil {
				t.Fatalf("%T: decoded, encoded again, then: %v", v, err)
			}
			if !reflect.DeepEqual(v, again) {
				t.Fatalf("%T changed through an encoding:\n%#v\n%#v", v, v, again)
			}
		}
		check(new(commitReq), new(commitReq))
		check(new(commitReply), new(commitReply))
		check(new(claimReply), new(claimReply))
		check(new(claimReq), new(claimReq))
		check(new(renewReq), new(renewReq))
		check(new(eventsReply), new(eventsReply))
		check(new(getReply), new(getReply))
		check(new(scanReply), new(scanReply))
		check(new(deadJobsReply), new(deadJobsReply))
	})
}

// TestClusterWireRepliesOwnTheirBytes: the byte fields of a reply a member
// decodes are copies, so a payload does not keep the whole reply alive
// while its job runs (nor change with the buffer).
func TestClusterWireRepliesOwnTheirBytes(t *testing.T) {
	job := &wireJob{Job: &Job{ID: "j", Payload: []byte("payload")}, Prefetched: []byte("record")}
	for _, v := range []any{&claimReply{Jobs: []*wireJob{job}}, &commitReply{Claims: []claimReply{{Jobs: []*wireJob{job}}}}} {
		data, err := cluster.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		var got *wireJob
		switch v.(type) {
		case *claimReply:
			var c claimReply
			err = cluster.Decode(data, &c)
			got = c.Jobs[0]
		case *commitReply:
			var c commitReply
			err = cluster.Decode(data, &c)
			got = c.Claims[0].Jobs[0]
		}
		if err != nil {
			t.Fatal(err)
		}
		clear(data)
		if string(got.Job.Payload) != "payload" || string(got.Prefetched) != "record" {
			t.Fatalf("%T: after the message was cleared: payload %q, prefetched %q", v, got.Job.Payload, got.Prefetched)
		}
	}
}

// TestClusterWireCopiersOwnTheirBytes: the replies the codec decodes in
// place from gRPC's buffer (cluster.Copier) keep nothing of the buffer,
// which gRPC reuses once they are decoded.
func TestClusterWireCopiersOwnTheirBytes(t *testing.T) {
	r := codectest.New(t)
	for range 200 {
		reply := &commitReply{}
		for range 1 + r.IntN(3) {
			res := wireTxnResult{Err: randErr(r), Cancelled: []CancelOutcome{CancelOutcome(r.UintN(256))}}
			for range 1 + r.IntN(3) {
				res.Enqueued = append(res.Enqueued, wireEnqueued{JobID: codectest.String(r), Duplicate: r.IntN(2) == 0, Claimed: randWireJob(r)})
			}
			reply.Results = append(reply.Results, res)
		}
		reply.Claims = append(reply.Claims, randClaimReply(r))
		claim := randClaimReply(r)
		for _, pair := range [][2]cluster.Copier{{reply, new(commitReply)}, {&claim, new(claimReply)}} {
			want, got := pair[0], pair[1]
			data, err := cluster.Encode(want)
			if err != nil {
				t.Fatal(err)
			}
			if err := (cluster.Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, got); err != nil {
				t.Fatalf("decoding %T: %v", want, err)
			}
			for i := range data {
				data[i] = 0xc1 // never used in msgpack
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%T after its buffer was overwritten:\n got %#v\nwant %#v", want, got, want)
			}
		}
	}
}
