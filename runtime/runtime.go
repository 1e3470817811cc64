package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Reserved step-job headers.
const (
	HeaderRunID = "workflow.run_id"
	HeaderStep  = "workflow.step"
	// ReservedPrefix starts every header key the runtime reserves.
	ReservedPrefix = "workflow."
	// MaxRunIDLen is the longest run ID accepted.
	MaxRunIDLen = 128
)

// Runtime runs workflow runs on a queue. It is safe for concurrent use;
// several Runtimes may share one *queue.Queue (or one store).
type Runtime struct {
	q      *queue.Queue
	runner steprunner.Runner
	hook   terminal.Hook
	opts   options
}

// New returns a Runtime that executes steps with r on the store q and
// reports finished runs to h (terminal.Noop for none).
func New(q *queue.Queue, r steprunner.Runner, h terminal.Hook, opts ...Option) (*Runtime, error) {
	if q == nil || r == nil {
		return nil, invalid("queue and runner are required")
	}
	if h == nil {
		h = terminal.Noop
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.queueName == o.notifyQueueName {
		return nil, invalid("step and notify queues must differ (both %q)", o.queueName)
	}
	rt := &Runtime{q: q, runner: r, hook: h, opts: o}
	if !terminal.IsNoop(h) {
		// Record where notifications go, for Runtimes without a hook.
		ctx := context.Background()
		cur, err := q.Get(ctx, []byte(notifyConfigKey))
		if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
			return nil, err
		}
		if string(cur) != o.notifyQueueName || err != nil {
			if err := q.Put(ctx, []byte(notifyConfigKey), []byte(o.notifyQueueName)); err != nil {
				return nil, err
			}
		}
	}
	return rt, nil
}

// RunSpec describes a run to submit.
type RunSpec struct {
	// RunID identifies the run; "" generates a ULID. Printable ASCII without
	// '/', at most 128 bytes.
	RunID string
	// Input is step 0's payload.
	Input []byte
	// Headers reach every step and the terminal hook. Keys starting
	// "workflow." are reserved.
	Headers map[string]string
	// MaxAttemptsPerStep bounds each step's attempts; 0: the queue default.
	MaxAttemptsPerStep uint32
	// Priority of every step of the run: higher first. Default 0.
	Priority int32
}

// SubmitOutcome says what Submit did.
type SubmitOutcome struct {
	RunID string
	// NewlySubmitted is false when the run already existed with the same
	// input (active, or finished within the terminal retention).
	NewlySubmitted bool
}

// ValidateRunID returns ErrInvalidRunID (wrapped with the reason) unless id
// is a valid run ID.
func ValidateRunID(id string) error {
	switch {
	case strings.TrimSpace(id) == "":
		return fmt.Errorf("%w: empty", ErrInvalidRunID)
	case len(id) > MaxRunIDLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidRunID, len(id), MaxRunIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e || c == '/' {
			return fmt.Errorf("%w: byte %#x at %d (printable ASCII without '/')", ErrInvalidRunID, c, i)
		}
	}
	return nil
}

// Submit starts a run. It is idempotent on (RunID, Input) across processes
// and restarts: a run that exists with the same input returns
// NewlySubmitted=false and changes nothing; a different input is
// ErrInputMismatch. The run record and step 0 are written in one
// transaction, so concurrent submits of one run ID yield exactly one run.
func (rt *Runtime) Submit(ctx context.Context, spec RunSpec) (SubmitOutcome, error) {
	id := spec.RunID
	if id == "" {
		id = ulid.Make().String()
	}
	if err := ValidateRunID(id); err != nil {
		return SubmitOutcome{}, err
	}
	for k := range spec.Headers {
		if strings.HasPrefix(k, ReservedPrefix) {
			return SubmitOutcome{}, fmt.Errorf("%w: %q", ErrReservedHeader, k)
		}
	}
	hash := kvrecord.HashInput(spec.Input)
	for {
		jobID := ulid.Make().String()
		rec := &kvrecord.Run{
			RunID: id, SubmittedAt: rt.opts.now().UnixNano(), InputHash: hash,
			State: kvrecord.StateActive, CurrentStep: 0, CurrentJob: jobID,
			Headers: spec.Headers, Priority: spec.Priority, MaxAttempts: spec.MaxAttemptsPerStep,
		}
		if !terminal.IsNoop(rt.hook) {
			rec.NotifyQueue = rt.opts.notifyQueueName
		}
		opts := rt.stepOptions(rec, 0, jobID)
		opts.Dispatch = true // starts at once if a local Run has a slot idle
		txn := new(queue.Txn).
			CompareAndPut(kvrecord.RunKey(id), nil, kvrecord.EncodeRun(rec)).
			Enqueue(rt.opts.queueName, spec.Input, opts)
		_, err := rt.q.Commit(ctx, txn)
		if err == nil {
			return SubmitOutcome{RunID: id, NewlySubmitted: true}, nil
		}
		if !errors.Is(err, queue.ErrConditionFailed) {
			return SubmitOutcome{}, err
		}
		existing, _, err := rt.loadRun(ctx, id)
		if errors.Is(err, ErrRunNotFound) {
			continue // expired between our write and read: try again
		}
		if err != nil {
			return SubmitOutcome{}, err
		}
		if existing.InputHash != hash {
			return SubmitOutcome{}, fmt.Errorf("%w: run %q", ErrInputMismatch, id)
		}
		return SubmitOutcome{RunID: id, NewlySubmitted: false}, nil
	}
}

