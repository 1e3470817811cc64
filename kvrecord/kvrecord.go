// Package kvrecord defines the durable records the workflow runtime keeps in
// the queue's key-value space: one run record per run, and a terminal
// record per finished run for the terminal retention window.
//
// # Keys
//
//	workflow/runs/<run id>                          Run
//	workflow/terminal/<ended unix ns:020d>/<id>     Terminal (time first, so
//	                                                expiry is a prefix scan)
//
// The runtime keeps other keys under workflow/ (an index of runs by submit
// time, signal mailboxes, the parked steps of paused runs, run memory,
// the children of a Spawn and their results, the run's history):
// its own, not
// for users to read or write. It alone writes these records, too: this
// package decodes them, for programs that read a store (the stepwell CLI,
// a migration, an audit), and its types and decoders change only by adding.
//
// # Encoding
//
// msgpack arrays, version first, exactly as format.Marshal encodes the
// structs (read without reflection by the decoders in this file, and
// written so by the runtime's encoders, which tests hold to
// format.Marshal). DO NOT reorder or remove fields. An
// appended field changes the field count, which the decoder (reflective or
// not) rejects in records written before: appending one needs a decoder for
// the shorter form as well.
//
// Shapes (the Version field stays 1; the field count tells them apart):
//
//	Run       shape 1: 14 fields (up to NotifyQueue)
//	          shape 2: 16 fields, + Retries, UpdatedAt (November 2026)
//	          shape 3: 30 fields, + WaitFor, WaitDeadline, WaitTimer,
//	          Paused, Parked, MailSeq, Mailbox (signals and pause),
//	          StepTimeout, StartAt, Retry* (the RunSpec's step timeout,
//	          scheduled start and retry policy;
//	          November 2026)
//	          shape 4: 32 fields, + MemoKeys, MemoBytes (run memory;
//	          November 2026)
//	          shape 5: 33 fields, + Queue (named step queues;
//	          November 2026)
//	          shape 6: 41 fields, + Parent, ParentStep, ChildIndex, Depth,
//	          JoinReported, Spawned, SpawnStep, Pending (child runs; November 2026)
//	          then: 43 fields, + Deadline, DeadlineJob (run deadlines;
//	          November 2026)
//	          then: 44 fields, + HistorySeq (run history; November 2026)
//	          then: 47 fields, + ConcKey, ConcLimit, ConcLine (per-key
//	          concurrency; November 2026)
//	Terminal  shape 1: 7 fields (up to EndedAt)
//	          shape 2: 11 fields, + Attempt, DeadJob, Payload, Queue
//	          (November 2026)
//
// The decoders read every shape (an older record reads with the newer
// fields zero: Retries 0, UpdatedAt 0, not waiting, not paused, an empty
// mailbox, no step timeout, start time or retry policy, no memory, no
// step queue, no parent and no children, no deadline, no history, no
// concurrency key, no dead job and no payload); the runtime writes the
// newest shape only, but it leaves out the trailing groups of fields a
// run does not use: a run without a concurrency key is written without
// the concurrency fields (44 fields), one also without history entries
// (HistorySeq 0, runs from before history) without that field (43), one
// also without a deadline without the deadline fields (shape 6), and one
// also without a parent and children in shape 5, so that records cost
// what the features a run uses cost.
//
// Decode* never panic on garbage: they return an error wrapping ErrCorrupt
// (fuzzed in this package).
package kvrecord

import (
	"errors"
	"fmt"

	"github.com/stepwell/stepwell/internal/format"
)

// Version is the current record version.
const Version uint8 = 1

