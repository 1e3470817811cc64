package queue

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/format/codectest"
)

func randJobRec(r *rand.Rand, multi bool) *jobRec {
	j := &jobRec{jobCore: jobCore{
		Queue: codectest.String(r), State: uint8(r.UintN(6)), Priority: int32(codectest.Int64(r)),
		Order: codectest.Uint64(r), RunAt: codectest.Int64(r), Attempts: uint32(codectest.Uint64(r)),
		MaxAttempts: r.Uint32(), Headers: codectest.Map(r, multi), DedupKey: codectest.String(r),
		EnqueuedAt: codectest.Int64(r), UpdatedAt: codectest.Int64(r), CancelReq: r.IntN(2) == 0,
		Size: codectest.Int64(r), DeadNotify: codectest.String(r),
	}, Payload: codectest.Bytes(r)}
	if n := r.IntN(5); n > 0 {
		j.History = make([]attemptRec, n-1)
		for i := range j.History {
			j.History[i] = attemptRec{At: codectest.Int64(r), Error: codectest.String(r)}
		}
	}
	return j
}

// TestJobCodecMatchesMarshal holds encodeJob to the bytes of format.Marshal
// and the fast readers to the reflective decoder.
func TestJobCodecMatchesMarshal(t *testing.T) {
	r := codectest.New(t)
	for i := range 2000 {
		multi := i%2 == 1
		j := randJobRec(r, multi)
		v := encodeJob(j)
		codectest.Check(t, v[1:], j, !multi, readJob)
		if !multi {
			want, _ := format.Marshal(j)
			if string(v) != string(engine.Inline(want)) {
				t.Fatalf("encodeJob is not the inline value of format.Marshal")
			}
		}
		checkIndexRec(t, v)
	}
}

// checkIndexRec checks that decodeIndexRec reads what decodeJob reads.
func checkIndexRec(t *testing.T, v []byte) {
	t.Helper()
	var ir indexRec
	ierr := decodeIndexRec(v, &ir)
	j, jerr := decodeJob(v)
	if (ierr == nil) != (jerr == nil) {
		t.Fatalf("decodeIndexRec: %v, decodeJob: %v", ierr, jerr)
	}
	if jerr != nil {
		if !errors.Is(ierr, ErrCorrupt) || !errors.Is(jerr, ErrCorrupt) {
			t.Fatalf("errors do not wrap ErrCorrupt: %v, %v", ierr, jerr)
		}
		return
	}
	want := indexRec{queue: []byte(j.Queue), state: j.State, priority: j.Priority, order: j.Order,
		runAt: j.RunAt, dedupKey: j.DedupKey, updatedAt: j.UpdatedAt}
	if string(ir.queue) != string(want.queue) || ir.state != want.state || ir.priority != want.priority ||
		ir.order != want.order || ir.runAt != want.runAt || ir.dedupKey != want.dedupKey || ir.updatedAt != want.updatedAt {
		t.Fatalf("decodeIndexRec = %+v, decodeJob gives %+v", ir, want)
	}
}

// FuzzDecodeJob: decodeJob and decodeIndexRec never panic, agree, and the
// fast reader agrees with the reflective decoder.
func FuzzDecodeJob(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		j := randJobRec(r, false)
		f.Add(encodeJob(j)[1:])
		v1, _ := format.Marshal(&j.jobCore) // a version 1 record
		f.Add(v1)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		codectest.AgreeWith(t, data, readJob, unmarshalJob)
		checkIndexRec(t, engine.Inline(data))
	})
}

func BenchmarkJobCodec(b *testing.B) {
	j := &jobRec{jobCore: jobCore{Queue: "workflow.steps", State: statePending, Order: 12345, RunAt: 1e18, Attempts: 1, MaxAttempts: 25,
		Headers: map[string]string{"workflow.run_id": "run-000123", "workflow.step": "2"}, DedupKey: "run:run-000123:2",
		EnqueuedAt: 1e18, UpdatedAt: 1e18, Size: 64}, Payload: make([]byte, 64)}
	v := encodeJob(j)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeJob(j)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decodeJob(v)
		}
	})
	b.Run("index", func(b *testing.B) {
		b.ReportAllocs()
		var ir indexRec
		for b.Loop() {
			decodeIndexRec(v, &ir)
		}
	})
	b.Run("reflective", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, _ := format.Marshal(j)
			var r jobRec
			format.UnmarshalExact(data, &r)
		}
	})
}

// TestJobCodecReadsVersion1 holds the readers to records written before
// payloads moved into them (jobCore alone, 15 fields): they decode with no
// payload in the record, on the fast path and the reflective one alike.
func TestJobCodecReadsVersion1(t *testing.T) {
	r := codectest.New(t)
	for range 500 {
		j := randJobRec(r, false)
		data, err := format.Marshal(&j.jobCore)
		if err != nil {
			t.Fatal(err)
		}
		var fast jobRec
		if err := format.ReadExact(data, &fast, readJob); err != nil {
			t.Fatalf("fast reader rejects a version 1 record: %v", err)
		}
		if fast.Payload != nil || !reflect.DeepEqual(fast.jobCore, j.jobCore) {
			t.Fatalf("fast reader read %+v, want %+v and no payload", fast, j.jobCore)
		}
		var slow jobRec
		if err := unmarshalJob(data, &slow); err != nil || !reflect.DeepEqual(slow, fast) {
			t.Fatalf("unmarshalJob = %+v, %v; want %+v", slow, err, fast)
		}
		codectest.AgreeWith(t, data, readJob, unmarshalJob)
		checkIndexRec(t, engine.Inline(data))
	}
	// Neither version's field count is accepted for the other's shape.
	short, _ := format.Marshal([]int{1, 2, 3})
	if _, err := decodeJob(engine.Inline(short)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decodeJob(3 fields) = %v, want ErrCorrupt", err)
	}
}
