package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// defaultLimit is the default --limit of listings.
const defaultLimit = 100

// runStates are the values of "runs --state", in runtime.State order.
var runStates = []string{
	runtime.StatePending.String(), runtime.StateRunning.String(), runtime.StateCancelling.String(),
	runtime.StateSucceeded.String(), runtime.StateFailed.String(), runtime.StateCancelled.String(),
	runtime.StateWaiting.String(), runtime.StatePaused.String(),
}

// inspector returns a client Runtime (no runner, no hook: it never Runs)
// for reading and changing run state on q. Status and ListRuns only read,
// so q may be read-only.
func inspector(q *queue.Queue) (*runtime.Runtime, error) {
	return runtime.New(q, nil, nil)
}

// runRowJSON is one run in "runs --json".
type runRowJSON struct {
	RunID       string     `json:"run_id"`
	State       string     `json:"state"`
	Scheduled   bool       `json:"scheduled"`
	StepDead    bool       `json:"step_dead"` // see runJSON.StepDead
	Step        uint32     `json:"step"`
	SubmittedAt *time.Time `json:"submitted_at"`
	EndedAt     *time.Time `json:"ended_at"`
}

type runsJSON struct {
	Runs []runRowJSON `json:"runs"`
	// Truncated is set when --limit stopped the listing before the end.
	Truncated bool `json:"truncated"`
}

func runsCommand() *command {
	var state string
	var limit int
	return &command{
		name:     "runs",
		synopsis: "[--state S] [--limit N]",
		help: `Lists runs, newest submitted first (runtime.Runtime.ListRuns): ID, state,
current (or final) step, submit time and, for finished runs, end time. Finished runs are listed for the terminal
retention (24h by default). Opens the store read-only.
`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&state, "state", "", "only runs in this `state`: "+strings.Join(runStates, ", "))
			fs.IntVar(&limit, "limit", defaultLimit, "list at most `N` runs (0: all)")
		},
		exec: func(ctx context.Context, c *cli, _ []string) (err error) {
			if state != "" && !slices.Contains(runStates, state) {
				return usageError("invalid --state %q (want one of %s)", state, strings.Join(runStates, ", "))
			}
			if limit < 0 {
				return usageError("invalid --limit %d (want 0 for all, or more)", limit)
			}
			q, err := c.openRead(ctx)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			rt, err := inspector(q)
			if err != nil {
				return err
			}
			out := runsJSON{Runs: []runRowJSON{}}
			// One more than the limit tells whether the list was cut.
			opts := runtime.ListOptions{Limit: runtime.MaxListLimit}
			if limit > 0 && limit < runtime.MaxListLimit {
				opts.Limit = limit + 1
			}
			if state != "" {
				st, _ := runtime.ParseState(state)
				opts.States = []runtime.State{st}
			}
			var dead deadSteps // loaded at the first ended run that may have one
		list:
			for {
				page, err := rt.ListRuns(ctx, opts)
				if err != nil {
					return err
				}
				for _, st := range page.Runs {
					if limit > 0 && len(out.Runs) == limit {
						out.Truncated = true
						break list
					}
					rec, err := runRecord(ctx, q, st.RunID)
					if err != nil {
						return err
					}
					stepDead := false
					if rec != nil {
						if stepDead, err = isStepDead(ctx, q, rec, st, &dead); err != nil {
							return err
						}
					}
					out.Runs = append(out.Runs, runRowJSON{
						RunID: st.RunID, State: st.State.String(), Scheduled: st.Scheduled, StepDead: stepDead,
						Step: st.CurrentStep, SubmittedAt: jsonTime(st.SubmittedAt), EndedAt: jsonTime(st.EndedAt),
					})
				}
				if page.Next == "" {
					break
				}
				opts.Cursor = page.Next
			}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "RUN ID\tSTATE\tSTEP\tSUBMITTED\tENDED")
			for _, r := range out.Runs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.RunID, stateText(r.State, r.Scheduled, r.StepDead), r.Step,
					textTime(deref(r.SubmittedAt)), textTime(deref(r.EndedAt)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if out.Truncated {
				fmt.Fprintf(c.stderr, "stepwell runs: showing the first %d; more exist (raise --limit, 0 for all)\n", limit)
			}
			return nil
		},
	}
}

