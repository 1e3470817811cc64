// Package runrec is the runtime's writing side of its records: the
// encoders of the records package kvrecord defines and decodes, and the
// keys and records that only the runtime reads. Users read runs with
// kvrecord; nothing but the runtime (and its tests) writes them.
//
// # Keys
//
// Besides kvrecord's run and terminal records, the runtime keeps:
//
//	workflow/submitted/<inverted submit:020d>/<id>  empty: the newest-first
//	                                                index of runs (ListRuns)
//	workflow/mailbox/<id>/<name>/<seq:020d>         a signal's payload, kept
//	                                                until an AwaitSignal of
//	                                                that name consumes it
//	workflow/parked/<id>                            Parked: the next step of
//	                                                a paused run
//	workflow/memo/<id>/<key>                        the value of one entry of
//	                                                the run's memory
//	                                                (Outcome.WithMemo), raw
//	                                                bytes (possibly empty)
//	workflow/conc/<key>, workflow/conctail/<key>,   a concurrency key's
//	workflow/concline/<key>/<seq:020d>              slots, line tail and line
//	                                                (RunSpec.Concurrency; see
//	                                                conc.go)
//	workflow/history/<id>/<seq:010d>                History: one entry of the
//	                                                run's history (see
//	                                                history.go)
//	workflow/schedules/<name>                       Schedule: a schedule and
//	                                                its tick job (see
//	                                                schedule.go)
//
// A run's mailbox entries are numbered by kvrecord.Run.MailSeq in arrival
// order (seq 1 first), so a prefix scan of one name lists them oldest
// first. Every write to a run's mailbox or parked step also
// compare-and-puts its run record, so Run.Mailbox counts the entries
// exactly. Both are deleted with the run record (expiry), not when the run
// ends: a retried run keeps its mailbox.
//
// A run's memory is written only by the settlement of its current step,
// in the transaction that compare-and-puts the run record with
// Run.MemoKeys (entries) and Run.MemoBytes (the sum of the keys' and
// values' lengths) updated, so the counts are exact and a run whose
// MemoKeys is 0 has no entry: its steps read none. It too is deleted with
// the run record, and kept by Retry.
//
// The submitted index key of a run holds MaxInt64 minus its SubmittedAt,
// so that a forward scan lists the newest runs first. It is written in the
// transaction that writes the run record from absent (Submit) and deleted
// in the one that deletes it (expiry).
//
// # Queues
//
// Beside each step queue Q that a Runtime serves, it keeps two queues of
// its own, named here and nowhere else:
//
//	Q.dead    the notices queue: the queue hands it a notice of each step
//	          job it dead-lettered (EnqueueOptions.DeadLetterQueue), and a
//	          Cancel that knows no notify queue hands the run's
//	          notification over there
//	Q.timers  the timers queue: AwaitSignal's timeout jobs, the tick
//	          jobs of the schedules whose runs go to Q (see Schedule),
//	          and the deadline jobs of runs whose step 0 went to Q; the
//	          header workflow.timer names the kind ("schedule",
//	          "deadline"; none: a timeout)
//
// Their names are part of the on-bucket state (jobs wait on them across
// restarts): never change them.
//
// # Encoding
//
// As kvrecord's (see its Encoding section): the encoders here write the
// bytes of format.Marshal without reflection, newest shape only, and tests
// hold them to it. DO NOT reorder or remove fields.
//
//	Parked    shape 1: 7 fields
//	Schedule  shape 1: 25 fields; 27 with the per-key concurrency fields
package runrec

import (
	"crypto/sha256"
	"fmt"
	"math"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/kvrecord"
)

// Key prefixes of the runtime's own keys.
const (
	SubmittedPrefix = "workflow/submitted/"
	MailboxPrefix   = "workflow/mailbox/"
	ParkedPrefix    = "workflow/parked/"
	MemoPrefix      = "workflow/memo/"
)

// Field counts of the records written (see kvrecord's Encoding section).
const (
	runFields      = 47
	runFieldsH     = 44 // a run with history and without a concurrency key (see EncodeRun)
	runFieldsDL    = 43 // a run with a deadline, without history nor a key
	runFieldsV6    = 41 // a run without a deadline, history nor a key (see EncodeRun)
	runFieldsV5    = 33 // a run without parent, children nor deadline
	terminalFields = 11
	parkedFields   = 7
)

