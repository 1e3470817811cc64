package runrec

import (
	"fmt"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/kvrecord"
)

// Per-key concurrency (the runtime's RunSpec.Concurrency) keeps, per key
// in use:
//
//	workflow/conc/<key>                    ConcState: the slots taken,
//	                                       the limit, the line's length
//	                                       and its last sequence
//	workflow/concline/<key>/<seq:020d>     ConcEntry: a run waiting for a
//	                                       slot, and its step to start
//
// A key has no '/' (the runtime refuses one), so a key's line is a
// prefix of its own, scanned oldest first. Every write to a key's line
// also compare-and-puts its state (Waiting, NextSeq), in the transaction
// that writes the waiting run's record (kvrecord.Run.ConcLine), so the
// three agree in every committed state. The state is deleted when the
// last slot is released with nobody waiting.
//
//	ConcState shape 1: 5 fields
//	ConcEntry shape 1: 6 fields
const (
	ConcPrefix     = "workflow/conc/"
	ConcLinePrefix = "workflow/concline/"
)

// ConcStateKey returns the key of a concurrency key's state.
func ConcStateKey(key string) []byte { return []byte(ConcPrefix + key) }

// ConcLineKey returns the key of a concurrency key's line entry seq.
func ConcLineKey(key string, seq uint64) []byte {
	return []byte(fmt.Sprintf("%s%s/%020d", ConcLinePrefix, key, seq))
}

// ConcLineOf returns the prefix of a concurrency key's line.
func ConcLineOf(key string) []byte { return []byte(ConcLinePrefix + key + "/") }

// ConcState is the state of one concurrency key.
type ConcState struct {
	Version uint8
	// Active counts the runs holding a slot: active runs with the key
	// that are not in the line.
	Active uint32
	// Limit is the Limit of the newest submitted run with the key.
	Limit uint32
	// Waiting counts the line's entries.
	Waiting uint32
	// NextSeq is the sequence of the line's newest entry (the next one
	// gets NextSeq+1).
	NextSeq uint64
}

const (
	concStateFields = 5
	concEntryFields = 6
)

// EncodeConcState encodes a key's state (format.Marshal's bytes). It sets
// s.Version.
func EncodeConcState(s *ConcState) []byte {
	s.Version = kvrecord.Version
	b := format.AppendArrayLen(make([]byte, 0, 32), concStateFields)
	b = format.AppendUint8(b, s.Version)
	b = format.AppendUint32(b, s.Active)
	b = format.AppendUint32(b, s.Limit)
	b = format.AppendUint32(b, s.Waiting)
	return format.AppendUint64(b, s.NextSeq)
}

// DecodeConcState decodes a key's state. Its errors wrap
// kvrecord.ErrCorrupt.
func DecodeConcState(b []byte) (*ConcState, error) {
	var s ConcState
	rd := format.NewReader(b)
	rd.Fields(concStateFields)
	s.Version = rd.Uint8()
	s.Active = rd.Uint32()
	s.Limit = rd.Uint32()
	s.Waiting = rd.Uint32()
	s.NextSeq = rd.Uint64()
	if err := rd.Finish(); err != nil || s.Version != kvrecord.Version {
		return nil, fmt.Errorf("%w: concurrency state (version %d): %v", kvrecord.ErrCorrupt, s.Version, err)
	}
	return &s, nil
}

// ConcEntry is a run waiting in its key's line: the step that starts it
// when it gets a slot.
type ConcEntry struct {
	Version uint8
	RunID   string
	Step    uint32
	Payload []byte
	// DueAt is when the step is due (unix ns; 0: at once): a run
	// submitted with a StartAt that gets its slot before then waits for it,
	// holding the slot.
	DueAt int64
	// TraceParent is the run's trace context ("": none).
	TraceParent string
}

// EncodeConcEntry encodes a line entry (format.Marshal's bytes). It sets
// e.Version.
func EncodeConcEntry(e *ConcEntry) []byte {
	e.Version = kvrecord.Version
	b := format.AppendArrayLen(make([]byte, 0, 48+len(e.RunID)+len(e.Payload)+len(e.TraceParent)), concEntryFields)
	b = format.AppendUint8(b, e.Version)
	b = format.AppendString(b, e.RunID)
	b = format.AppendUint32(b, e.Step)
	b = format.AppendBytes(b, e.Payload)
	b = format.AppendInt64(b, e.DueAt)
	return format.AppendString(b, e.TraceParent)
}

// DecodeConcEntry decodes a line entry. Its errors wrap
// kvrecord.ErrCorrupt.
func DecodeConcEntry(b []byte) (*ConcEntry, error) {
	var e ConcEntry
	rd := format.NewReader(b)
	rd.Fields(concEntryFields)
	e.Version = rd.Uint8()
	e.RunID = rd.String()
	e.Step = rd.Uint32()
	e.Payload = rd.Bytes()
	e.DueAt = rd.Int64()
	e.TraceParent = rd.String()
	if err := rd.Finish(); err != nil || e.Version != kvrecord.Version || e.RunID == "" {
		return nil, fmt.Errorf("%w: concurrency line entry (version %d, run %q): %v", kvrecord.ErrCorrupt, e.Version, e.RunID, err)
	}
	return &e, nil
}
