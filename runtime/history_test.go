package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stepwell/stepwell/runtime"
)

// history returns the run's history, failing the test on error.
func history(t testing.TB, rt *runtime.Runtime, runID string) []runtime.HistoryEntry {
	t.Helper()
	h, err := rt.History(context.Background(), runID)
	if err != nil {
		t.Fatalf("History(%q): %v", runID, err)
	}
	return h
}

// kinds returns the kinds of h, as "kind@step/attempt" words.
func kinds(h []runtime.HistoryEntry) string {
	var w []string
	for _, e := range h {
		w = append(w, fmt.Sprintf("%s@%d/%d", e.Kind, e.Step, e.Attempt))
	}
	return strings.Join(w, " ")
}

// checkKinds fails t unless the run's history reads want (see kinds), and
// its entries are numbered from first without gaps.
func checkKinds(t testing.TB, h []runtime.HistoryEntry, first uint64, want string) {
	t.Helper()
	if got := kinds(h); got != want {
		t.Fatalf("history:\n got  %s\n want %s", got, want)
	}
	for i, e := range h {
		if e.Seq != first+uint64(i) {
			t.Fatalf("entry %d has Seq %d, want %d", i, e.Seq, first+uint64(i))
		}
		if e.Worker == "" || e.End.IsZero() || e.Start.After(e.End) {
			t.Fatalf("entry %d: worker %q, start %v, end %v", i, e.Worker, e.Start, e.End)
		}
	}
}

// TestHistoryChain: a run of three steps records its submission and each
// step's attempt, with sizes and previews of what the steps returned.
func TestHistoryChain(t *testing.T) {
	_, _, _, rt := chainSetup(t, 2, runtime.WithWorkerName("w-1"))
	if _, err := rt.History(context.Background(), "nope"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("History(unknown) = %v, want ErrRunNotFound", err)
	}
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "h1", Input: []byte("in")})
	waitTerminal(t, rt, "h1")
	h := history(t, rt, "h1")
	checkKinds(t, h, 1, "submitted@0/0 continue@0/1 continue@1/1 succeed@2/1")
	if e := h[0]; e.PayloadSize != 2 || e.Preview != "in" || e.Queue != "workflow-steps" {
		t.Fatalf("submitted entry %+v", e)
	}
	if e := h[1]; e.Preview != "in|0" || e.ResultSize != 4 || e.PayloadSize != 2 || e.Worker != "w-1" || e.Job == "" {
		t.Fatalf("step 0 entry %+v", e)
	}
	if e := h[3]; e.Preview != "in|0|1|2" || e.ResultSize != 8 || e.PayloadSize != 6 {
		t.Fatalf("step 2 entry %+v", e)
	}
}
