package errtext

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	if got := Truncate("short", 10); got != "short" {
		t.Fatalf("Truncate(short) = %q", got)
	}
	exact := strings.Repeat("a", Max)
	if got := Bound(exact); got != exact {
		t.Fatalf("Bound of exactly Max bytes changed it (%d bytes)", len(got))
	}
	long := strings.Repeat("a", Max+1)
	got := Bound(long)
	if len(got) > Max || !strings.HasSuffix(got, "... (truncated, 65537 bytes)") || !strings.HasPrefix(got, "aaaa") {
		t.Fatalf("Bound(%d bytes) = %d bytes, ending %q", len(long), len(got), got[max(0, len(got)-40):])
	}
	if len(got) < Max-40 {
		t.Fatalf("Bound kept only %d bytes", len(got))
	}
	// Multi-byte characters are never split, wherever the cut falls.
	for pad := range 4 {
		s := strings.Repeat("x", pad) + strings.Repeat("é€😀", 3*Max)
		got := Bound(s)
		if len(got) > Max || !utf8.ValidString(got) {
			t.Fatalf("pad %d: Bound = %d bytes, valid UTF-8 %v", pad, len(got), utf8.ValidString(got))
		}
	}
	// A bound too small for any of s: just the note.
	if got := Truncate("0123456789abcdef", 4); got != "... (truncated, 16 bytes)" {
		t.Fatalf("Truncate(16 bytes, 4) = %q", got)
	}
}

// typedNil is an error type whose Error dereferences its receiver: a nil
// *typedNil returned as an error (a common slip) panics when read.
type typedNil struct{ msg string }

func (e *typedNil) Error() string { return e.msg }

// lazyWrap reads the error it wraps when read (fmt.Errorf reads it at
// once, and survives its panic).
type lazyWrap struct{ err error }

func (w lazyWrap) Error() string { return "step: " + w.err.Error() }
func (w lazyWrap) Unwrap() error { return w.err }

func TestSafe(t *testing.T) {
	if Safe(nil) != nil {
		t.Fatal("Safe(nil) is not nil")
	}
	plain := errors.New("plain")
	if Safe(plain) != plain {
		t.Fatal("Safe changed an error whose Error works")
	}
	var p *typedNil
	for _, err := range []error{p, lazyWrap{p}} {
		s := Safe(err)
		if s == err {
			t.Fatalf("Safe(%T) kept an error whose Error panics", err)
		}
		if text := s.Error(); !strings.Contains(text, "Error method panicked") {
			t.Errorf("Safe(%T).Error() = %q", err, text)
		}
		var got *typedNil
		if !errors.As(s, &got) || !errors.Is(s, err) {
			t.Errorf("Safe(%T) hides what it is from errors.As and errors.Is", err)
		}
	}
}
