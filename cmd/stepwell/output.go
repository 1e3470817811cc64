package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stepwell/stepwell/queue"
)

// previewBytes bounds the bytes of a payload or result shown in text output.
const previewBytes = 256

// lastErrorWidth bounds an error message in a table cell.
const lastErrorWidth = 72

// newTable returns an aligned-columns writer; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// writeJSON prints v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// textTime formats t for people: UTC, seconds; "-" for the zero time.
func textTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// jsonTime is t in UTC for JSON, or nil (null) for the zero time.
func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// unixTime converts a record's unix-nanosecond time; 0 is the zero time.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// printable reports whether b is UTF-8 text without control characters
// other than tab, newline and carriage return.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

// textOf returns b as a string when it is printable, else nil (null).
func textOf(b []byte) *string {
	if b == nil || !printable(b) {
		return nil
	}
	s := string(b)
	return &s
}

// preview describes b in one line for text output: its size and a quoted
// prefix when printable, else a base64 prefix.
func preview(b []byte) string {
	if b == nil {
		return "-"
	}
	head, more := b, ""
	if len(head) > previewBytes {
		head, more = head[:previewBytes], "..."
		for !utf8.Valid(head) && len(head) > previewBytes-utf8.UTFMax {
			head = head[:len(head)-1] // do not split a rune
		}
	}
	if printable(head) {
		return fmt.Sprintf("(%s) %s%s", size(len(b)), strconv.Quote(string(head)), more)
	}
	return fmt.Sprintf("(%s) base64:%s%s", size(len(b)), base64.StdEncoding.EncodeToString(head), more)
}

func size(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}

// oneLine squeezes s onto one line of at most width runes.
func oneLine(s string, width int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-3]) + "..."
}

// orDash returns s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// headersJSON never returns nil, so headers print as {} rather than null.
func headersJSON(h map[string]string) map[string]string {
	if h == nil {
		return map[string]string{}
	}
	return h
}

// attemptJSON is one entry of a job's attempt history.
type attemptJSON struct {
	At    *time.Time `json:"at"`
	Error string     `json:"error"`
}

func historyJSON(h []queue.Attempt) []attemptJSON {
	out := make([]attemptJSON, 0, len(h))
	for _, a := range h {
		out = append(out, attemptJSON{At: jsonTime(a.At), Error: a.Error})
	}
	return out
}

// lastError returns the newest error of a job's history, or "".
func lastError(j *queue.Job) (string, time.Time) {
	if len(j.History) == 0 {
		return "", time.Time{}
	}
	a := j.History[len(j.History)-1]
	return a.Error, a.At
}
