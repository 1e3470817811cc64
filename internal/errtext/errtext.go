// Package errtext bounds the error and reason text that goes into durable
// records: a job's attempt history, a dead-letter notice's reason header,
// a run's terminal record and its notification (and so the terminal
// hook's Outcome.Error and a webhook's body). A step may fail with any
// error, say one that quotes a tool's 50 MB response; kept whole, it
// would be copied into several records of one transaction and could keep
// that transaction from committing. It is internal: the queue and the
// runtime share the bound, and their documentation states it.
package errtext

import (
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
