package ui

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a page shows of one value; the rest is cut, and the
// value's size said.
const (
	maxShownText  = 16 << 10 // a payload, result or memo value as text or JSON
	maxShownHex   = 1 << 10  // as a hex dump
	maxShownShort = 2 << 10  // a header, an error, a name
)

// shown is a value as a page draws it.
type shown struct {
	Kind      string // "json", "text", "binary", "empty"
	Text      string // what to draw (valid UTF-8; html/template escapes it)
	Size      int    // the value's length in bytes
	Truncated bool
}

// showBytes renders b as pretty JSON, text or a hex dump, cut to the
// page's bounds.
func showBytes(b []byte) shown {
	s := shown{Size: len(b)}
	switch {
	case len(b) == 0:
		s.Kind = "empty"
	case utf8.Valid(b) && json.Valid(b):
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil && out.Len() <= 4*maxShownText {
			b = out.Bytes()
		}
		s.Kind = "json"
		s.Text, s.Truncated = cut(string(b), maxShownText)
	case utf8.Valid(b) && printable(b):
		s.Kind = "text"
		s.Text, s.Truncated = cut(string(b), maxShownText)
	default:
		s.Kind = "binary"
		n := min(len(b), maxShownHex)
		s.Text, s.Truncated = hex.Dump(b[:n]), n < len(b)
	}
	return s
}

// printable reports whether b (valid UTF-8) reads as text: no control
// characters but tabs and newlines.
func printable(b []byte) bool {
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

// cut returns s cut to at most n bytes on a rune boundary, and whether
// it cut.
func cut(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// clean makes user text safe to draw as a short string: invalid UTF-8
// replaced, cut to maxShownShort with its size said.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if c, ok := cut(s, maxShownShort); ok {
		return fmt.Sprintf("%s… (%d bytes in all)", c, len(s))
	}
	return s
}

// fmtTime is a time on pages: UTC to the millisecond; "-" for zero.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// isoTime is a time in a machine-readable attribute (time's datetime).
func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ago is how long before now t was, rounded for reading.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in " + roundDur(-d).String()
	case d < time.Second:
		return "just now"
	}
	return roundDur(d).String() + " ago"
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	case d < time.Hour:
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}

// sizeText is a byte count for reading.
func sizeText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