// HashInput returns the input hash kept in a run record.
func HashInput(input []byte) [32]byte { return sha256.Sum256(input) }

// MailboxKey returns the key of a run's mailbox entry number seq.
func MailboxKey(runID, name string, seq uint64) []byte {
	return []byte(fmt.Sprintf("%s%s/%s/%020d", MailboxPrefix, runID, name, seq))
}

// MailboxNamePrefix returns the prefix of a run's mailbox entries of one
// signal name; MailboxRunPrefix (name "") of all of them.
func MailboxNamePrefix(runID, name string) []byte {
	return []byte(MailboxPrefix + runID + "/" + name + "/")
}

// MailboxRunPrefix returns the prefix of all of a run's mailbox entries.
func MailboxRunPrefix(runID string) []byte { return []byte(MailboxPrefix + runID + "/") }

// MemoKey returns the key of the entry key of a run's memory. A run ID
// has no '/', so a memo key may.
func MemoKey(runID, key string) []byte { return []byte(MemoPrefix + runID + "/" + key) }

// MemoRunPrefix returns the prefix of all of a run's memory entries.
func MemoRunPrefix(runID string) []byte { return []byte(MemoPrefix + runID + "/") }

// ParkedKey returns the key of a paused run's parked step.
func ParkedKey(runID string) []byte { return []byte(ParkedPrefix + runID) }

// SubmittedKey returns the key of a run's entry in the newest-first index.
func SubmittedKey(submittedAt int64, runID string) []byte {
	b := make([]byte, 0, len(SubmittedPrefix)+21+len(runID))
	b = format.AppendPadded(append(b, SubmittedPrefix...), math.MaxInt64-submittedAt)
	return append(append(b, '/'), runID...)
}

// ParseSubmittedKey returns the submit time and run ID of a SubmittedKey.
func ParseSubmittedKey(key []byte) (submittedAt int64, runID string, err error) {
	inv, id, ok := format.ParseTimeKey(key, SubmittedPrefix)
	if !ok {
		return 0, "", fmt.Errorf("%w: key %q", kvrecord.ErrCorrupt, key)
	}
	return math.MaxInt64 - inv, id, nil
}

// EncodeRun encodes a run record: the bytes of format.Marshal, written
// without reflection. It sets r.Version. A run without a parent and
// without children (the shape 6 fields all zero) is written in shape 5,
// those fields left out, so that runs which use no child runs write the
// records they wrote before them, byte for byte; kvrecord reads either.
// Likewise a run without a deadline (Deadline and DeadlineJob zero) is
// written without the deadline fields, a run without history entries
// (HistorySeq 0) without its history field, and a run without a
// concurrency key (ConcKey, ConcLimit, ConcLine zero) without the
// concurrency fields.
func EncodeRun(r *kvrecord.Run) []byte {
	return appendRun(make([]byte, 0, runSize(r)), r)
}

// runSize bounds the size of r's encoding.
func runSize(r *kvrecord.Run) int {
	size := 170 + len(r.RunID) + len(r.CurrentJob) + len(r.NotifyQueue) + len(r.WaitFor) + len(r.WaitTimer) + len(r.Queue) + len(r.Parent) + len(r.DeadlineJob) + 50 + len(r.ConcKey) + 15
	return size + format.StringMapSize(r.Headers)
}

// RunKV returns the key of r (kvrecord.RunKey) and EncodeRun(r), in one
// allocation (the key and the value share it; neither is appended to).
// It sets r.Version.
func RunKV(r *kvrecord.Run) (key, value []byte) {
	b := make([]byte, 0, len(kvrecord.RunPrefix)+len(r.RunID)+runSize(r))
	b = append(append(b, kvrecord.RunPrefix...), r.RunID...)
	key = b[:len(b):len(b)]
	b = appendRun(b, r)
	return key, b[len(key):len(b):len(b)]
}

