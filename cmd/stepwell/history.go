package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/stepwell/stepwell/runtime"
)

// printHistory writes a run's history as a timeline: each entry with
// when it started (the first entry's time, then offsets from it), how
// long it took, its kind, step, attempt, worker and details.
func printHistory(w io.Writer, r *runJSON) {
	if len(r.History) == 0 {
		fmt.Fprintln(w, "history: -")
		return
	}
	n := fmt.Sprintf("%d entries", len(r.History))
	if len(r.History) == 1 {
		n = "1 entry"
	}
	if r.HistoryDropped > 0 {
		n += fmt.Sprintf(" (%d older ones dropped)", r.HistoryDropped)
	}
	fmt.Fprintf(w, "history: %s\n", n)
	t0 := r.History[0].Start
	tw := newTable(w)
	fmt.Fprintln(tw, "  #\tAT\tTOOK\tKIND\tSTEP\tATTEMPT\tWORKER\tDETAIL")
	for i, e := range r.History {
		at := textTime(e.Start)
		if i > 0 {
			at = "+" + shortDuration(e.Start.Sub(t0))
		}
		took := "-"
		if e.Attempt > 0 && e.Kind != runtime.HistoryLeaseLost {
			took = shortDuration(e.Duration())
		}
		attempt := "-"
		if e.Attempt > 0 {
			attempt = strconv.FormatUint(uint64(e.Attempt), 10)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Seq, at, took, e.Kind, e.Step, attempt,
			orDash(oneLine(e.Worker, 40)), orDash(historyDetail(e)))
	}
	tw.Flush()
}

// historyDetail is the detail column of an entry: its signal, what it
// scheduled, what the step returned, its error.
func historyDetail(e runtime.HistoryEntry) string {
	var d string
	add := func(s string) {
		if d != "" {
			d += "; "
		}
		d += s
	}
	if e.Signal != "" {
		add("signal " + strconv.Quote(e.Signal))
	}
	switch e.Kind {
	case runtime.HistorySignal:
		add("payload " + previewOf(e, e.PayloadSize))
	case runtime.HistorySpawn, runtime.HistoryJoin:
		add(strconv.FormatInt(e.ResultSize, 10) + " children")
	case runtime.HistoryContinue, runtime.HistoryDelay, runtime.HistoryAwait, runtime.HistorySucceed:
		add("-> " + previewOf(e, e.ResultSize))
	}
	if !e.Due.IsZero() {
		add("due " + textTime(e.Due))
	}
	if e.Error != "" {
		add("error: " + oneLine(e.Error, 100))
	}
	return d
}

// previewOf describes the entry's preview of n bytes.
func previewOf(e runtime.HistoryEntry, n int64) string {
	s := size(int(n))
	switch {
	case n == 0:
		return s
	case e.PreviewBinary:
		return s + " (binary)"
	}
	more := ""
	if int64(len(e.Preview)) < n {
		more = "..."
	}
	return s + " " + strconv.Quote(oneLine(e.Preview, 60)) + more
}

// shortDuration formats d for a timeline: to the microsecond below a
// millisecond, to 0.1 ms below a second, then to the millisecond and, from
// a minute, the second.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + shortDuration(-d)
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
