package queue

import (
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
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
	payloadSpace = "p/" // p/<id>: job payload (inline or blob)
)

// maxHistory bounds the attempt history kept in a job record.
const maxHistory = 16

// jobRec is the stored job record (msgpack, as an array: field order is the
// format; append new fields at the end only).
type jobRec struct {
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

// encodeJob returns the engine value (inline-tagged msgpack) of a record.
func encodeJob(r *jobRec) []byte {
	b, err := format.Marshal(r)
	if err != nil {
		panic("queue: encoding a job record: " + err.Error()) // only plain fields
	}
	return engine.Inline(b)
}

// decodeJob parses the engine value of a job record.
func decodeJob(v []byte) (*jobRec, error) {
	d, err := engine.Decode(v)
	if err != nil || d.BlobKey != "" {
		return nil, fmt.Errorf("%w: job record is not an inline value", ErrCorrupt)
	}
	var r jobRec
	if err := format.UnmarshalExact(d.Data, &r); err != nil {
		return nil, fmt.Errorf("job record: %w", err)
	}
	if r.State < statePending || r.State > stateDead {
		return nil, fmt.Errorf("%w: job record has state %d", ErrCorrupt, r.State)
	}
	return &r, nil
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
	History         []Attempt // failed attempts, oldest first (bounded)

	token uint64 // claim token; 0 when not claimed by this process
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

func (r *jobRec) addHistory(at time.Time, errText string) {
	r.History = append(r.History, attemptRec{At: at.UnixNano(), Error: errText})
	if len(r.History) > maxHistory {
		r.History = append(r.History[:0:0], r.History[len(r.History)-maxHistory:]...)
	}
}