// stepOptions are the enqueue options of step n of a run.
func (rt *Runtime) stepOptions(rec *kvrecord.Run, n uint32, jobID string) queue.EnqueueOptions {
	h := make(map[string]string, len(rec.Headers)+2)
	maps.Copy(h, rec.Headers)
	h[HeaderRunID] = rec.RunID
	h[HeaderStep] = fmt.Sprint(n)
	return queue.EnqueueOptions{
		Headers: h, Priority: rec.Priority, MaxAttempts: rec.MaxAttempts,
		DedupKey: fmt.Sprintf("run:%s:%d", rec.RunID, n), JobID: jobID,
		DeadLetterQueue: rt.deadQueue(),
	}
}

// notifyConfigKey records, in the store, the notify queue of the Runtimes
// that have a hook, so that a Runtime without one (an API process that only
// submits and cancels) still enqueues the notification of a run it ends.
const notifyConfigKey = "workflow/config/notify_queue"

// resolveNotify sets rec.NotifyQueue, if the run does not carry one yet, to
// where its terminal notification must go: this Runtime's notify queue if it
// has a hook, else the one recorded in the store by a Runtime that has ("":
// nobody listens, nothing is enqueued).
func (rt *Runtime) resolveNotify(ctx context.Context, rec *kvrecord.Run) error {
	if rec.NotifyQueue != "" {
		return nil
	}
	if !terminal.IsNoop(rt.hook) {
		rec.NotifyQueue = rt.opts.notifyQueueName
		return nil
	}
	v, err := rt.q.Get(ctx, []byte(notifyConfigKey))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil
	}
	rec.NotifyQueue = string(v)
	return err
}

// deadQueue receives the notices of dead step jobs (see handleDeadStep).
func (rt *Runtime) deadQueue() string { return rt.opts.queueName + ".dead" }

// loadRun reads a run record, returning it with its encoded bytes (for
// compare-and-put).
func (rt *Runtime) loadRun(ctx context.Context, id string) (*kvrecord.Run, []byte, error) {
	b, err := rt.q.Get(ctx, kvrecord.RunKey(id))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, nil, fmt.Errorf("%w: %q", ErrRunNotFound, id)
	}
	if err != nil {
		return nil, nil, err
	}
	rec, err := kvrecord.DecodeRun(b)
	return rec, b, err
}

// State is a run's state as Status reports it.
type State uint8

// Run states.
const (
	StatePending    State = iota + 1 // current step queued (or scheduled)
	StateRunning                     // a step is executing
	StateCancelling                  // cancel requested, not yet settled
	StateSucceeded
	StateFailed
	StateCancelled
)

func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateRunning:
		return "running"
	case StateCancelling:
		return "cancelling"
	case StateSucceeded:
		return "succeeded"
	case StateFailed:
		return "failed"
	case StateCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Terminal reports whether s is a final state.
func (s State) Terminal() bool { return s >= StateSucceeded }

// RunStatus is a run's state.
type RunStatus struct {
	RunID       string
	State       State
	CurrentStep uint32
	// Result is the Succeed result of a succeeded run.
	Result []byte
	// Error is the reason of a failed or cancelled run ("" for an external
	// cancel).
	Error string
	// Scheduled is set for a pending run whose step waits on a delay
	// (ContinueAfter) or a retry backoff.
	Scheduled bool
	Headers   map[string]string
}

