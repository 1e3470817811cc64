package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/terminal"
)

// State is a run's state as Status reports it. It marshals as text (and so
// in JSON) by its String name.
type State uint8

// Run states.
const (
	StatePending    State = iota + 1 // current step queued (or scheduled)
	StateRunning                     // a step is executing
	StateCancelling                  // cancel requested, not yet settled
	StateSucceeded
	StateFailed
	StateCancelled
	StateWaiting // awaiting a signal (steprunner.AwaitSignal); no step queued
	StatePaused  // paused (Pause): its next step does not start until Resume
)

var stateNames = [...]string{
	StatePending:    "pending",
	StateRunning:    "running",
	StateCancelling: "cancelling",
	StateSucceeded:  "succeeded",
	StateFailed:     "failed",
	StateCancelled:  "cancelled",
	StateWaiting:    "waiting",
	StatePaused:     "paused",
}

func (s State) String() string {
	if s >= StatePending && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Terminal reports whether s is a final state.
func (s State) Terminal() bool { return s >= StateSucceeded && s <= StateCancelled }

// MarshalText implements encoding.TextMarshaler: the String name. A value
// that is not one of the states is an error.
func (s State) MarshalText() ([]byte, error) {
	if s < StatePending || int(s) >= len(stateNames) {
		return nil, fmt.Errorf("runtime: invalid State %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: it parses a String
// name ("pending", "running", ...).
func (s *State) UnmarshalText(b []byte) error {
	st, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = st
	return nil
}

// ParseState returns the State whose String name is name.
func ParseState(name string) (State, error) {
	for st := StatePending; int(st) < len(stateNames); st++ {
		if stateNames[st] == name {
			return st, nil
		}
	}
	return 0, fmt.Errorf("runtime: unknown run state %q", name)
}

// RunStatus is a run's state.
type RunStatus struct {
	RunID       string
	State       State
	CurrentStep uint32
	// Result is the Succeed result of a succeeded run (Status only: nil in
	// ListRuns pages).
	Result []byte
	// Error is the reason of a failed or cancelled run ("" for an external
	// cancel).
	Error string
	// Scheduled is set for a pending run whose step waits on a delay
	// (ContinueAfter), a retry backoff or its start time (RunSpec.StartAt).
	Scheduled bool
	// DueAt is when a scheduled run's current step becomes due; zero when
	// not Scheduled.
	DueAt   time.Time
	Headers map[string]string
	// SubmittedAt is when the run was submitted.
	SubmittedAt time.Time
	// UpdatedAt is when the run record last changed: submit, a step
	// settled, cancel, retry, end. Runs submitted before the record kept it
	// report their last known time (EndedAt, else SubmittedAt).
	UpdatedAt time.Time
	// EndedAt is when a finished run ended; zero for active runs.
	EndedAt time.Time
	// Attempt counts the attempts of the current step so far, a running
	// one included (0: not started yet); for a finished run, the attempt
	// that settled it (0 if unknown, or if it never ran).
	Attempt uint32
	// LastError is the error of the current step's last failed attempt
	// (active runs), or Error (finished runs); "" if none.
	LastError string
	// Retries counts the times the run was retried (Retry).
	Retries uint32
	// WaitingFor is the signal name a waiting run awaits (StateWaiting, or
	// StatePaused while waiting); for a pending run whose step a queue
	// limit holds back (SetQueueLimit; Status only), "held by the queue
	// limit of <queue>"; "" otherwise.
	WaitingFor string
	// WaitDeadline is when that await times out; zero for no timeout.
	WaitDeadline time.Time
	// Paused: Pause is in effect. The state is StatePaused, or
	// StateRunning while a step that was running when Pause committed
	// finishes.
	Paused bool
	// MemoKeys and MemoBytes size the run's memory
	// (steprunner.Outcome.WithMemo): its keys, and their and their
	// values' lengths summed. RunMemo reads it.
	MemoKeys  int
	MemoBytes int64
	// Queue is the step queue of the current step (for a waiting or paused
	// run, where its next step will go; for an ended run, its final
	// step's, "" if unknown): a run whose Queue no Runtime serves
	// (WithQueueName) stays pending there.
	Queue string
	// Parent is the run whose Spawn started this one ("" for a run that
	// Submit started).
	Parent string
	// Children are the run IDs of the children of the run's latest Spawn,
	// in the order given (Status only: nil in ListRuns pages). While the
	// run waits for them it is StateWaiting, with WaitingFor
	// "children: 37 of 100 ended".
	Children []string
	// Deadline is the run's deadline (RunSpec.Deadline; zero: none).
	Deadline time.Time
}

// Status reports a run's state from the durable records, so it works from
// any Runtime on the store and across restarts. ErrRunNotFound for unknown
// runs and for runs finished longer ago than the terminal retention;
// ErrInvalidRunID for an ID that Submit would refuse.
func (rt *Runtime) Status(ctx context.Context, runID string) (RunStatus, error) {
	if err := ValidateRunID(runID); err != nil {
		return RunStatus{}, err
	}
	rec, _, err := rt.loadRun(ctx, runID)
	if err != nil {
		return RunStatus{}, err
	}
	st, err := rt.status(ctx, rec, true)
	if err == nil {
		st.Children, err = rt.childIDs(ctx, rec)
	}
	if err == nil {
		err = rt.heldByLimit(ctx, &st) // queuelimit.go
	}
	return st, err
}

// status builds a run's RunStatus from its record, reading its terminal
// record (finished runs) or its current job (active runs). withResult keeps
// a succeeded run's result.
func (rt *Runtime) status(ctx context.Context, rec *kvrecord.Run, withResult bool) (RunStatus, error) {
	st := RunStatus{
		RunID: rec.RunID, CurrentStep: rec.CurrentStep, Headers: rec.Headers, Retries: rec.Retries,
		SubmittedAt: unixTime(rec.SubmittedAt), UpdatedAt: unixTime(rec.UpdatedAt), EndedAt: unixTime(rec.EndedAt),
		MemoKeys: int(rec.MemoKeys), MemoBytes: int64(rec.MemoBytes), Queue: rec.Queue,
		Parent: rec.Parent, Deadline: unixTime(rec.Deadline),
	}
	if rec.UpdatedAt == 0 { // a record written before UpdatedAt
		st.UpdatedAt = unixTime(max(rec.SubmittedAt, rec.EndedAt))
	}
	if rec.State == kvrecord.StateTerminal {
		st.State = stateOf(terminal.Status(rec.Status))
		tb, err := rt.q.Get(ctx, kvrecord.TerminalKey(rec.EndedAt, rec.RunID))
		if errors.Is(err, queue.ErrKeyNotFound) {
			return st, nil // expiring right now
		}
		if err != nil {
			return RunStatus{}, err
		}
		t, err := kvrecord.DecodeTerminal(tb)
		if err != nil {
			return RunStatus{}, err
		}
		st.Error, st.LastError, st.CurrentStep, st.Attempt = t.Error, t.Error, t.FinalStep, t.Attempt
		if t.Queue != "" {
			st.Queue = t.Queue
		}
		if withResult {
			st.Result = t.Result
		}
		return st, nil
	}
	st.State = StatePending
	st.WaitDeadline, st.Paused = unixTime(rec.WaitDeadline), rec.Paused
	var err error
	if st.WaitingFor, err = rt.waitingFor(ctx, rec); err != nil {
		return RunStatus{}, err
	}
	switch {
	case rec.State == kvrecord.StateCancelling:
		st.State = StateCancelling
	case rec.Paused:
		st.State = StatePaused
	case rec.WaitFor != "":
		st.State = StateWaiting
	}
	if rec.CurrentJob == "" { // waiting or parked: no step job
		return st, nil
	}
	job, err := rt.q.GetJob(ctx, rec.CurrentJob)
	if err != nil && !errors.Is(err, queue.ErrJobNotFound) {
		return RunStatus{}, err
	}
	if job != nil {
		st.Attempt, st.Queue = job.Attempt, job.Queue
		if n := len(job.History); n > 0 {
			st.LastError = job.History[n-1].Error
		}
		switch {
		case st.State == StateCancelling:
		case job.State == queue.JobClaimed:
			st.State = StateRunning
		case job.State == queue.JobScheduled:
			st.Scheduled, st.DueAt = true, job.RunAt
		}
	}
	return st, nil
}

func stateOf(s terminal.Status) State {
	switch s {
	case terminal.Succeeded:
		return StateSucceeded
	case terminal.Failed:
		return StateFailed
	}
	return StateCancelled
}

// unixTime is the time of unix ns; zero for 0.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
