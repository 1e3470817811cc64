// Package kvrecord defines the durable records the workflow runtime keeps in
// the queue's key-value space: one run record per run, and a terminal
// record per finished run for the terminal retention window.
//
// # Keys
//
//	workflow/runs/<run id>                       Run
//	workflow/terminal/<ended unix ns:020d>/<id>  Terminal (time first, so
//	                                             expiry is a prefix scan)
//
// # Encoding
//
// msgpack arrays, version first, exactly as format.Marshal encodes the
// structs (written and read without reflection by the codecs in this file,
// which tests hold to format.Marshal). DO NOT reorder or remove fields. An
// appended field changes the field count, which the decoder (reflective or
// not) rejects in records written before: appending one needs a decoder for
// the shorter form as well.
// Decode* never panic on garbage: they return an error wrapping ErrCorrupt
// (fuzzed in this package).
package kvrecord

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

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
}

// HashInput returns the input hash kept in a run record.
func HashInput(input []byte) [32]byte { return sha256.Sum256(input) }

// RunKey returns the key of a run record.
func RunKey(runID string) []byte { return []byte(RunPrefix + runID) }

// TerminalKey returns the key of a terminal record.
func TerminalKey(endedAt int64, runID string) []byte {
	return []byte(fmt.Sprintf("%s%020d/%s", TerminalPrefix, endedAt, runID))
}

// ParseTerminalKey returns the ended time and run ID of a terminal key.
func ParseTerminalKey(key []byte) (endedAt int64, runID string, err error) {
	rest, ok := strings.CutPrefix(string(key), TerminalPrefix)
	if !ok || len(rest) < 22 || rest[20] != '/' {
		return 0, "", fmt.Errorf("%w: terminal key %q", ErrCorrupt, key)
	}
	for _, c := range rest[:20] {
		if c < '0' || c > '9' {
			return 0, "", fmt.Errorf("%w: terminal key %q", ErrCorrupt, key)
		}
		endedAt = endedAt*10 + int64(c-'0')
	}
	return endedAt, rest[21:], nil
}

// Field counts of the records (see the Encoding section above).
const (
	runFields      = 14
	terminalFields = 7
)

// EncodeRun encodes a run record: the bytes of format.Marshal, written
// without reflection.
func EncodeRun(r *Run) []byte {
	r.Version = Version
	size := 128 + len(r.RunID) + len(r.CurrentJob) + len(r.NotifyQueue)
	size += format.StringMapSize(r.Headers)
	return appendRun(make([]byte, 0, size), r)
}

func appendRun(b []byte, r *Run) []byte {
	b = format.AppendArrayLen(b, runFields)
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
	return format.AppendString(b, r.NotifyQueue)
}

func readRun(rd *format.Reader, r *Run) {
	rd.Fields(runFields)
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
	r.NotifyQueue = rd.String()
}

// DecodeRun decodes a run record.
func DecodeRun(b []byte) (*Run, error) {
	var r Run
	rd := format.NewReader(b)
	readRun(&rd, &r)
	if err := format.Exact(&rd, b, &r); err != nil {
		return nil, fmt.Errorf("%w: run: %v", ErrCorrupt, err)
	}
	if r.Version != Version {
		return nil, fmt.Errorf("%w: run record version %d", ErrCorrupt, r.Version)
	}
	if r.State < StateActive || r.State > StateTerminal || r.RunID == "" {
		return nil, fmt.Errorf("%w: run record state %d, id %q", ErrCorrupt, r.State, r.RunID)
	}
	return &r, nil
}

// EncodeTerminal encodes a terminal record: the bytes of format.Marshal,
// written without reflection.
func EncodeTerminal(t *Terminal) []byte {
	t.Version = Version
	size := 64 + len(t.RunID) + len(t.Result) + len(t.Error)
	return appendTerminal(make([]byte, 0, size), t)
}

func appendTerminal(b []byte, t *Terminal) []byte {
	b = format.AppendArrayLen(b, terminalFields)
	b = format.AppendUint8(b, t.Version)
	b = format.AppendString(b, t.RunID)
	b = format.AppendUint8(b, t.Status)
	b = format.AppendBytes(b, t.Result)
	b = format.AppendString(b, t.Error)
	b = format.AppendUint32(b, t.FinalStep)
	return format.AppendInt64(b, t.EndedAt)
}

func readTerminal(rd *format.Reader, t *Terminal) {
	rd.Fields(terminalFields)
	t.Version = rd.Uint8()
	t.RunID = rd.String()
	t.Status = rd.Uint8()
	t.Result = rd.Bytes()
	t.Error = rd.String()
	t.FinalStep = rd.Uint32()
	t.EndedAt = rd.Int64()
}

// DecodeTerminal decodes a terminal record.
func DecodeTerminal(b []byte) (*Terminal, error) {
	var t Terminal
	rd := format.NewReader(b)
	readTerminal(&rd, &t)
	if err := format.Exact(&rd, b, &t); err != nil {
		return nil, fmt.Errorf("%w: terminal: %v", ErrCorrupt, err)
	}
	if t.Version != Version || t.Status < 1 || t.Status > 3 {
		return nil, fmt.Errorf("%w: terminal record version %d status %d", ErrCorrupt, t.Version, t.Status)
	}
	return &t, nil
}
