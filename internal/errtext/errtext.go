// Package errtext bounds the error and reason text that goes into durable
// records: a job's attempt history, a dead-letter notice's reason header,
// a run's terminal record and its notification (and so the terminal
// hook's Outcome.Error and a webhook's body). A step may fail with any
// error, say one that quotes a tool's 50 MB response; kept whole, it
// would be copied into several records of one transaction and could keep
// that transaction from committing. It is internal: the queue and the
// runtime share the bound, and their documentation states it. Safe makes
// the text of an error that the user's code returned safe to read.
package errtext

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Max is the largest error or reason text, in bytes, kept in a record.
const Max = 64 << 10

// HeaderMax is the largest reason kept in a job header (a dead-letter
// notice's queue.HeaderDeadReason): headers are small metadata.
const HeaderMax = 1 << 10

// Bound returns s if it has at most Max bytes, else Truncate(s, Max).
func Bound(s string) string { return Truncate(s, Max) }

// Truncate returns s if it has at most max bytes. Otherwise it returns a
// prefix of s cut at a UTF-8 character boundary, followed by
// "... (truncated, N bytes)" where N is len(s): at most max bytes in all,
// unless max is too small for the note, which is then returned alone. The result does not
// share memory with s, so a huge s is not kept alive by it.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := "... (truncated, " + strconv.Itoa(len(s)) + " bytes)"
	cut := max - len(note)
	if cut <= 0 {
		return note
	}
	// s[:cut] must end on a character boundary: back up over the
	// continuation bytes of a character that cut would split.
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	b := make([]byte, 0, cut+len(note))
	b = append(b, s[:cut]...)
	return string(append(b, note...))
}

// Safe returns err, or, if its Error method panics (a typed nil pointer
// returned as an error, a broken error type), an error whose text says so
// and that unwraps to err, so that errors.Is and errors.As still see what
// err is. Code that reads the text of errors it did not make (a handler's,
// a step's) passes them through Safe first: a panic there would come from
// a goroutine that nothing recovers.
func Safe(err error) error {
	if err == nil {
		return nil
	}
	if p, ok := errorPanics(err); ok {
		return &brokenError{err: err, panic: p}
	}
	return err
}

// errorPanics calls err.Error and reports what it panicked with, if it
// did.
func errorPanics(err error) (p any, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			p, panicked = r, true
		}
	}()
	_ = err.Error()
	return nil, false
}

// brokenError stands for an error whose Error method panics (see Safe).
type brokenError struct {
	err   error
	panic any
}

func (e *brokenError) Error() string {
	return fmt.Sprintf("an error of type %T whose Error method panicked: %v", e.err, e.panic)
}

func (e *brokenError) Unwrap() error { return e.err }