// Key prefixes.
const (
	RunPrefix      = "workflow/runs/"
	TerminalPrefix = "workflow/terminal/"
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("kvrecord: corrupt record")

// Run states, as stored.
const (
	StateActive     uint8 = 1 // a step is queued, scheduled or running
	StateCancelling uint8 = 2 // cancel requested while a step runs
	StateTerminal   uint8 = 3 // ended; see Status and the terminal record
)

// Run is the durable record of one run.
type Run struct {
	Version     uint8
	RunID       string
	SubmittedAt int64    // unix ns
	InputHash   [32]byte // SHA-256 of the input
	State       uint8
	CurrentStep uint32
	CurrentJob  string // queue job of the current step ("" once terminal)
	Cancel      bool   // external cancel requested
	Headers     map[string]string
	Priority    int32
	MaxAttempts uint32 // per step; 0 = the queue default
	Status      uint8  // terminal.Status once terminal
	EndedAt     int64  // unix ns once terminal
	// NotifyQueue is the queue that gets the run's terminal notification,
	// fixed at Submit; "" when the submitting Runtime had no hook.
	NotifyQueue string
	// Retries counts the times the run was retried (Runtime.Retry). Shape 2.
	Retries uint32
	// UpdatedAt is when the record was last written (unix ns); 0 in shape 1
	// records. Shape 2.
	UpdatedAt int64
	// WaitFor is the signal name the run awaits (steprunner.AwaitSignal);
	// "" when it does not wait. While it waits, CurrentStep is the step
	// the signal will start and CurrentJob is "". Shape 3.
	WaitFor string
	// WaitDeadline is when the await times out (unix ns); 0: never. Shape 3.
	WaitDeadline int64
	// WaitTimer is the job that fires the await's timeout at WaitDeadline
	// ("" when none). Shape 3.
	WaitTimer string
	// Paused: Runtime.Pause is in effect; the run's next step is parked
	// instead of enqueued. Shape 3.
	Paused bool
	// Parked: step CurrentStep is parked under workflow/parked/<id> (CurrentJob is
	// ""); Resume enqueues it. Only while Paused. Shape 3.
	Parked bool
	// MailSeq numbers the run's mailbox entries: the last one written.
	// Shape 3.
	MailSeq uint64
	// Mailbox counts the signals in the run's mailbox. Shape 3.
	Mailbox uint32
	// StepTimeout is the run's per-attempt step timeout (ns); 0: the
	// executing Runtime's default. Shape 3.
	StepTimeout int64
	// StartAt is when step 0 was due (unix ns); 0: at submit. Shape 3.
	StartAt int64
	// RetryMaxAttempts, RetryInitialBackoff (ns), RetryMaxBackoff (ns),
	// RetryMultiplier and RetryJitter are the run's
	// steprunner.RetryPolicy; all zero: none. Shape 3.
	RetryMaxAttempts    uint32
	RetryInitialBackoff int64
	RetryMaxBackoff     int64
	RetryMultiplier     float64
	RetryJitter         float64
	// MemoKeys counts the entries of the run's memory
	// (steprunner.Outcome.WithMemo), kept under workflow/memo/<id>/; 0:
	// none, and a step reads none. Shape 4.
	MemoKeys uint32
	// MemoBytes is the memory's size: the sum of its keys' and values'
	// lengths. Shape 4.
	MemoBytes uint64
	// Queue is the step queue of the current step: its job's queue, or,
	// while the run waits or is parked, where its next step will be
	// enqueued (steprunner.Outcome.OnQueue, RunSpec.Queue). "" in records
	// of older shapes: the queue of the Runtime that handles the run.
	// Shape 5.
	Queue string

	// Parent is the run that spawned this one (steprunner.Spawn), "" for a
	// run submitted by Submit. ParentStep is the parent's step that
	// spawned it, ChildIndex its place in that Spawn, Depth its nesting
	// depth (a top-level run 0, its children 1). JoinReported says the
	// child's first end was counted by its parent (written in the
	// transaction that ended it: a retried child is not counted again).
	// Shape 6.
	Parent       string
	ParentStep   uint32
	ChildIndex   uint32
	Depth        uint32
	JoinReported bool
	// Spawned is the number of children of the run's latest Spawn, made
	// by its step SpawnStep (step SpawnStep+1 gets their results), and
	// Pending the number of the Spawn's shards (at most 16, see the
	// runtime's internal/runrec) with children still running: the run
	// waits for them while it is > 0. Shape 6.
	Spawned   uint32
	SpawnStep uint32
	Pending   uint32

	// Run deadlines (RunSpec.Deadline), appended after the shape 6 fields
	// and written only by runs that have one. Deadline is when the run
	// fails with the runtime's ErrRunDeadline (unix ns; 0: none; kept
	// after the run ended, for Status). DeadlineJob is the job on the
	// timers queue of the run's first step queue that fires it at
	// Deadline; "" once the run ended (or when it has no deadline).
	Deadline    int64
	DeadlineJob string

	// HistorySeq numbers the entries of the run's history (see the
	// runtime's Runtime.History): the last one written (1: the
	// submission, read from this record), 0 for none (a run from before
	// history). The runtime keeps the newest 1,000 (the older
	// HistorySeq-1000 are counted, not kept). Run history: appended after
	// the deadline fields.
	HistorySeq uint64

	// Per-key concurrency (the runtime's RunSpec.Concurrency), appended
	// after the deadline fields and written only by runs with a key.
	// ConcKey is the run's concurrency key ("" for none) and ConcLimit the
	// Limit it was submitted with. ConcLine is, while the run waits in its
	// key's line for a slot, the sequence number of its line entry (the
	// runtime's workflow/concline/<key>/<seq>; CurrentJob is "" then); 0
	// when it holds a slot (an active run with a key), has ended or has no
	// key.
	ConcKey   string
	ConcLimit uint32
	ConcLine  uint64
}

// Terminal is the outcome of a finished run.
type Terminal struct {
	Version   uint8
	RunID     string
	Status    uint8 // terminal.Status
	Result    []byte
	Error     string
	FinalStep uint32
	EndedAt   int64 // unix ns
	// Attempt is the attempt of the final step that settled the run (0
	// when unknown: cancelled before it ran, or a shape 1 record). Shape 2.
	Attempt uint32
	// DeadJob is the dead-lettered job of the final step when the run
	// failed by a dead letter; "" otherwise. Shape 2.
	DeadJob string
	// Payload is the final step's payload, kept for failed and cancelled
	// runs so that they can be retried: non-nil (possibly empty) when kept,
	// nil when not (succeeded runs, shape 1 records, and runs whose dead
	// step job was deleted before the runtime settled them: see DeadJob).
	// Shape 2.
	Payload []byte
	// Queue is the step queue of the final step's job ("" if unknown), where
	// Retry enqueues it again. Shape 2.
	Queue string
}

// RunKey returns the key of a run record.
func RunKey(runID string) []byte {
	return append(append(make([]byte, 0, len(RunPrefix)+len(runID)), RunPrefix...), runID...)
}

// TerminalKey returns the key of a terminal record.
func TerminalKey(endedAt int64, runID string) []byte {
	b := make([]byte, 0, len(TerminalPrefix)+21+len(runID))
	b = format.AppendPadded(append(b, TerminalPrefix...), endedAt)
	return append(append(b, '/'), runID...)
}

// ParseTerminalKey returns the ended time and run ID of a terminal key.
func ParseTerminalKey(key []byte) (endedAt int64, runID string, err error) {
	return parseTimeKey(key, TerminalPrefix)
}

// parseTimeKey parses prefix, 20 decimal digits, '/', and an ID.
func parseTimeKey(key []byte, prefix string) (int64, string, error) {
	n, id, ok := format.ParseTimeKey(key, prefix)
	if !ok {
		return 0, "", fmt.Errorf("%w: key %q", ErrCorrupt, key)
	}
	return n, id, nil
}

// Field counts of the records (see the Encoding section above): the
// current shape, and the older ones.
const (
	runFields        = 47
	runFieldsH       = 44 // with history, before the concurrency fields
	runFieldsDL      = 43 // with the deadline fields, before history
	runFieldsV6      = 41
	runFieldsV5      = 33
	runFieldsV4      = 32
	runFieldsV3      = 30
	runFieldsV2      = 16
	runFieldsV1      = 14
	terminalFields   = 11
	terminalFieldsV1 = 7
)

// readRun is the fast reader of the runtime's encoding, and of older shapes.
// A field count between the shapes' leaves fields unread, which Finish
// refuses.
func readRun(rd *format.Reader, r *Run) {
	n := rd.FieldsIn(runFieldsV1, runFields)
	r.Version = rd.Uint8()
	r.RunID = rd.String()
	r.SubmittedAt = rd.Int64()
	rd.BytesArray(r.InputHash[:])
	r.State = rd.Uint8()
	r.CurrentStep = rd.Uint32()
	r.CurrentJob = rd.String()
	r.Cancel = rd.Bool()
	r.Headers = rd.StringMap()
	r.Priority = rd.Int32()
	r.MaxAttempts = rd.Uint32()
	r.Status = rd.Uint8()
	r.EndedAt = rd.Int64()
	r.NotifyQueue = rd.Name()
	// Other counts in range leave bytes unread: Finish fails, and the
	// reflective decoder refuses them.
	if n < runFieldsV2 {
		return
	}
	r.Retries = rd.Uint32()
	r.UpdatedAt = rd.Int64()
	if n >= runFieldsV3 {
		r.WaitFor = rd.String()
		r.WaitDeadline = rd.Int64()
		r.WaitTimer = rd.String()
		r.Paused = rd.Bool()
		r.Parked = rd.Bool()
		r.MailSeq = rd.Uint64()
		r.Mailbox = rd.Uint32()
	}
	if n >= runFieldsV3 {
		r.StepTimeout = rd.Int64()
		r.StartAt = rd.Int64()
		r.RetryMaxAttempts = rd.Uint32()
		r.RetryInitialBackoff = rd.Int64()
		r.RetryMaxBackoff = rd.Int64()
		r.RetryMultiplier = rd.Float64()
		r.RetryJitter = rd.Float64()
	}
	if n >= runFieldsV4 {
		r.MemoKeys = rd.Uint32()
		r.MemoBytes = rd.Uint64()
	}
	if n >= runFieldsV5 {
		r.Queue = rd.Name()
	}
	if n >= runFieldsV6 {
		r.Parent = rd.String()
		r.ParentStep = rd.Uint32()
		r.ChildIndex = rd.Uint32()
		r.Depth = rd.Uint32()
		r.JoinReported = rd.Bool()
		r.Spawned = rd.Uint32()
		r.SpawnStep = rd.Uint32()
		r.Pending = rd.Uint32()
	}
	if n >= runFieldsDL {
		r.Deadline = rd.Int64()
		r.DeadlineJob = rd.String()
	}
	if n >= runFieldsH {
		r.HistorySeq = rd.Uint64()
	}
	if n >= runFields {
		r.ConcKey = rd.String()
		r.ConcLimit = rd.Uint32()
		r.ConcLine = rd.Uint64()
	}
}

// runV1 is a shape 1 run record, for the reflective decoder.
type runV1 struct {
	Version     uint8
	RunID       string
	SubmittedAt int64
	InputHash   [32]byte
	State       uint8
	CurrentStep uint32
	CurrentJob  string
	Cancel      bool
	Headers     map[string]string
	Priority    int32
	MaxAttempts uint32
	Status      uint8
	EndedAt     int64
	NotifyQueue string
}

// runV2 is a shape 2 run record, for the reflective decoder: shape 1's
// fields (msgpack inlines the embedded struct), then two more.
type runV2 struct {
	runV1
	Retries   uint32
	UpdatedAt int64
}

// runV3 is a shape 3 run record, for the reflective decoder: shape 2's
// fields, then the run control ones.
type runV3 struct {
	runV2
	WaitFor             string
	WaitDeadline        int64
	WaitTimer           string
	Paused              bool
	Parked              bool
	MailSeq             uint64
	Mailbox             uint32
	StepTimeout         int64
	StartAt             int64
	RetryMaxAttempts    uint32
	RetryInitialBackoff int64
	RetryMaxBackoff     int64
	RetryMultiplier     float64
	RetryJitter         float64
}

// runV4 is a shape 4 run record, for the reflective decoder.
type runV4 struct {
	runV3
	MemoKeys  uint32
	MemoBytes uint64
}

// runV5 is a shape 5 run record, for the reflective decoder.
type runV5 struct {
	runV4
	Queue string
}

// runV6 is a shape 6 run record (child runs, no deadline), for the
// reflective decoder.
type runV6 struct {
	runV5
	Parent       string
	ParentStep   uint32
	ChildIndex   uint32
	Depth        uint32
	JoinReported bool
	Spawned      uint32
	SpawnStep    uint32
	Pending      uint32
}

// runDL is a run record with the deadline fields, without history and
// concurrency, for the reflective decoder.
type runDL struct {
	runV6
	Deadline    int64
	DeadlineJob string
}

// fromDL sets r to dl's fields, the others zero.
func fromDL(r *Run, dl *runDL) {
	*r = v3WithZero(dl.runV3)
	r.MemoKeys, r.MemoBytes, r.Queue = dl.MemoKeys, dl.MemoBytes, dl.Queue
	r.Parent, r.ParentStep, r.ChildIndex, r.Depth = dl.Parent, dl.ParentStep, dl.ChildIndex, dl.Depth
	r.JoinReported, r.Spawned, r.SpawnStep, r.Pending = dl.JoinReported, dl.Spawned, dl.SpawnStep, dl.Pending
	r.Deadline, r.DeadlineJob = dl.Deadline, dl.DeadlineJob
}

// runH is a run record with history, without concurrency fields, for the
// reflective decoder.
type runH struct {
	runDL
	HistorySeq uint64
}

// unmarshalRun is the reflective decoder of run records of every shape:
// what the fast reader must agree with.
func unmarshalRun(b []byte, r *Run) error {
	*r = Run{}
	err := format.UnmarshalExact(b, r)
	if err == nil {
		return nil
	}
	var h runH
	if format.UnmarshalExact(b, &h) == nil {
		fromDL(r, &h.runDL)
		r.HistorySeq = h.HistorySeq
		return nil
	}
	var dl runDL
	if format.UnmarshalExact(b, &dl) == nil {
		fromDL(r, &dl)
		return nil
	}
	var v6 runV6
	if format.UnmarshalExact(b, &v6) == nil {
		*r = v3WithZero(v6.runV3)
		r.MemoKeys, r.MemoBytes, r.Queue = v6.MemoKeys, v6.MemoBytes, v6.Queue
		r.Parent, r.ParentStep, r.ChildIndex, r.Depth = v6.Parent, v6.ParentStep, v6.ChildIndex, v6.Depth
		r.JoinReported, r.Spawned, r.SpawnStep, r.Pending = v6.JoinReported, v6.Spawned, v6.SpawnStep, v6.Pending
		return nil
	}
	var v5 runV5
	if format.UnmarshalExact(b, &v5) == nil {
		*r = v3WithZero(v5.runV3)
		r.MemoKeys, r.MemoBytes, r.Queue = v5.MemoKeys, v5.MemoBytes, v5.Queue
		return nil
	}
	var v4 runV4
	if format.UnmarshalExact(b, &v4) == nil {
		*r = v3WithZero(v4.runV3)
		r.MemoKeys, r.MemoBytes = v4.MemoKeys, v4.MemoBytes
		return nil
	}
	var v3 runV3
	if format.UnmarshalExact(b, &v3) == nil {
		*r = v3WithZero(v3)
		return nil
	}
	var v2 runV2
	if format.UnmarshalExact(b, &v2) == nil {
		*r = v1WithZero(v2.runV1)
		r.Retries, r.UpdatedAt = v2.Retries, v2.UpdatedAt
		return nil
	}
	var v1 runV1
	if format.UnmarshalExact(b, &v1) != nil {
		*r = Run{}
		return err
	}
	*r = v1WithZero(v1)
	return nil
}

// v3WithZero returns a shape 3 record as a Run with the newer fields zero.
func v3WithZero(v3 runV3) Run {
	r := v1WithZero(v3.runV1)
	r.Retries, r.UpdatedAt = v3.Retries, v3.UpdatedAt
	r.WaitFor, r.WaitDeadline, r.WaitTimer = v3.WaitFor, v3.WaitDeadline, v3.WaitTimer
	r.Paused, r.Parked, r.MailSeq, r.Mailbox = v3.Paused, v3.Parked, v3.MailSeq, v3.Mailbox
	r.StepTimeout, r.StartAt, r.RetryMaxAttempts = v3.StepTimeout, v3.StartAt, v3.RetryMaxAttempts
	r.RetryInitialBackoff, r.RetryMaxBackoff = v3.RetryInitialBackoff, v3.RetryMaxBackoff
	r.RetryMultiplier, r.RetryJitter = v3.RetryMultiplier, v3.RetryJitter
	return r
}

// v1WithZero returns a shape 1 record as a Run with the shape 2 fields zero.
func v1WithZero(v runV1) Run {
	return Run{Version: v.Version, RunID: v.RunID, SubmittedAt: v.SubmittedAt, InputHash: v.InputHash,
		State: v.State, CurrentStep: v.CurrentStep, CurrentJob: v.CurrentJob, Cancel: v.Cancel,
		Headers: v.Headers, Priority: v.Priority, MaxAttempts: v.MaxAttempts, Status: v.Status,
		EndedAt: v.EndedAt, NotifyQueue: v.NotifyQueue}
}

// DecodeRun decodes a run record.
func DecodeRun(b []byte) (*Run, error) {
	var r Run
	rd := format.NewReader(b)
	readRun(&rd, &r)
	if rd.Finish() != nil {
		if err := unmarshalRun(b, &r); err != nil {
			return nil, fmt.Errorf("%w: run: %v", ErrCorrupt, err)
		}
	}
	if r.Version != Version {
		return nil, fmt.Errorf("%w: run record version %d", ErrCorrupt, r.Version)
	}
	if r.State < StateActive || r.State > StateTerminal || r.RunID == "" {
		return nil, fmt.Errorf("%w: run record state %d, id %q", ErrCorrupt, r.State, r.RunID)
	}
	return &r, nil
}

// readTerminal is the fast reader of the runtime's encoding, and of shape 1
// records.
func readTerminal(rd *format.Reader, t *Terminal) {
	n := rd.FieldsIn(terminalFieldsV1, terminalFields)
	t.Version = rd.Uint8()
	t.RunID = rd.String()
	t.Status = rd.Uint8()
	t.Result = rd.Bytes()
	t.Error = rd.String()
	t.FinalStep = rd.Uint32()
	t.EndedAt = rd.Int64()
	if n == terminalFields {
		t.Attempt = rd.Uint32()
		t.DeadJob = rd.String()
		t.Payload = rd.Bytes()
		t.Queue = rd.String()
	}
}

// terminalV1 is a shape 1 terminal record, for the reflective decoder.
type terminalV1 struct {
	Version   uint8
	RunID     string
	Status    uint8
	Result    []byte
	Error     string
	FinalStep uint32
	EndedAt   int64
}

// unmarshalTerminal is the reflective decoder of terminal records of either
// shape: what the fast reader must agree with.
func unmarshalTerminal(b []byte, t *Terminal) error {
	*t = Terminal{}
	err := format.UnmarshalExact(b, t)
	if err == nil {
		return nil
	}
	var v1 terminalV1
	if format.UnmarshalExact(b, &v1) != nil {
		*t = Terminal{}
		return err
	}
	*t = Terminal{Version: v1.Version, RunID: v1.RunID, Status: v1.Status, Result: v1.Result,
		Error: v1.Error, FinalStep: v1.FinalStep, EndedAt: v1.EndedAt}
	return nil
}

// DecodeTerminal decodes a terminal record.
func DecodeTerminal(b []byte) (*Terminal, error) {
	var t Terminal
	rd := format.NewReader(b)
	readTerminal(&rd, &t)
	if rd.Finish() != nil {
		if err := unmarshalTerminal(b, &t); err != nil {
			return nil, fmt.Errorf("%w: terminal: %v", ErrCorrupt, err)
		}
	}
	if t.Version != Version || t.Status < 1 || t.Status > 3 {
		return nil, fmt.Errorf("%w: terminal record version %d status %d", ErrCorrupt, t.Version, t.Status)
	}
	return &t, nil
}
