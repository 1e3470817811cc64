package runrec

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/kvrecord"
)

// Run history (the runtime's Runtime.History):
//
//	workflow/history/<id>/<seq:010d>  History: one entry of the run's
//	                                   history, seq 1 first
//
// kvrecord.Run.HistorySeq is the seq of the last entry written. Every
// transaction that writes an entry compare-and-puts the run record with
// HistorySeq one more, and writes the entry under that seq: entries are
// numbered without gaps in commit order, and an attempt whose settlement
// did not commit has none. The transaction that writes entry n deletes
// entry n-HistoryKeep, so that the newest HistoryKeep are kept (the run's
// first HistorySeq-HistoryKeep are counted, not kept). They are deleted
// with the run record (expiry).
const HistoryPrefix = "workflow/history/"

// HistoryKeep is the number of a run's newest history entries kept.
const HistoryKeep = 1000

// Bounds of what an entry copies: the error text, and the preview of a
// payload or result (its first bytes).
const (
	HistoryErrorMax   = 2 << 10
	HistoryPreviewMax = 256
)

// Field numbers of a History entry. DO NOT renumber; add new ones.
const (
	hfKind = iota + 1
	hfStep
	hfAttempt
	hfQueue
	hfWorker
	hfStart
	hfEnd
	hfError
	hfPayloadSize
	hfResultSize
	hfPreview
	hfSignal
	hfDue
	hfJob
)

// History is one entry of a run's history, as stored: a field-numbered
// struct (format.FieldWriter: a map of field numbers, zero fields left
// out, integers in their shortest form), so that an entry costs only the
// fields it has, and fields can be added without a new shape (a reader
// skips the numbers it does not know). Its Kind is the runtime's
// HistoryKind; times are unix ns.
type History struct {
	Kind        string
	Step        uint32
	Attempt     uint32
	Queue       string
	Worker      string
	Start       int64
	End         int64
	Error       string
	PayloadSize uint64
	ResultSize  uint64
	Preview     []byte
	Signal      string
	Due         int64
	Job         string
}

// HistoryKey returns the key of entry seq of a run's history.
func HistoryKey(runID string, seq uint64) []byte {
	return AppendHistoryKey(make([]byte, 0, len(HistoryPrefix)+len(runID)+12), runID, seq)
}

// AppendHistoryKey appends the key of entry seq of a run's history to b.
func AppendHistoryKey(b []byte, runID string, seq uint64) []byte {
	b = append(b, HistoryPrefix...)
	b = append(b, runID...)
	b = append(b, '/')
	var d [20]byte
	digits := strconv.AppendUint(d[:0], seq, 10)
	for i := len(digits); i < 10; i++ {
		b = append(b, '0')
	}
	return append(b, digits...)
}

// HistoryKV returns the key of entry seq of a run's history and h's
// encoding, in one allocation (the key and the value share it; neither
// is appended to).
func HistoryKV(runID string, seq uint64, h *History) (key, value []byte) {
	b := AppendHistoryKey(make([]byte, 0, len(HistoryPrefix)+len(runID)+21+HistorySize(h)), runID, seq)
	key = b[:len(b):len(b)]
	b = AppendHistory(b, h)
	return key, b[len(key):len(b):len(b)]
}

// HistoryRunPrefix returns the prefix of all of a run's history entries.
func HistoryRunPrefix(runID string) []byte { return []byte(HistoryPrefix + runID + "/") }

// ParseHistorySeq returns the seq of a history key of run runID.
func ParseHistorySeq(key []byte, runID string) (uint64, error) {
	p := len(HistoryPrefix) + len(runID) + 1
	if len(key) < p+10 || string(key[:p]) != HistoryPrefix+runID+"/" {
		return 0, fmt.Errorf("%w: history key %q", kvrecord.ErrCorrupt, key)
	}
	seq, err := strconv.ParseUint(string(key[p:]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: history key %q", kvrecord.ErrCorrupt, key)
	}
	return seq, nil
}

// HistoryError returns s bounded for an entry: at most HistoryErrorMax
// bytes (see errtext.Truncate).
func HistoryError(s string) string { return errtext.Truncate(s, HistoryErrorMax) }

// HistoryPreview returns the preview of b kept in an entry: its first
// HistoryPreviewMax bytes, cut at a character boundary when b is UTF-8
// text. It shares b's memory (the encoder copies it).
func HistoryPreview(b []byte) []byte {
	if len(b) <= HistoryPreviewMax {
		return b
	}
	p := b[:HistoryPreviewMax]
	cut := len(p)
	for cut > len(p)-utf8.UTFMax && cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	if utf8.Valid(p[:cut]) {
		return p[:cut]
	}
	return p
}

// HistorySize returns an upper bound of the size of h's encoding.
func HistorySize(h *History) int {
	return 100 + len(h.Kind) + len(h.Queue) + len(h.Worker) + len(h.Error) + len(h.Preview) + len(h.Signal) + len(h.Job)
}

// EncodeHistory encodes a history entry.
func EncodeHistory(h *History) []byte {
	return AppendHistory(make([]byte, 0, HistorySize(h)), h)
}

// AppendHistory appends h's encoding to b.
func AppendHistory(b []byte, h *History) []byte {
	w := format.BeginFields(b)
	w.String(hfKind, h.Kind)
	w.Uint(hfStep, uint64(h.Step))
	w.Uint(hfAttempt, uint64(h.Attempt))
	w.String(hfQueue, h.Queue)
	w.String(hfWorker, h.Worker)
	w.Int(hfStart, h.Start)
	w.Int(hfEnd, h.End)
	w.String(hfError, h.Error)
	w.Uint(hfPayloadSize, h.PayloadSize)
	w.Uint(hfResultSize, h.ResultSize)
	if len(h.Preview) > 0 {
		w.Bytes(hfPreview, h.Preview)
	}
	w.String(hfSignal, h.Signal)
	w.Int(hfDue, h.Due)
	w.String(hfJob, h.Job)
	return w.End()
}

// DecodeHistory decodes a history entry. Its errors wrap
// kvrecord.ErrCorrupt.
func DecodeHistory(b []byte) (*History, error) {
	var h History
	rd := format.NewReader(b)
	if rd.Nil() {
		return nil, fmt.Errorf("%w: history entry: nil", kvrecord.ErrCorrupt)
	}
	rd.Numbered("history entry", func(num uint64) {
		switch num {
		case hfKind:
			h.Kind = rd.String()
		case hfStep:
			h.Step = rd.Uint32()
		case hfAttempt:
			h.Attempt = rd.Uint32()
		case hfQueue:
			h.Queue = rd.String()
		case hfWorker:
			h.Worker = rd.String()
		case hfStart:
			h.Start = rd.Int64()
		case hfEnd:
			h.End = rd.Int64()
		case hfError:
			h.Error = rd.String()
		case hfPayloadSize:
			h.PayloadSize = rd.Uint64()
		case hfResultSize:
			h.ResultSize = rd.Uint64()
		case hfPreview:
			h.Preview = rd.Bytes()
		case hfSignal:
			h.Signal = rd.String()
		case hfDue:
			h.Due = rd.Int64()
		case hfJob:
			h.Job = rd.String()
		default:
			rd.Skip() // a field of a newer version
		}
	})
	if err := rd.Finish(); err != nil {
		return nil, fmt.Errorf("%w: history entry: %v", kvrecord.ErrCorrupt, err)
	}
	if h.Kind == "" {
		return nil, fmt.Errorf("%w: history entry without a kind", kvrecord.ErrCorrupt)
	}
	return &h, nil
}