// stateText is a run state for text output.
func stateText(state string, scheduled, stepDead bool) string {
	switch {
	case stepDead:
		return state + " (step dead)"
	case scheduled:
		return state + " (scheduled)"
	}
	return state
}

// runRecord returns the run record of runID, or nil if it has none (it
// expired since it was listed).
func runRecord(ctx context.Context, q *queue.Queue, runID string) (*kvrecord.Run, error) {
	b, err := q.Get(ctx, kvrecord.RunKey(runID))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec, err := kvrecord.DecodeRun(b)
	if err != nil {
		return nil, fmt.Errorf("run record %q: %w", kvrecord.RunKey(runID), err)
	}
	return rec, nil
}

// isStepDead reports whether the run's step job is dead (see
// runJSON.StepDead): for an active run its current step's job, for an
// ended one the kept dead job of its final step, looked up in *dead (loaded
// on first use).
func isStepDead(ctx context.Context, q *queue.Queue, rec *kvrecord.Run, st runtime.RunStatus, dead *deadSteps) (bool, error) {
	if st.State.Terminal() {
		if !mayHaveDeadStep(st.State) {
			return false, nil
		}
		if *dead == nil {
			var err error
			if *dead, err = loadDeadSteps(ctx, q); err != nil {
				return false, err
			}
		}
		at, ok := (*dead)[deadStepKey{rec.RunID, st.CurrentStep}]
		return ok && !at.Before(unixTime(rec.SubmittedAt)), nil
	}
	if rec.CurrentJob == "" {
		return false, nil
	}
	job, err := q.GetJob(ctx, rec.CurrentJob)
	if errors.Is(err, queue.ErrJobNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return job.State == queue.JobDead, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// runJSON is "run --json".
type runJSON struct {
	RunID     string `json:"run_id"`
	State     string `json:"state"`
	Scheduled bool   `json:"scheduled"`
	// StepDead is true when the step job (StepJob) is dead. For a run
	// that has not ended (pending or cancelling) the run is stuck until
	// the job is requeued or a Runtime handles the queue's dead-letter
	// notice; for a failed or cancelled run it is the dead letter of the
	// step that ended it.
	StepDead bool   `json:"step_dead"`
	Step     uint32 `json:"step"`
	// Queue is the current step's step queue (see runtime.RunStatus.Queue).
	Queue              string            `json:"queue"`
	SubmittedAt        *time.Time        `json:"submitted_at"`
	EndedAt            *time.Time        `json:"ended_at"`
	InputSHA256        string            `json:"input_sha256"`
	Priority           int32             `json:"priority"`
	MaxAttemptsPerStep uint32            `json:"max_attempts_per_step"` // 0: the queue default
	CancelRequested    bool              `json:"cancel_requested"`
	Headers            map[string]string `json:"headers"`
	CurrentJob         string            `json:"current_job"` // "" once finished
	Result             []byte            `json:"result"`      // base64; null unless succeeded with a result
	ResultText         *string           `json:"result_text"`
	Error              string            `json:"error"`
	// Parent is the run whose Spawn started this one ("" for a submitted
	// run); Children the run IDs of the run's latest Spawn, in order.
	Parent   string   `json:"parent"`
	Children []string `json:"children"`
	// WaitingFor is the signal a waiting run awaits (steprunner.AwaitSignal;
	// "stepwell signal" sends it), or "children: N of M ended" for a run
	// waiting for its children (steprunner.Spawn); "" otherwise.
	// WaitDeadline is when that await times out (null: no timeout).
	WaitingFor   string     `json:"waiting_for"`
	WaitDeadline *time.Time `json:"wait_deadline"`
	// Paused is true while a pause is in effect ("stepwell resume").
	Paused bool `json:"paused"`
	// StepJob is the current step's job; for a failed run, the dead job of
	// its final step when it is still kept. Its payload is left out (null):
	// see "stepwell job".
	StepJob *jobJSON `json:"step_job"`
	// Memory is the run's memory (steprunner.Outcome.WithMemo), by key;
	// MemoryBytes its size (keys and values).
	Memory      []memoJSON `json:"memory"`
	MemoryBytes int64      `json:"memory_bytes"`
	// History is the run's history, oldest first (runtime.Runtime.History:
	// the newest 1,000 entries); HistoryDropped counts the older entries
	// no longer kept.
	History        []runtime.HistoryEntry `json:"history"`
	HistoryDropped uint64                 `json:"history_dropped"`
}

// memoJSON is one entry of a run's memory in "run --json".
type memoJSON struct {
	Key       string  `json:"key"`
	Size      int     `json:"size"`
	Value     []byte  `json:"value"`      // base64
	ValueText *string `json:"value_text"` // the value when printable, else null
}

func runCommand() *command {
	return &command{
		name:     "run",
		synopsis: "RUN_ID",
		help: `Shows one run: its record (state, step and its step queue, headers,
submit time, input hash; the signal a waiting run awaits and when that wait
times out; whether it is paused), its outcome once finished (result as text
when printable, else base64; error), its memory (each key with its value's
size and a preview; --json: the values in base64), its history as a
timeline (runtime.Runtime.History: each step's attempts, signals, pauses,
cancels, retries and the hook's delivery, with when each started, how long
it took, the process that committed it and its error), and its step job with
attempts and attempt history: the current step's job, or for a failed run
the dead job of its final step. Opens the store read-only.
Exits 4 if the run does not exist (or finished longer ago than the terminal
retention).
`,
		nargs: 1,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			id := args[0]
			if err := runtime.ValidateRunID(id); err != nil {
				return usageError("%v", err)
			}
			q, err := c.openRead(ctx)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			out, err := loadRun(ctx, q, id)
			if err != nil {
				return err
			}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			printRun(c.stdout, out)
			return nil
		},
	}
}

// loadRun gathers everything "run" shows.
func loadRun(ctx context.Context, q *queue.Queue, id string) (*runJSON, error) {
	b, err := q.Get(ctx, kvrecord.RunKey(id))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, notFound("run %q not found (never submitted, or finished longer ago than the terminal retention)", id)
	}
	if err != nil {
		return nil, err
	}
	rec, err := kvrecord.DecodeRun(b)
	if err != nil {
		return nil, fmt.Errorf("run record %q: %w", kvrecord.RunKey(id), err)
	}
	rt, err := inspector(q)
	if err != nil {
		return nil, err
	}
	st, err := rt.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &runJSON{
		RunID: id, State: st.State.String(), Scheduled: st.Scheduled, Step: st.CurrentStep, Queue: st.Queue,
		SubmittedAt: jsonTime(unixTime(rec.SubmittedAt)), EndedAt: jsonTime(unixTime(rec.EndedAt)),
		InputSHA256: hex.EncodeToString(rec.InputHash[:]), Priority: rec.Priority,
		MaxAttemptsPerStep: rec.MaxAttempts, CancelRequested: rec.Cancel,
		Headers: headersJSON(rec.Headers), CurrentJob: rec.CurrentJob,
		Result: st.Result, ResultText: textOf(st.Result), Error: st.Error,
		WaitingFor: st.WaitingFor, WaitDeadline: jsonTime(st.WaitDeadline), Paused: st.Paused,
		Memory: []memoJSON{}, MemoryBytes: st.MemoBytes,
		Parent: st.Parent, Children: st.Children,
	}
	if out.Children == nil {
		out.Children = []string{}
	}
	memo, err := rt.RunMemo(ctx, id)
	if err != nil {
		return nil, err
	}
	if out.History, err = rt.History(ctx, id); err != nil {
		return nil, err
	}
	if len(out.History) > 0 {
		out.HistoryDropped = out.History[0].Seq - 1
	}
	for _, k := range slices.Sorted(maps.Keys(memo)) {
		out.Memory = append(out.Memory, memoJSON{Key: k, Size: len(memo[k]), Value: memo[k], ValueText: textOf(memo[k])})
	}
	var job *queue.Job
	switch {
	case rec.CurrentJob != "":
		job, err = q.GetJob(ctx, rec.CurrentJob)
		if errors.Is(err, queue.ErrJobNotFound) {
			err = nil // settled between the two reads of a live store
		}
	case mayHaveDeadStep(st.State):
		job, err = findDeadStep(ctx, q, rec, st.CurrentStep)
	}
	if err != nil {
		return nil, err
	}
	if job != nil {
		out.StepDead = job.State == queue.JobDead
		j := toJobJSON(job)
		j.Payload, j.PayloadText = nil, nil
		out.StepJob = &j
	}
	return out, nil
}