func appendRun(b []byte, r *kvrecord.Run) []byte {
	r.Version = kvrecord.Version
	noConc := noConcFields(r)
	switch {
	case !noConc:
		b = format.AppendArrayLen(b, runFields)
	case r.HistorySeq != 0:
		b = format.AppendArrayLen(b, runFieldsH)
	case !noDeadlineFields(r):
		b = format.AppendArrayLen(b, runFieldsDL)
	case noChildFields(r):
		b = format.AppendArrayLen(b, runFieldsV5)
	default:
		b = format.AppendArrayLen(b, runFieldsV6)
	}
	b = format.AppendUint8(b, r.Version)
	b = format.AppendString(b, r.RunID)
	b = format.AppendInt64(b, r.SubmittedAt)
	b = format.AppendBytes(b, r.InputHash[:])
	b = format.AppendUint8(b, r.State)
	b = format.AppendUint32(b, r.CurrentStep)
	b = format.AppendString(b, r.CurrentJob)
	b = format.AppendBool(b, r.Cancel)
	b = format.AppendStringMap(b, r.Headers)
	b = format.AppendInt32(b, r.Priority)
	b = format.AppendUint32(b, r.MaxAttempts)
	b = format.AppendUint8(b, r.Status)
	b = format.AppendInt64(b, r.EndedAt)
	b = format.AppendString(b, r.NotifyQueue)
	b = format.AppendUint32(b, r.Retries)
	b = format.AppendInt64(b, r.UpdatedAt)
	b = format.AppendString(b, r.WaitFor)
	b = format.AppendInt64(b, r.WaitDeadline)
	b = format.AppendString(b, r.WaitTimer)
	b = format.AppendBool(b, r.Paused)
	b = format.AppendBool(b, r.Parked)
	b = format.AppendUint64(b, r.MailSeq)
	b = format.AppendUint32(b, r.Mailbox)

	b = format.AppendInt64(b, r.StepTimeout)
	b = format.AppendInt64(b, r.StartAt)
	b = format.AppendUint32(b, r.RetryMaxAttempts)
	b = format.AppendInt64(b, r.RetryInitialBackoff)
	b = format.AppendInt64(b, r.RetryMaxBackoff)
	b = format.AppendFloat64(b, r.RetryMultiplier)
	b = format.AppendFloat64(b, r.RetryJitter)
	b = format.AppendUint32(b, r.MemoKeys)
	b = format.AppendUint64(b, r.MemoBytes)
	b = format.AppendString(b, r.Queue)
	if noChildFields(r) && noDeadlineFields(r) && r.HistorySeq == 0 && noConc {
		return b
	}
	b = format.AppendString(b, r.Parent)
	b = format.AppendUint32(b, r.ParentStep)
	b = format.AppendUint32(b, r.ChildIndex)
	b = format.AppendUint32(b, r.Depth)
	b = format.AppendBool(b, r.JoinReported)
	b = format.AppendUint32(b, r.Spawned)
	b = format.AppendUint32(b, r.SpawnStep)
	b = format.AppendUint32(b, r.Pending)
	if noDeadlineFields(r) && r.HistorySeq == 0 && noConc {
		return b
	}
	// Run deadlines.
	b = format.AppendInt64(b, r.Deadline)
	b = format.AppendString(b, r.DeadlineJob)
	if r.HistorySeq == 0 && noConc {
		return b
	}
	b = format.AppendUint64(b, r.HistorySeq) // run history
	if noConc {
		return b
	}
	// Per-key concurrency.
	b = format.AppendString(b, r.ConcKey)
	b = format.AppendUint32(b, r.ConcLimit)
	return format.AppendUint64(b, r.ConcLine)
}

// noConcFields reports whether r's per-key concurrency fields are all
// zero.
func noConcFields(r *kvrecord.Run) bool {
	return r.ConcKey == "" && r.ConcLimit == 0 && r.ConcLine == 0
}

// noDeadlineFields reports whether r's run deadline fields are all zero.
func noDeadlineFields(r *kvrecord.Run) bool { return r.Deadline == 0 && r.DeadlineJob == "" }

// noChildFields reports whether r's shape 6 fields are all zero.
func noChildFields(r *kvrecord.Run) bool {
	return r.Parent == "" && r.ParentStep == 0 && r.ChildIndex == 0 && r.Depth == 0 && !r.JoinReported &&
		r.Spawned == 0 && r.SpawnStep == 0 && r.Pending == 0
}