// Status reports a run's state from the durable records, so it works from
// any Runtime on the store and across restarts. ErrRunNotFound for unknown
// runs and for runs finished longer ago than the terminal retention.
func (rt *Runtime) Status(ctx context.Context, runID string) (RunStatus, error) {
	rec, _, err := rt.loadRun(ctx, runID)
	if err != nil {
		return RunStatus{}, err
	}
	st := RunStatus{RunID: runID, CurrentStep: rec.CurrentStep, Headers: rec.Headers}
	switch rec.State {
	case kvrecord.StateTerminal:
		tb, err := rt.q.Get(ctx, kvrecord.TerminalKey(rec.EndedAt, runID))
		if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
			return RunStatus{}, err
		}
		if err == nil {
			t, err := kvrecord.DecodeTerminal(tb)
			if err != nil {
				return RunStatus{}, err
			}
			st.Result, st.Error, st.CurrentStep = t.Result, t.Error, t.FinalStep
		}
		st.State = stateOf(terminal.Status(rec.Status))
	case kvrecord.StateCancelling:
		st.State = StateCancelling
	default:
		st.State = StatePending
		job, err := rt.q.GetJob(ctx, rec.CurrentJob)
		if err != nil && !errors.Is(err, queue.ErrJobNotFound) {
			return RunStatus{}, err
		}
		if job != nil {
			switch job.State {
			case queue.JobClaimed:
				st.State = StateRunning
			case queue.JobScheduled:
				st.Scheduled = true
			}
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

// Cancel cancels a run. A queued or scheduled step is removed and the run
// settled Cancelled in one transaction. A running step gets a durable
// cancel flag and its ctx cancelled (cause steprunner.ErrRunCancelled); the
// run settles Cancelled when the step returns, whatever it returns, unless
// the step itself returned Cancel. It returns false for unknown and
// finished runs; true otherwise (also when already cancelling).
func (rt *Runtime) Cancel(ctx context.Context, runID string) (bool, error) {
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return false, fmt.Errorf("runtime: cancel of run %q kept racing its settlement", runID)
		}
		rec, old, err := rt.loadRun(ctx, runID)
		if errors.Is(err, ErrRunNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		switch rec.State {
		case kvrecord.StateTerminal:
			return false, nil
		case kvrecord.StateCancelling:
			return true, nil
		}
		if err := rt.resolveNotify(ctx, rec); err != nil {
			return false, err
		}
		job, err := rt.q.GetJob(ctx, rec.CurrentJob)
		if errors.Is(err, queue.ErrJobNotFound) {
			continue // settling right now: read again
		}
		if err != nil {
			return false, err
		}
		var txn *queue.Txn
		switch job.State {
		case queue.JobPending, queue.JobScheduled:
			txn = new(queue.Txn).
				RequireJobState(job.ID, queue.JobPending, queue.JobScheduled).
				CancelJob(job.ID)
			rt.terminate(txn, rec, old, terminal.Cancelled, nil, "", rec.CurrentStep)
		case queue.JobClaimed:
			next := *rec
			next.State, next.Cancel = kvrecord.StateCancelling, true
			txn = new(queue.Txn).
				RequireJobState(job.ID, queue.JobClaimed).
				CompareAndPut(kvrecord.RunKey(runID), old, kvrecord.EncodeRun(&next)).
				CancelJob(job.ID)
		case queue.JobDead:
			// The step died (its last attempt failed or its worker died)
			// and the run has not been settled yet: settle it cancelled.
			txn = new(queue.Txn).RequireJobState(job.ID, queue.JobDead)
			rt.terminate(txn, rec, old, terminal.Cancelled, nil, "", rec.CurrentStep)
		default:
			continue // settling right now: read again
		}
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue // the run moved on meanwhile
		}
		return err == nil, err
	}
}

// terminate adds to txn everything that ends a run: the run record's final
// state, the terminal record and (unless the hook is Noop) the notification.
func (rt *Runtime) terminate(txn *queue.Txn, rec *kvrecord.Run, old []byte, status terminal.Status, result []byte, reason string, finalStep uint32) {
	ended := rt.opts.now().UnixNano()
	next := *rec
	next.State, next.Status, next.EndedAt, next.CurrentJob = kvrecord.StateTerminal, uint8(status), ended, ""
	next.CurrentStep = finalStep
	txn.CompareAndPut(kvrecord.RunKey(rec.RunID), old, kvrecord.EncodeRun(&next))
	txn.Put(kvrecord.TerminalKey(ended, rec.RunID), kvrecord.EncodeTerminal(&kvrecord.Terminal{
		RunID: rec.RunID, Status: uint8(status), Result: result, Error: reason, FinalStep: finalStep, EndedAt: ended,
	}))
	notifyQueue := rec.NotifyQueue // resolved by resolveNotify
	if notifyQueue == "" {
		return
	}
	n := notification{RunID: rec.RunID, Status: uint8(status), Result: result, Error: reason,
		Headers: rec.Headers, FinalStep: finalStep, EndedAt: ended}
	txn.Enqueue(notifyQueue, n.encode(), queue.EnqueueOptions{
		DedupKey: fmt.Sprintf("notify:%s:%d", rec.RunID, ended),
		Headers:  map[string]string{HeaderRunID: rec.RunID},
		Dispatch: true,
	})
}
