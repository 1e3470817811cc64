package ui

import (
	"context"
	"time"
)

// timeline is a run's history drawn as bars on a time axis: one bar per
// step attempt, placed by its start and end (SVG percentages, so that no
// inline style is needed under the CSP).
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
	Class  string // outcome kind, for its colour
	Title  string // hover text: step, attempt, kind, error
	Anchor string // id of its row in the attempts table
	Label  string
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
	Attempt  uint32
	Kind     string
	Queue    string
	Worker   string
	Start    string
	Duration string
	Error    string
	Detail   string
}

// history fills d's timeline and attempts from the run's history.
func (h *handler) history(ctx context.Context, id string, d *runData) error {
	d.HistoryNote = "This version keeps no history of a run's steps."
	return nil
}

var _ = time.Now