// mayHaveDeadStep reports whether a run in state s may have ended with its
// step job dead-lettered: failed (a permanent error, the last attempt, a
// dead worker) or cancelled (a dead step of a run being cancelled).
func mayHaveDeadStep(s runtime.State) bool {
	return s == runtime.StateFailed || s == runtime.StateCancelled
}

// findDeadStep finds the dead job of step n of an ended run, if it is still
// kept: a dead step job is no longer referenced by its run's record, so the
// dead letters are searched for its reserved headers.
func findDeadStep(ctx context.Context, q *queue.Queue, rec *kvrecord.Run, n uint32) (*queue.Job, error) {
	step := strconv.FormatUint(uint64(n), 10)
	submitted := unixTime(rec.SubmittedAt)
	var found *queue.Job
	err := eachDeadJob(ctx, q, func(j *queue.Job) {
		// A run ID may be reused after the retention: only a job enqueued
		// since this run was submitted belongs to it.
		if j.Headers[runtime.HeaderRunID] == rec.RunID && j.Headers[runtime.HeaderStep] == step &&
			!j.EnqueuedAt.Before(submitted) {
			found = j
		}
	})
	return found, err
}

// eachDeadJob calls fn with every dead job of every queue.
func eachDeadJob(ctx context.Context, q *queue.Queue, fn func(*queue.Job)) error {
	names, err := q.Queues(ctx)
	if err != nil {
		return err
	}
	for _, name := range names {
		after := ""
		for {
			page, err := q.DeadJobs(ctx, name, after, queue.MaxScanLimit)
			if err != nil {
				return err
			}
			for _, j := range page.Jobs {
				fn(j)
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
	}
	return nil
}

// deadStepKey names a step of a run.
type deadStepKey struct {
	runID string
	step  uint32
}

// deadSteps maps the steps that have a dead job to the newest such job's
// enqueue time (a run ID may be reused: the caller compares it with the
// run's submit time, as findDeadStep does).
type deadSteps map[deadStepKey]time.Time

// loadDeadSteps reads every dead job once, for a listing of many runs.
func loadDeadSteps(ctx context.Context, q *queue.Queue) (deadSteps, error) {
	m := deadSteps{}
	err := eachDeadJob(ctx, q, func(j *queue.Job) {
		id, ok := j.Headers[runtime.HeaderRunID]
		n, err := strconv.ParseUint(j.Headers[runtime.HeaderStep], 10, 32)
		if !ok || err != nil {
			return
		}
		k := deadStepKey{id, uint32(n)}
		if at, seen := m[k]; !seen || j.EnqueuedAt.After(at) {
			m[k] = j.EnqueuedAt
		}
	})
	return m, err
}

func printRun(w io.Writer, r *runJSON) {
	tw := newTable(w)
	fmt.Fprintf(tw, "run:\t%s\n", r.RunID)
	fmt.Fprintf(tw, "state:\t%s\n", stateText(r.State, r.Scheduled, r.StepDead))
	fmt.Fprintf(tw, "step:\t%d\n", r.Step)
	fmt.Fprintf(tw, "queue:\t%s\n", orDash(r.Queue))
	fmt.Fprintf(tw, "submitted:\t%s\n", textTime(deref(r.SubmittedAt)))
	fmt.Fprintf(tw, "ended:\t%s\n", textTime(deref(r.EndedAt)))
	fmt.Fprintf(tw, "input:\tsha256:%s\n", r.InputSHA256)
	fmt.Fprintf(tw, "priority:\t%d\n", r.Priority)
	maxAttempts := "queue default"
	if r.MaxAttemptsPerStep > 0 {
		maxAttempts = strconv.FormatUint(uint64(r.MaxAttemptsPerStep), 10)
	}
	fmt.Fprintf(tw, "max attempts per step:\t%s\n", maxAttempts)
	fmt.Fprintf(tw, "cancel requested:\t%s\n", yesNo(r.CancelRequested))
	if r.Paused {
		fmt.Fprintf(tw, "paused:\tyes (stepwell resume %s)\n", r.RunID)
	}
	if r.Parent != "" {
		fmt.Fprintf(tw, "parent:\t%s\n", r.Parent)
	}
	if n := len(r.Children); n > 0 {
		fmt.Fprintf(tw, "children:\t%d (%s)\n", n, childrenPreview(r.Children))
	}
	if r.WaitingFor != "" && len(r.Children) > 0 && strings.HasPrefix(r.WaitingFor, "children: ") {
		fmt.Fprintf(tw, "waiting for:\t%s\n", r.WaitingFor)
	} else if r.WaitingFor != "" {
		deadline := "no timeout"
		if r.WaitDeadline != nil {
			deadline = "times out at " + textTime(*r.WaitDeadline)
		}
		fmt.Fprintf(tw, "waiting for:\tsignal %q (%s)\n", r.WaitingFor, deadline)
	}
	if r.State == runtime.StateSucceeded.String() {
		fmt.Fprintf(tw, "result:\t%s\n", preview(r.Result))
	}
	if r.State == runtime.StateFailed.String() || r.State == runtime.StateCancelled.String() {
		fmt.Fprintf(tw, "error:\t%s\n", orDash(r.Error))
	}
	tw.Flush()
	printHeaders(w, r.Headers)
	printMemory(w, r)
	printHistory(w, r)
	if r.StepJob == nil {
		fmt.Fprintln(w, "step job: -")
		return
	}
	fmt.Fprintln(w, "step job:")
	printJob(&indented{w: w, prefix: "  "}, r.StepJob)
	if r.StepDead && r.EndedAt == nil {
		fmt.Fprintf(w, "note: the step job is dead (its worker stopped on the last attempt), so the run is stuck.\n"+
			"      'stepwell requeue %s' lets it go on.\n", r.StepJob.ID)
	}
}

// printMemory writes a run's memory: each key with its value's preview.
func printMemory(w io.Writer, r *runJSON) {
	if len(r.Memory) == 0 {
		fmt.Fprintln(w, "memory: -")
		return
	}
	fmt.Fprintf(w, "memory: %d keys, %s\n", len(r.Memory), size(int(r.MemoryBytes)))
	tw := newTable(w)
	for _, m := range r.Memory {
		fmt.Fprintf(tw, "  %s\t%s\n", strconv.Quote(m.Key), preview(m.Value))
	}
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// printHeaders writes a header map, sorted, one per line.
func printHeaders(w io.Writer, h map[string]string) {
	if len(h) == 0 {
		fmt.Fprintln(w, "headers: -")
		return
	}
	fmt.Fprintln(w, "headers:")
	tw := newTable(w)
	for _, k := range sortedKeys(h) {
		fmt.Fprintf(tw, "  %s\t%s\n", k, strconv.Quote(h[k]))
	}
	tw.Flush()
}

// indented prefixes every line written through it.
type indented struct {
	w      io.Writer
	prefix string
	mid    bool // in the middle of a line
}

func (in *indented) Write(p []byte) (int, error) {
	var b []byte
	for _, c := range p {
		if !in.mid {
			b = append(b, in.prefix...)
			in.mid = true
		}
		b = append(b, c)
		if c == '\n' {
			in.mid = false
		}
	}
	if _, err := in.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// childrenPreview lists the first child run IDs, and how many more.
func childrenPreview(ids []string) string {
	const show = 3
	if len(ids) <= show {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s, ... %d more", strings.Join(ids[:show], ", "), len(ids)-show)
}
