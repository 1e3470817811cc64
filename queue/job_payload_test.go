package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/testenv"
)

// openFileWithClock opens a file:// store in a temporary directory with a
// fake clock.
func openFileWithClock(t *testing.T) (string, *fakeClock, *Queue) {
	t.Helper()
	url := "file://" + t.TempDir()
	clock := newFakeClock()
	q, err := Open(context.Background(), url, withClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return url, clock, q
}

// checkPayloadKeys checks where payloads live across the whole store: a
// p/<id> entry belongs to a job whose record holds no payload and that is
// pending, claimed or dead (done jobs keep none); no done record holds a
// payload.
func checkPayloadKeys(ctx context.Context, l *local) error {
	var problem error
	err := l.eng.View(ctx, func(r *engine.Reader) error {
		r.Ascend(payloadSpace, "", func(k string, _ []byte) bool {
			id := k[len(payloadSpace):]
			v, ok := r.Get(jobSpace + id)
			if !ok {
				problem = fmt.Errorf("%s outlived its job", k)
				return false
			}
			rec, err := decodeJob(v)
			switch {
			case err != nil:
				problem = err
			case rec.Payload != nil:
				problem = fmt.Errorf("job %s has its payload both in its record and under %s", id, k)
			case rec.State == stateDone:
				problem = fmt.Errorf("done job %s kept its payload under %s", id, k)
			}
			return problem == nil
		})
		if problem != nil {
			return nil
		}
		r.Ascend(jobSpace, "", func(k string, v []byte) bool {
			rec, err := decodeJob(v)
			if err != nil {
				problem = err
			} else if rec.State == stateDone && rec.Payload != nil {
				problem = fmt.Errorf("done job %s kept its payload in its record", k[len(jobSpace):])
			}
			return problem == nil
		})
		return nil
	})
	if err != nil {
		return err
	}
	return problem
}

// payloadKeyExists reports whether the job has a p/<id> entry.
func payloadKeyExists(t *testing.T, q *Queue, id string) bool {
	t.Helper()
	var ok bool
	err := q.be.(*local).eng.View(context.Background(), func(r *engine.Reader) error {
		_, ok = r.Get(payloadSpace + id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestPayloadInRecord: payloads up to inlinePayloadMax live in the job
// record (no p/<id> entry), larger ones under p/<id>; both read back
// byte for byte through Claim, GetJob, retries and a reopen, and neither
// leaves anything behind once acknowledged. An empty payload reads back
// empty, and the caller's slice is not retained.
func TestPayloadInRecord(t *testing.T) {
	ctx := context.Background()
	url, clock, q := openFileWithClock(t)
	var err error
	small := bytes.Repeat([]byte("s"), inlinePayloadMax)
	large := bytes.Repeat([]byte("L"), inlinePayloadMax+1)
	cases := []struct {
		name     string
		payload  []byte
		inRecord bool
	}{
		{"empty", nil, true},
		{"small", small, true},
		{"large", large, false},
	}
	ids := map[string]string{}
	for _, c := range cases {
		p := bytes.Clone(c.payload)
		res, err := q.Enqueue(ctx, "q-"+c.name, p, EnqueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range p {
			p[i] = 'x' // the queue must have copied it
		}
		ids[c.name] = res.JobID
		if got := payloadKeyExists(t, q, res.JobID); got == c.inRecord {
			t.Errorf("%s: p/<id> exists = %v, want %v", c.name, got, !c.inRecord)
		}
	}
	check := func(stage string, q *Queue) {
		t.Helper()
		for _, c := range cases {
			j, err := q.GetJob(ctx, ids[c.name])
			if err != nil {
				t.Fatalf("%s: %s: GetJob: %v", stage, c.name, err)
			}
			if !bytes.Equal(j.Payload, c.payload) || j.Payload == nil {
				t.Fatalf("%s: %s: GetJob payload %d bytes (nil %v), want %d", stage, c.name, len(j.Payload), j.Payload == nil, len(c.payload))
			}
		}
	}
	check("enqueued", q)
	// A failed attempt rewrites the record; the payload survives it.
	for _, c := range cases {
		j, err := q.claimOne(ctx, "q-"+c.name)
		if err != nil || j == nil {
			t.Fatalf("%s: Claim = %v, %v", c.name, j, err)
		}
		if !bytes.Equal(j.Payload, c.payload) || j.Payload == nil {
			t.Fatalf("%s: claimed payload %q, want %q", c.name, j.Payload, c.payload)
		}
		j.Payload = append(j.Payload[:0], "scribble"...) // the caller's copy
		if err := q.Nack(ctx, j, errors.New("again"), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	check("retried", q)
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if q, err = Open(ctx, url, withClock(clock)); err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	check("reopened", q)
	clock.Advance(time.Second) // past the retries' backoff
	for _, c := range cases {
		j, err := q.claimOne(ctx, "q-"+c.name)
		if err != nil || j == nil {
			t.Fatalf("%s: Claim after reopen = %v, %v", c.name, j, err)
		}
		if !bytes.Equal(j.Payload, c.payload) {
			t.Fatalf("%s: payload after reopen %q, want %q", c.name, j.Payload, c.payload)
		}
		if err := q.Ack(ctx, j); err != nil {
			t.Fatal(err)
		}
		if payloadKeyExists(t, q, j.ID) {
			t.Errorf("%s: p/<id> left after Ack", c.name)
		}
		if _, err := q.GetJob(ctx, j.ID); !errors.Is(err, ErrJobNotFound) {
			t.Errorf("%s: GetJob after Ack: %v, want ErrJobNotFound", c.name, err)
		}
	}
}

// TestVersion1JobRecords: a store written before payloads moved into job
// records holds 15-field records whose payload is under p/<id>. Such jobs
// are claimed with their payload, keep it across a retry (which rewrites
// the record in the new shape) and a reopen, and leave nothing behind.
func TestVersion1JobRecords(t *testing.T) {
	ctx := context.Background()
	url, clock, q := openFileWithClock(t)
	var err error
	const id = "01JOLDJOB0000000000000000A"
	now := clock.Now().UnixNano()
	old := jobCore{Queue: "legacy", State: statePending, Order: 1, RunAt: now, MaxAttempts: 5,
		EnqueuedAt: now, UpdatedAt: now, Size: 5}
	rec, err := format.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	err = q.be.(*local).eng.Update(ctx, func(tx *engine.Tx) error {
		tx.Put(payloadSpace+id, engine.Inline([]byte("hello")))
		tx.Put(jobSpace+id, engine.Inline(rec))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := q.Stats(ctx, "legacy"); s.Pending != 1 {
		t.Fatalf("Stats = %+v, want the version 1 job pending", s)
	}
	j, err := q.claimOne(ctx, "legacy")
	if err != nil || j == nil || j.ID != id || string(j.Payload) != "hello" {
		t.Fatalf("Claim = %+v, %v; want job %s with payload hello", j, err, id)
	}
	if err := q.Nack(ctx, j, errors.New("again"), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if q, err = Open(ctx, url, withClock(clock)); err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	clock.Advance(time.Second)
	j, err = q.claimOne(ctx, "legacy")
	if err != nil || j == nil || string(j.Payload) != "hello" || j.Attempt != 2 {
		t.Fatalf("Claim after a retry and a reopen = %+v, %v; want payload hello, attempt 2", j, err)
	}
	if err := q.Ack(ctx, j); err != nil {
		t.Fatal(err)
	}
	if payloadKeyExists(t, q, id) {
		t.Error("p/<id> of a version 1 job left after Ack")
	}
}

// TestPayloadsLeaveWithTheirJobs: whatever ends a job (cancel, done with
// retention, retention expiry, dead-letter and its expiry) leaves no
// payload behind, in the record or under p/<id>, for payloads kept either
// way; a done job reads back without one.
func TestPayloadsLeaveWithTheirJobs(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	cfg := QueueConfig{DoneRetention: time.Hour, DeadRetention: time.Hour}
	q, err := Open(ctx, testenv.MemURL(t.Name()), withClock(clock), WithQueueConfig("q", cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	l := q.be.(*local)
	check := func(stage string) {
		t.Helper()
		if err := checkPayloadKeys(ctx, l); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
	}
	for _, size := range []int{0, 100, inlinePayloadMax + 1} {
		payload := bytes.Repeat([]byte("p"), size)
		// Cancelled while pending.
		res, err := q.Enqueue(ctx, "q", payload, EnqueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := q.CancelJob(ctx, res.JobID); err != nil || c != CancelRemoved {
			t.Fatalf("CancelJob = %v, %v", c, err)
		}
		check("cancelled")
		// Done, kept for the retention, then expired.
		if _, err := q.Enqueue(ctx, "q", payload, EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
		j, err := q.claimOne(ctx, "q")
		if err != nil || j == nil {
			t.Fatalf("Claim = %v, %v", j, err)
		}
		if err := q.Ack(ctx, j); err != nil {
			t.Fatal(err)
		}
		check("done")
		done, err := q.GetJob(ctx, j.ID)
		if err != nil || done.State != JobDone || done.Payload != nil {
			t.Fatalf("GetJob of a done job = %+v, %v; want done, no payload", done, err)
		}
		// Dead-lettered, kept with its payload, then expired.
		if _, err := q.Enqueue(ctx, "q", payload, EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
		if j, err = q.claimOne(ctx, "q"); err != nil || j == nil {
			t.Fatalf("Claim = %v, %v", j, err)
		}
		if err := q.DeadLetter(ctx, j, "no"); err != nil {
			t.Fatal(err)
		}
		check("dead")
		dead, err := q.GetJob(ctx, j.ID)
		if err != nil || !bytes.Equal(dead.Payload, payload) || dead.Payload == nil {
			t.Fatalf("GetJob of a dead job: payload %d bytes, %v; want %d", len(dead.Payload), err, size)
		}
		clock.Advance(2 * time.Hour)
		if err := q.reapNow(); err != nil {
			t.Fatal(err)
		}
		check("expired")
		if n := l.eng.Stats().Keys; n > 3 {
			t.Fatalf("%d keys left after every job ended and expired", n)
		}
	}
}
