package runtime

import (
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestNewJobID: job IDs are valid ULIDs of the current time, and
// distinct.
func TestNewJobID(t *testing.T) {
	before := ulid.Timestamp(time.Now())
	seen := make(map[string]bool)
	for range 100_000 {
		s := newJobID()
		id, err := ulid.ParseStrict(s)
		if err != nil || id.String() != s {
			t.Fatalf("newJobID() = %q: not a ULID (%v)", s, err)
		}
		if ms := id.Time(); ms < before || ms > ulid.Timestamp(time.Now()) {
			t.Fatalf("newJobID() = %q: time %d, want from %d to now", s, ms, before)
		}
		if seen[s] {
			t.Fatalf("newJobID() = %q twice", s)
		}
		seen[s] = true
	}
	if n := testing.AllocsPerRun(100, func() { _ = newJobID() }); n > 1 {
		t.Errorf("newJobID allocates %v times, want 1 (the string)", n)
	}
}
