package ui

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stepwell/stepwell/runtime"
)

// timeline is a run's history drawn as bars on a time axis: one bar per
// step attempt, placed by its start and end, a thin mark per control
// entry (signal, pause, retry...). Positions are SVG percentages, so that
// no inline style is needed under the CSP.
type timeline struct {
	Start, End string // the axis' ends
	Span       string
	Bars       []bar
	Ticks      []tick
	Height     int
}

type bar struct {
	X, W   string // percent of the axis
	Y      int    // px
	Class  string // entry kind, for its colour
	Title  string // hover text: step, attempt, kind, error
	Anchor string // id of its row in the table
}

type tick struct {
	X     string
	Label string
}

// attemptRow is an entry of the history as the table under the timeline
// shows it.
type attemptRow struct {
	Anchor   string
	Step     uint32
	Attempt  string
	Kind     string
	Queue    string
	Worker   string
	Start    string
	Duration string
	Error    string
	Detail   string
}

// Bounds of the history a run's page draws.
const (
	maxHistoryShown = 300 // newest entries in the table and on the axis
	maxLanes        = 24  // step lanes of the axis; later steps share the last
	laneHeight      = 18
)

// history fills d's timeline and table from the run's history
// (Runtime.History).
func (h *handler) history(ctx context.Context, id string, d *runData) error {
	entries, err := h.rt.History(ctx, id)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		d.HistoryNote = "No history recorded for this run (it was submitted before this version kept one)."
		return nil
	}
	var notes []string
	if dropped := entries[0].Seq - 1; dropped > 0 {
		notes = append(notes, fmt.Sprintf("%d older entries were dropped: a run keeps its newest 1,000.", dropped))
	}
	if len(entries) > maxHistoryShown {
		notes = append(notes, fmt.Sprintf("Showing the newest %d of %d entries kept.", maxHistoryShown, len(entries)))
		entries = entries[len(entries)-maxHistoryShown:]
	}
	d.HistoryNote = strings.Join(notes, " ")

	t0, t1 := entries[0].Start, entries[0].End
	for _, e := range entries {
		if e.Start.Before(t0) {
			t0 = e.Start
		}
		if e.End.After(t1) {
			t1 = e.End
		}
	}
	if !d.Ended {
		t1 = maxTime(t1, time.Now())
	}
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Millisecond
	}
	pct := func(t time.Time) float64 { return 100 * float64(t.Sub(t0)) / float64(span) }
	lanes := map[uint32]int{}
	tl := &timeline{Start: fmtTime(t0), End: fmtTime(t1), Span: roundDur(span).String()}
	for i := 0; i <= 4; i++ {
		x := float64(i) * 25
		label := "+" + roundDur(time.Duration(float64(span)*x/100)).String()
		if i == 4 {
			x = 99.5
			label = ""
		}
		tl.Ticks = append(tl.Ticks, tick{X: fmtPct(x), Label: label})
	}
	for _, e := range entries {
		anchor := "h" + strconv.FormatUint(e.Seq, 10)
		lane, ok := lanes[e.Step]
		if !ok {
			lane = min(len(lanes), maxLanes-1)
			lanes[e.Step] = lane
		}
		x, w := pct(e.Start), pct(e.End)-pct(e.Start)
		control := e.Attempt == 0
		if control || w < 0.4 {
			w = 0.4
		}
		x = min(x, 100-w)
		title := fmt.Sprintf("step %d", e.Step)
		if !control {
			title += fmt.Sprintf(", attempt %d", e.Attempt)
		}
		title += ": " + string(e.Kind)
		if !control {
			title += " in " + roundDur(e.Duration()).String()
		}
		if e.Signal != "" {
			title += " (signal " + clean(e.Signal) + ")"
		}
		if e.Error != "" {
			msg, _ := cut(clean(e.Error), 300)
			title += "\n" + msg
		}
		tl.Bars = append(tl.Bars, bar{X: fmtPct(x), W: fmtPct(w), Y: 18 + lane*laneHeight,
			Class: string(e.Kind), Title: title, Anchor: anchor})

		row := attemptRow{Anchor: anchor, Step: e.Step, Kind: string(e.Kind), Queue: clean(e.Queue),
			Worker: clean(e.Worker), Start: fmtTime(e.Start), Error: clean(e.Error)}
		if !control {
			row.Attempt = strconv.FormatUint(uint64(e.Attempt), 10)
			row.Duration = roundDur(e.Duration()).String()
		}
		row.Detail = entryDetail(e)
		d.Attempts = append(d.Attempts, row)
	}
	tl.Height = 18 + len(lanes)*laneHeight + 6
	if len(lanes) > maxLanes {
		tl.Height = 18 + maxLanes*laneHeight + 6
	}
	d.Timeline = tl
	return nil
}

// entryDetail is what the table says of an entry besides its error.
func entryDetail(e runtime.HistoryEntry) string {
	var parts []string
	if e.Signal != "" {
		parts = append(parts, "signal "+e.Signal)
	}
	if e.PayloadSize > 0 {
		parts = append(parts, "payload "+sizeText(e.PayloadSize))
	}
	switch {
	case e.Kind == runtime.HistorySpawn:
		parts = append(parts, fmt.Sprintf("%d children", e.ResultSize))
	case e.ResultSize > 0:
		parts = append(parts, "returned "+sizeText(e.ResultSize))
	}
	if e.Preview != "" {
		p := e.Preview
		if e.PreviewBinary {
			p = "hex " + p
		}
		parts = append(parts, "“"+p+"”")
	}
	if !e.Due.IsZero() {
		parts = append(parts, "due "+fmtTime(e.Due))
	}
	return clean(strings.Join(parts, " · "))
}

func fmtPct(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) + "%" }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
