package errtext

import (
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
