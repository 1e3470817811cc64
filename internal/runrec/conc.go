package runrec

import (
	"fmt"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/kvrecord"
)

// Per-key concurrency (the runtime's RunSpec.Concurrency) keeps, per key
// in use:
//
//	workflow/conc/<key>                    ConcState: the slots taken
//	                                       and the limit
//	workflow/conctail/<key>                ConcTail: the line's last
//	                                       sequence number
//	workflow/concline/<key>/<seq:020d>     ConcEntry: a run waiting for a
//	                                       slot, and its step to start
//
// A key has no '/' (the runtime refuses one), so a key's line is a
// prefix of its own, scanned oldest first. A line entry is written and
// deleted with the waiting run's record (kvrecord.Run.ConcLine), so the
// two agree in every committed state; a run joins the line by
// compare-and-putting the tail, under the condition that the state did
// not change (it is full). The state and the tail are kept apart so that
// runs joining the line and runs leaving it (a slot passed on) do not
// write the same key. Both are deleted when the last slot is released
// with nobody waiting.
//
//	ConcState shape 1: 3 fields
//	ConcTail  shape 1: 2 fields
//	ConcEntry shape 1: 6 fields
const (
	ConcPrefix     = "workflow/conc/"
	ConcTailPrefix = "workflow/conctail/"
	ConcLinePrefix = "workflow/concline/"
)

// ConcTailKey returns the key of a concurrency key's line tail.
func ConcTailKey(key string) []byte { return []byte(ConcTailPrefix + key) }

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
}

// ConcTail is the tail of a concurrency key's line.
type ConcTail struct {
	Version uint8
	// NextSeq is the sequence of the line's newest entry (the next one
	// gets NextSeq+1).
	NextSeq uint64
}

const (
	concStateFields = 3
	concTailFields  = 2
	concEntryFields = 6
)

// EncodeConcTail encodes a line's tail (format.Marshal's bytes). It sets
// t.Version.
func EncodeConcTail(t *ConcTail) []byte {
	t.Version = kvrecord.Version
	b := format.AppendArrayLen(make([]byte, 0, 16), concTailFields)
	b = format.AppendUint8(b, t.Version)
	return format.AppendUint64(b, t.NextSeq)
}

// DecodeConcTail decodes a line's tail. Its errors wrap
// kvrecord.ErrCorrupt.
func DecodeConcTail(b []byte) (*ConcTail, error) {
	var t ConcTail
	rd := format.NewReader(b)
	rd.Fields(concTailFields)
	t.Version = rd.Uint8()
	t.NextSeq = rd.Uint64()
	if err := rd.Finish(); err != nil || t.Version != kvrecord.Version {
		return nil, fmt.Errorf("%w: concurrency line tail (version %d): %v", kvrecord.ErrCorrupt, t.Version, err)
	}
	return &t, nil
}

// EncodeConcState encodes a key's state (format.Marshal's bytes). It sets
// s.Version.
func EncodeConcState(s *ConcState) []byte {
	s.Version = kvrecord.Version
	b := format.AppendArrayLen(make([]byte, 0, 32), concStateFields)
	b = format.AppendUint8(b, s.Version)
	b = format.AppendUint32(b, s.Active)
	return format.AppendUint32(b, s.Limit)
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
