package main

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// termSafe passes what the CLI prints to its terminal with what could
// drive the terminal made visible: a run's error, a job's headers or a
// queue's name are whatever a service stored, and an escape sequence in
// one (ESC [ ... to recolor or move the cursor, OSC 52 to write the
// operator's clipboard), a carriage return or backspace that hides what
// went before, or a right-to-left override that reorders a line, must
// reach the operator as text. It writes a carriage return as \r, other
// control characters but newline and tab (DEL and the C1 controls
// included) and bidirectional formatting characters as \u escapes
// (\u001b, \u202e), and each byte of invalid UTF-8 as \xHH. JSON output
// keeps its meaning: encoding/json escapes control characters but DEL,
// and invalid UTF-8, itself, and \r and a \u escape in a JSON string are
// the characters they stand for. Writes may come from several goroutines
// (loggers): each is passed whole.
type termSafe struct {
	w    io.Writer
	mu   sync.Mutex
	tail []byte // the start of a character split across writes
	buf  []byte
}

func newTermSafe(w io.Writer) *termSafe { return &termSafe{w: w} }

func (t *termSafe) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := p
	if len(t.tail) > 0 {
		in = append(t.tail, p...)
		t.tail = nil
	}
	out := t.buf[:0]
	for i := 0; i < len(in); {
		c := in[i]
		if c >= 0x20 && c < 0x7f || c == '\n' || c == '\t' {
			out = append(out, c)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			if c == '\r' {
				out = append(out, `\r`...)
			} else {
				out = fmt.Appendf(out, `\u%04x`, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(in[i:]) {
			t.tail = append(t.tail[:0], in[i:]...) // the rest comes next
			break
		}
		r, n := utf8.DecodeRune(in[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = fmt.Appendf(out, `\x%02x`, c)
		case r >= 0x80 && r <= 0x9f, bidiControl(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, in[i:i+n]...)
		}
		i += n
	}
	t.buf = out
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// bidiControl reports whether r is a bidirectional formatting character:
// it reorders the text around it as displayed.
func bidiControl(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