// EncodeTerminal encodes a terminal record: the bytes of format.Marshal,
// written without reflection. It sets t.Version.
func EncodeTerminal(t *kvrecord.Terminal) []byte {
	return appendTerminal(make([]byte, 0, terminalSize(t)), t)
}

// terminalSize bounds the size of t's encoding.
func terminalSize(t *kvrecord.Terminal) int {
	return 80 + len(t.RunID) + len(t.Result) + len(t.Error) + len(t.DeadJob) + len(t.Payload) + len(t.Queue)
}

// TerminalKV returns the key of t (kvrecord.TerminalKey of its EndedAt
// and RunID) and EncodeTerminal(t), in one allocation (the key and the
// value share it; neither is appended to). It sets t.Version.
func TerminalKV(t *kvrecord.Terminal) (key, value []byte) {
	b := make([]byte, 0, len(kvrecord.TerminalPrefix)+22+len(t.RunID)+terminalSize(t))
	b = format.AppendPadded(append(b, kvrecord.TerminalPrefix...), t.EndedAt)
	b = append(append(b, '/'), t.RunID...)
	key = b[:len(b):len(b)]
	b = appendTerminal(b, t)
	return key, b[len(key):len(b):len(b)]
}

func appendTerminal(b []byte, t *kvrecord.Terminal) []byte {
	t.Version = kvrecord.Version
	b = format.AppendArrayLen(b, terminalFields)
	b = format.AppendUint8(b, t.Version)
	b = format.AppendString(b, t.RunID)
	b = format.AppendUint8(b, t.Status)
	b = format.AppendBytes(b, t.Result)
	b = format.AppendString(b, t.Error)
	b = format.AppendUint32(b, t.FinalStep)
	b = format.AppendInt64(b, t.EndedAt)
	b = format.AppendUint32(b, t.Attempt)
	b = format.AppendString(b, t.DeadJob)
	b = format.AppendBytes(b, t.Payload)
	return format.AppendString(b, t.Queue)
}

// Parked is the next step of a paused run, kept for Resume.
type Parked struct {
	Version uint8
	RunID   string
	Step    uint32
	Payload []byte
	// DueAt is when the step is due (unix ns): Resume enqueues it for then,
	// or now if that has passed.
	DueAt int64
	// Signal is the signal name that woke the step ("" if the step did not
	// follow an await); TimedOut says the await timed out instead.
	Signal   string
	TimedOut bool
}

// EncodeParked encodes a parked step (format.Marshal's bytes). It sets
// p.Version.
func EncodeParked(p *Parked) []byte {
	p.Version = kvrecord.Version
	b := format.AppendArrayLen(make([]byte, 0, 64+len(p.RunID)+len(p.Payload)+len(p.Signal)), parkedFields)
	b = format.AppendUint8(b, p.Version)
	b = format.AppendString(b, p.RunID)
	b = format.AppendUint32(b, p.Step)
	b = format.AppendBytes(b, p.Payload)
	b = format.AppendInt64(b, p.DueAt)
	b = format.AppendString(b, p.Signal)
	return format.AppendBool(b, p.TimedOut)
}

// DecodeParked decodes a parked step. Its errors wrap kvrecord.ErrCorrupt.
func DecodeParked(b []byte) (*Parked, error) {
	var p Parked
	if err := format.UnmarshalExact(b, &p); err != nil {
		return nil, fmt.Errorf("%w: parked step: %v", kvrecord.ErrCorrupt, err)
	}
	if p.Version != kvrecord.Version || p.RunID == "" {
		return nil, fmt.Errorf("%w: parked step version %d, id %q", kvrecord.ErrCorrupt, p.Version, p.RunID)
	}
	return &p, nil
}

// NoticesQueue names the notices queue of the step queue stepQueue.
func NoticesQueue(stepQueue string) string { return stepQueue + ".dead" }

// TimersQueue names the timers queue of the step queue stepQueue.
func TimersQueue(stepQueue string) string { return stepQueue + ".timers" }

// IsInternalQueue reports whether name is the notices or timers queue of
// one of the step queues in names.
func IsInternalQueue(name string, names []string) bool {
	for _, base := range names {
		if name == NoticesQueue(base) || name == TimersQueue(base) {
			return true
		}
	}
	return false
}
