package queue

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/internal/format"
)

// Job states, as stored. DO NOT CHANGE the values: they are in the bucket.
const (
	statePending uint8 = 1 // waiting; "scheduled" while RunAt is in the future
	stateClaimed uint8 = 2
	stateDone    uint8 = 3 // kept only with a done retention
	stateDead    uint8 = 4
)

// State is a job's state as reported by GetJob.
type State uint8

// Job states.
const (
	JobPending   State = iota + 1 // ready to be claimed
	JobScheduled                  // pending, but not before its RunAt
	JobClaimed                    // held by a worker under a lease
	JobDone                       // acknowledged (kept for the done retention)
	JobDead                       // dead-lettered
)

func (s State) String() string {
	switch s {
	case JobPending:
		return "pending"
	case JobScheduled:
		return "scheduled"
	case JobClaimed:
		return "claimed"
	case JobDone:
		return "done"
	case JobDead:
		return "dead"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Engine key spaces of the job queue.
const (
	jobSpace     = "j/" // j/<id>: job record
	payloadSpace = "p/" // p/<id>: job payload not kept in its record (blob, or large)
)

// inlinePayloadMax is the largest payload kept inside its job record
// (jobRec.Payload) rather than under p/<id>. A payload in the record costs
// no key, tree item or allocation of its own (about 100 bytes of heap per
// job), but every rewrite of the record (claim, retry) writes it to the
// WAL again: small payloads gain, large ones would pay for each attempt.
const inlinePayloadMax = 512

// maxHistory bounds the attempt history kept in a job record.
const maxHistory = 16

// jobRec is the stored job record (msgpack, as an array: field order is the
// format; jobCore's fields come first, flattened). A new field goes at the
// end, and the decoders must then also accept the shorter records already
// in buckets (see format.Marshal): version 1 records are jobCore alone.
type jobRec struct {
	jobCore
	// Payload is the job's payload when it is kept in the record: non-nil,
	// possibly empty. Nil means it is under p/<id> (a blob reference or a
	// large inline value), or that the job has none (done jobs, kept
	// without their payloads). Version 1 records have no such field.
	Payload []byte
	// Claim is the token of the claim on a claimed job (0 in any other
	// state): the claim is part of the committed state, so that a writer
	// that takes over can honour it (its holder renews and settles with
	// the same token). Version 1 and 2 records have no such field; a
	// claimed job without one is requeued at Open, as before.
	Claim uint64
}

// jobRecV2 is a version 2 record (the reflective decoder's fallback).
type jobRecV2 struct {
	jobCore
	Payload []byte
}

// jobCore is the first 15 fields of a job record, and the whole record as
// written before payloads moved into records.
type jobCore struct {
	Queue       string
	State       uint8
	Priority    int32
	Order       uint64 // FIFO order within a priority; unique, increasing
	RunAt       int64  // unix ns; not claimable before
	Attempts    uint32 // claims so far (rises at claim)
	MaxAttempts uint32
	Headers     map[string]string
	DedupKey    string
	EnqueuedAt  int64
	UpdatedAt   int64
	CancelReq   bool
	History     []attemptRec
	Size        int64  // payload bytes
	DeadNotify  string // queue that gets a notice when the job is dead-lettered
}

type attemptRec struct {
	At    int64
	Error string
}

// jobFields is the number of fields of jobRec; jobFieldsV1 of version 1
// records (jobCore).
const (
	jobFields   = 17
	jobFieldsV2 = 16
	jobFieldsV1 = 15
)

// encodeJob returns the engine value (inline-tagged msgpack) of a record:
// the bytes of format.Marshal, written without reflection.
func encodeJob(r *jobRec) []byte {
	size := 100 + len(r.Queue) + len(r.DedupKey) + len(r.DeadNotify) + len(r.Payload)
	size += format.StringMapSize(r.Headers)
	for i := range r.History {
		size += 16 + len(r.History[i].Error)
	}
	return appendJob(engine.NewInline(size), r)
}

func appendJob(b []byte, r *jobRec) []byte {
	b = format.AppendArrayLen(b, jobFields)
	b = format.AppendString(b, r.Queue)
	b = format.AppendUint8(b, r.State)
	b = format.AppendInt32(b, r.Priority)
	b = format.AppendUint64(b, r.Order)
	b = format.AppendInt64(b, r.RunAt)
	b = format.AppendUint32(b, r.Attempts)
	b = format.AppendUint32(b, r.MaxAttempts)
	b = format.AppendStringMap(b, r.Headers)
	b = format.AppendString(b, r.DedupKey)
	b = format.AppendInt64(b, r.EnqueuedAt)
	b = format.AppendInt64(b, r.UpdatedAt)
	b = format.AppendBool(b, r.CancelReq)
	if r.History == nil {
		b = format.AppendNil(b)
	} else {
		b = format.AppendArrayLen(b, len(r.History))
		for _, h := range r.History {
			b = format.AppendArrayLen(b, 2)
			b = format.AppendInt64(b, h.At)
			b = format.AppendString(b, h.Error)
		}
	}
	b = format.AppendInt64(b, r.Size)
	b = format.AppendString(b, r.DeadNotify)
	b = format.AppendBytes(b, r.Payload)
	claim := r.Claim
	if r.State != stateClaimed {
		claim = 0 // a settled or requeued job keeps no claim
	}
	return format.AppendUint64(b, claim)
}

// readJob is the fast reader of appendJob's output, and of version 1
// records. The payload aliases the input.
func readJob(rd *format.Reader, r *jobRec) {
	n := rd.FieldsIn(jobFieldsV1, jobFields)
	r.Queue = rd.Name()
	r.State = rd.Uint8()
	r.Priority = rd.Int32()
	r.Order = rd.Uint64()
	r.RunAt = rd.Int64()
	r.Attempts = rd.Uint32()
	r.MaxAttempts = rd.Uint32()
	r.Headers = rd.StringMap()
	r.DedupKey = rd.String()
	r.EnqueuedAt = rd.Int64()
	r.UpdatedAt = rd.Int64()
	r.CancelReq = rd.Bool()
	r.History = format.ReadSlice[attemptRec](rd)
	for i := range r.History {
		readAttempt(rd, &r.History[i])
	}
	r.Size = rd.Int64()
	r.DeadNotify = rd.Name()
	if n >= jobFieldsV2 {
		r.Payload = rd.BytesZC()
	}
	if n >= jobFields {
		r.Claim = rd.Uint64()
	}
}

func readAttempt(rd *format.Reader, a *attemptRec) {
	rd.Fields(2)
	a.At = rd.Int64()
	a.Error = rd.String()
}

// jobData returns the msgpack record of a job record's engine value.
func jobData(v []byte) ([]byte, error) {
	d, err := engine.Decode(v)
	if err != nil || d.BlobKey != "" {
		return nil, fmt.Errorf("%w: job record is not an inline value", ErrCorrupt)
	}
	return d.Data, nil
}

func checkJobState(s uint8) error {
	if s < statePending || s > stateDead {
		return fmt.Errorf("%w: job record has state %d", ErrCorrupt, s)
	}
	return nil
}

// decodeJob parses the engine value of a job record.
func decodeJob(v []byte) (*jobRec, error) {
	data, err := jobData(v)
	if err != nil {
		return nil, err
	}
	var r jobRec
	rd := format.NewReader(data)
	readJob(&rd, &r)
	if rd.Finish() != nil {
		if err := unmarshalJob(data, &r); err != nil {
			return nil, fmt.Errorf("job record: %w", err)
		}
	}
	if err := checkJobState(r.State); err != nil {
		return nil, err
	}
	return &r, nil
}

// unmarshalJob is the reflective decoder of job records, of either
// version: what the fast reader must agree with.
func unmarshalJob(data []byte, r *jobRec) error {
	*r = jobRec{}
	err := format.UnmarshalExact(data, r)
	if err != nil {
		*r = jobRec{}
		var v2 jobRecV2
		if format.UnmarshalExact(data, &v2) == nil {
			r.jobCore, r.Payload = v2.jobCore, v2.Payload
			return nil
		}
		if format.UnmarshalExact(data, &r.jobCore) == nil {
			return nil
		}
	}
	return err
}

// indexRec is the part of a job record the job index keeps.
type indexRec struct {
	queue     []byte // aliases the engine value
	state     uint8
	priority  int32
	order     uint64
	runAt     int64
	dedupKey  string // aliases the engine value, as queue does
	updatedAt int64
	inline    bool // the payload is in the record (jobRec.Payload != nil)
}

// readIndexRec is readJob reading only what the index keeps: it checks the
// other fields' types as readJob does but does not allocate for them.
func readIndexRec(rd *format.Reader, r *indexRec) {
	n := rd.FieldsIn(jobFieldsV1, jobFields)
	r.queue = rd.StringBytes()
	r.state = rd.Uint8()
	r.priority = rd.Int32()
	r.order = rd.Uint64()
	r.runAt = rd.Int64()
	rd.Uint32() // Attempts
	rd.Uint32() // MaxAttempts
	rd.SkipStringMap()
	r.dedupKey = aliasString(rd.StringBytes())
	rd.Int64() // EnqueuedAt
	r.updatedAt = rd.Int64()
	rd.Bool() // CancelReq
	for range max(rd.ArrayLen(), 0) {
		rd.Fields(2)
		rd.Int64()
		rd.StringBytes()
	}
	rd.Int64()       // Size
	rd.StringBytes() // DeadNotify
	if n >= jobFieldsV2 {
		r.inline = rd.BytesZC() != nil // Payload
	}
	if n >= jobFields {
		rd.Uint64() // Claim
	}
}

// aliasString returns b as a string without a copy: b must never be
// modified (an engine value is not), and the string must not be kept
// beyond it (the index copies what it keeps).
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// decodeIndexRec parses what the index keeps of a job record's engine
// value. It accepts what decodeJob accepts.
func decodeIndexRec(v []byte, r *indexRec) error {
	data, err := jobData(v)
	if err != nil {
		return err
	}
	rd := format.NewReader(data)
	readIndexRec(&rd, r)
	if rd.Finish() != nil {
		j, err := decodeJob(v) // the fallback: the fast reader did not take it
		if err != nil {
			return err
		}
		*r = indexRec{
			queue: []byte(j.Queue), state: j.State, priority: j.Priority, order: j.Order,
			runAt: j.RunAt, dedupKey: j.DedupKey, updatedAt: j.UpdatedAt, inline: j.Payload != nil,
		}
	}
	return checkJobState(r.state)
}

// Attempt is one failed attempt in a job's history.
type Attempt struct {
	At    time.Time
	Error string
}

// Job is a job as claimed by a worker or read by GetJob.
type Job struct {
	ID          string
	Queue       string
	Payload     []byte
	Headers     map[string]string
	Priority    int32
	DedupKey    string
	State       State
	Attempt     uint32 // attempts so far, including the current claim
	MaxAttempts uint32
	EnqueuedAt  time.Time
	RunAt       time.Time
	// CancelRequested is set when Cancel was called while the job was
	// claimed; the worker should stop and settle it.
	CancelRequested bool
	History         []Attempt // failed attempts, oldest first (bounded: the last 16, each Error at most 64 KiB)

	token      uint64 // claim token; 0 when not claimed by this process
	prefetched []byte // read with the claim (see handoff.Prefetch); nil: none
	// prefetchRef is the engine value of a prefetched value kept as a
	// blob, read with the claim for the writer to resolve outside its
	// lock (see wireJobs); nil: none.
	prefetchRef []byte
}

// carried is what the handler of j finds with handoff.Carried when a Work
// loop claimed it: its prefetched value, if any.
func (j *Job) carried() any {
	if j.prefetched == nil {
		return nil
	}
	return j.prefetched
}

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func (r *jobRec) toJob(id string, now time.Time) *Job {
	j := &Job{
		ID: id, Queue: r.Queue, Headers: r.Headers, Priority: r.Priority,
		DedupKey: r.DedupKey, Attempt: r.Attempts, MaxAttempts: r.MaxAttempts,
		EnqueuedAt: unixNano(r.EnqueuedAt), RunAt: unixNano(r.RunAt), CancelRequested: r.CancelReq,
	}
	switch r.State {
	case statePending:
		j.State = JobPending
		if r.RunAt > now.UnixNano() {
			j.State = JobScheduled
		}
	case stateClaimed:
		j.State = JobClaimed
	case stateDone:
		j.State = JobDone
	case stateDead:
		j.State = JobDead
	}
	for _, h := range r.History {
		j.History = append(j.History, Attempt{At: unixNano(h.At), Error: h.Error})
	}
	return j
}

// addHistory records a failed attempt's error text in the history, which
// keeps the last maxHistory. The text is bounded (errtext.Bound: 64 KiB,
// longer ones cut, with their size noted).
func (r *jobRec) addHistory(at time.Time, errText string) {
	r.History = append(r.History, attemptRec{At: at.UnixNano(), Error: errtext.Bound(errText)})
	if len(r.History) > maxHistory {
		r.History = append(r.History[:0:0], r.History[len(r.History)-maxHistory:]...)
	}
}
