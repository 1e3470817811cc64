package main

import (
	"strings"
	"testing"

	"github.com/stepwell/stepwell/queue"
)

// TestLimitsCommand: set, show (text and JSON), bad input (exit 2,
// nothing written) and remove.
func TestLimitsCommand(t *testing.T) {
	f := &fixture{url: "file://" + t.TempDir()}
	// limits set does not create a store (TestNoStoreAtURL): open one.
	q, err := queue.Open(t.Context(), f.url)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := f.ok(t, "limits", "set", "llm", "--per-second", "2.5", "--max-running", "3"); out != "queue llm: per second 2.5, burst 1, max running 3\n" {
		t.Fatalf("limits set: %q", out)
	}
	var set limitJSON
	f.okJSON(t, &set, "limits", "set", "emails", "--max-running", "7")
	if set != (limitJSON{Queue: "emails", MaxRunning: 7}) {
		t.Fatalf("limits set --json: %+v", set)
	}
	for _, args := range [][]string{
		{"limits", "set", "llm", "--per-second", "-1"},
		{"limits", "set", "llm", "--per-second", "NaN"},
		{"limits", "set", "llm", "--burst", "3"},
		{"limits", "set", "llm", "--max-running", "-2"},
		{"limits", "set", ""},
		{"limits", "set"},
		{"limits", "bogus", "llm"},
	} {
		if r := f.on(t, args...); r.code != exitUsage {
			t.Errorf("stepwell %q: exit %d, want %d (%s)", args, r.code, exitUsage, r.stderr)
		}
	}
	var all limitsJSON
	f.okJSON(t, &all, "limits")
	want := []limitJSON{{Queue: "emails", MaxRunning: 7}, {Queue: "llm", PerSecond: 2.5, Burst: 1, MaxRunning: 3}}
	if len(all.Limits) != 2 || all.Limits[0] != want[0] || all.Limits[1] != want[1] {
		t.Fatalf("limits --json: %+v", all.Limits)
	}
	text := f.ok(t, "limits")
	if !strings.Contains(text, "QUEUE") || !strings.Contains(text, "llm") || !strings.Contains(text, "2.5") {
		t.Fatalf("limits:\n%s", text)
	}
	if out := f.ok(t, "limits", "remove", "llm"); out != "queue llm: no limit\n" {
		t.Fatalf("limits remove: %q", out)
	}
	f.ok(t, "limits", "set", "emails") // all 0: removes it
	if out := f.ok(t, "limits"); out != "no queue limits\n" {
		t.Fatalf("limits after removal: %q", out)
	}
}
