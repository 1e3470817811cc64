package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/runtime"
)

// TestPrintHistory: the timeline says how many older entries were
// dropped, puts times as offsets from the first entry, keeps every entry
// on one line (errors and previews squeezed) and marks binary previews.
func TestPrintHistory(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	r := &runJSON{HistoryDropped: 200, History: []runtime.HistoryEntry{
		{Seq: 201, Kind: runtime.HistoryError, Step: 199, Attempt: 1, Worker: "w", Start: t0, End: t0.Add(1500 * time.Microsecond),
			Error: "line one\nline two", Due: t0.Add(time.Second)},
		{Seq: 202, Kind: runtime.HistoryContinue, Step: 199, Attempt: 2, Worker: "w", Start: t0.Add(2 * time.Second),
			End: t0.Add(2*time.Second + 3*time.Millisecond), ResultSize: 300, Preview: strings.Repeat("x", 256)},
		{Seq: 203, Kind: runtime.HistorySignal, Step: 200, Signal: "go", Start: t0.Add(3 * time.Second), End: t0.Add(3 * time.Second),
			PayloadSize: 4, Preview: "00ff", PreviewBinary: true},
	}}
	var b bytes.Buffer
	printHistory(&b, r)
	out := b.String()
	for _, want := range []string{
		"history: 3 entries (200 older ones dropped)",
		"2026-11-27T08:00:00Z", "+2s", "+3s", "1.5ms", "3ms",
		"due 2026-11-27T08:00:01Z; error: line one line two",
		`-> 300 bytes "xxx`, `..."...`,
		`signal "go"; payload 4 bytes (binary)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 5 {
		t.Errorf("timeline has %d lines, want 5:\n%s", n, out)
	}
	b.Reset()
	printHistory(&b, &runJSON{})
	if b.String() != "history: -\n" {
		t.Errorf("empty history: %q", b.String())
	}
}
