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
// msgpack arrays, version first. DO NOT reorder or remove fields; append
// new ones at the end and bump Version only for incompatible changes.
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

// EncodeRun encodes a run record.
func EncodeRun(r *Run) []byte {
	r.Version = Version
	b, err := format.Marshal(r)
	if err != nil {
		panic("kvrecord: " + err.Error()) // plain fields only
	}
	return b
}

// DecodeRun decodes a run record.
func DecodeRun(b []byte) (*Run, error) {
	var r Run
	if err := format.UnmarshalExact(b, &r); err != nil {
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

// EncodeTerminal encodes a terminal record.
func EncodeTerminal(t *Terminal) []byte {
	t.Version = Version
	b, err := format.Marshal(t)
	if err != nil {
		panic("kvrecord: " + err.Error())
	}
	return b
}

// DecodeTerminal decodes a terminal record.
func DecodeTerminal(b []byte) (*Terminal, error) {
	var t Terminal
	if err := format.UnmarshalExact(b, &t); err != nil {
		return nil, fmt.Errorf("%w: terminal: %v", ErrCorrupt, err)
	}
	if t.Version != Version || t.Status < 1 || t.Status > 3 {
		return nil, fmt.Errorf("%w: terminal record version %d status %d", ErrCorrupt, t.Version, t.Status)
	}
	return &t, nil
}
