package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/stepwell/stepwell/internal/runrec"
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
	runner steprunner.Runner // nil: a client Runtime, which does not Run
	hook   terminal.Hook
	opts   options
	tel    *telemetry
	// notices is the notices queue of opts.queueName (noticesQueue),
	// named once.
	notices string

	indexed atomic.Bool // the store's runs are all in the submitted index

	// notifyRead is the notify queue recorded in the store as last read
	// (checkNotNotifyQueue), and when: Submit reads it again only after
	// notifyReadFor, so that a submit to another step queue costs no
	// read (a call to the writer, on a cluster member) every time.
	notifyRead atomic.Pointer[notifyRecord]

	concMu concLocks // serializes this process's submits per concurrency key
}

// New returns a Runtime that executes steps with r on the store q and
// reports finished runs to h (nil or terminal.Noop for none). New does no
// I/O: it validates its arguments and options and touches neither q nor
// the store, so it never blocks and never fails on the store (a stalled,
// read-only or closed one); every call that reads or writes the store
// takes a ctx. A run that a client Runtime cancels before this Runtime's
// Run started is still notified to h once it starts, unless a Run without
// a hook on the run's step queue takes the notice first (see the package
// documentation, "Operating").
//
// A nil r (with a nil or Noop h) makes a client Runtime: it submits,
// inspects, cancels and retries runs (Submit, Status, ListRuns, Cancel,
// Retry) but does not execute steps, and its Run returns ErrNoRunner. An
// API process or an operator tool uses one; the runs' steps and
// notifications are executed by the Runtimes that Run on the store. A
// Runner that is a nil func or pointer (steprunner.RunnerFunc(nil)) is
// refused with ErrInvalidOption, as is a hook without a runner.
func New(q *queue.Queue, r steprunner.Runner, h terminal.Hook, opts ...Option) (*Runtime, error) {
	if q == nil {
		return nil, invalid("a queue is required")
	}
	if r != nil && isNil(r) {
		return nil, invalid("the runner is a nil %T (pass a nil Runner for a client Runtime that does not run steps)", r)
	}
	if h == nil || isNil(h) {
		h = terminal.Noop
	}
	if r == nil && !terminal.IsNoop(h) {
		return nil, invalid("a hook needs a runner: notifications are delivered by Run")
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
	tel, err := newTelemetry(&o)
	if err != nil {
		return nil, err
	}
	return &Runtime{q: q, runner: r, hook: h, opts: o, tel: tel, notices: runrec.NoticesQueue(o.queueName)}, nil
}

// isNil reports whether v holds a nil func, pointer, map, chan or slice.
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// recordNotifyQueue records in the store where this Runtime's hook gets
// notifications, for Runtimes without a hook (an API process that only
// submits and cancels) that end a run. Run calls it when it starts (New
// does no I/O).
func (rt *Runtime) recordNotifyQueue(ctx context.Context) error {
	if terminal.IsNoop(rt.hook) {
		return nil
	}
	// A compare-and-put, not a Put: it is guarded, so a change of writer
	// in cluster mode retries it with the next writer rather than leave
	// its outcome unknown (see queue.WithCluster).
	for {
		cur, err := rt.q.Get(ctx, []byte(notifyConfigKey))
		if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
			return err
		}
		if err == nil && string(cur) == rt.opts.notifyQueueName {
			return nil
		}
		err = rt.q.CompareAndPut(ctx, []byte(notifyConfigKey), cur, []byte(rt.opts.notifyQueueName))
		if !errors.Is(err, queue.ErrConditionFailed) {
			return err
		}
	}
}

// checkNotNotifyQueue returns an error wrapping ErrInvalidQueueName if
// stepQueue is the notify queue recorded in the store (recordNotifyQueue):
// a notify queue carries notifications, which a step worker takes for
// steps it cannot decode, and a step there is taken by a hook's worker for
// a notification it cannot decode; either is dead-lettered, and its run
// stranded or unnotified. It trusts the notify queue it read less than
// maxAge ago (0: reads it).
func (rt *Runtime) checkNotNotifyQueue(ctx context.Context, stepQueue string, maxAge time.Duration) error {
	r := rt.notifyRead.Load()
	if r == nil || time.Since(r.at) >= maxAge {
		v, err := rt.q.Get(ctx, []byte(notifyConfigKey))
		if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
			return err
		}
		r = &notifyRecord{name: string(v), at: time.Now()}
		rt.notifyRead.Store(r)
	}
	if r.name == stepQueue {
		return fmt.Errorf("%w: %q is the notify queue of a Runtime with a hook on this store (WithNotifyQueueName)", ErrInvalidQueueName, stepQueue)
	}
	return nil
}

// notifyRecord is the notify queue recorded in the store ("": none), as
// read at a time.
type notifyRecord struct {
	name string
	at   time.Time
}

// notifyReadFor is how long Submit trusts the notify queue it read last.
const notifyReadFor = 30 * time.Second

// RunSpec describes a run to submit.
type RunSpec struct {
	// RunID identifies the run; "" generates a ULID. Printable ASCII without
	// '/', at most 128 bytes.
	RunID string
	// Input is step 0's payload.
	Input []byte
	// Headers reach every step and the terminal hook. Keys starting
	// "workflow." are reserved. Their keys and values must leave room in
	// queue.MaxHeaderBytes for the reserved headers a step job carries, at
	// their largest 419 bytes: larger is a *queue.TooLargeError.
	Headers map[string]string
	// MaxAttemptsPerStep bounds each step's attempts; 0: the queue default.
	MaxAttemptsPerStep uint32
	// Priority of every step of the run: higher first. Default 0.
	Priority int32
	// StepTimeout bounds each attempt of each step: the step's ctx gets the
	// deadline (cause steprunner.ErrStepTimeout), and an attempt that has
	// not returned by then fails (retried per Retry; the run fails on the
	// last attempt). 0: the executing Runtime's WithStepTimeout (none by
	// default). Negative is ErrInvalidRunSpec.
	StepTimeout time.Duration
	// StartAt schedules the run: step 0 runs no earlier than this (Status
	// reports it pending and Scheduled, with DueAt, until then). Zero, or a
	// time that has passed (one before 1970 included): at once. Times are
	// recorded in nanoseconds since 1970, which end on 2262-04-11: a later
	// StartAt or Deadline is taken as that.
	StartAt time.Time
	// Retry overrides the queue's retry backoff and attempt limit for every
	// step of the run (its MaxAttempts wins over MaxAttemptsPerStep). nil,
	// or the zero policy: the queue's. An invalid policy is
	// ErrInvalidRunSpec wrapping a *steprunner.RetryPolicyError.
	Retry *steprunner.RetryPolicy
	// Queue is the step queue of step 0: a Runtime serving it
	// (WithQueueName) runs it. "": the submitting Runtime's. A name that
	// ValidateQueueName refuses, the Runtime's notify queue
	// (WithNotifyQueueName), or the notify queue recorded in the store by
	// a Runtime with a hook (see Run), is ErrInvalidQueueName. A re-submit does
	// not compare it (the run's queue changes as its steps go on).
	Queue string
	// Deadline bounds the whole run: if it has not ended by then, it ends
	// Failed with an error wrapping ErrRunDeadline, wherever it is (see
	// Policies in the package doc). Zero: none. A deadline that has passed
	// at Submit is ErrInvalidRunSpec; one before StartAt fails the run
	// then, unstarted.
	Deadline time.Time
	// Concurrency bounds the runs of its Key active at once in the store
	// (see Concurrency, and "Per-key concurrency" in the package doc): a
	// run takes a slot when its step 0 would start and holds it until it
	// ends; without a free slot it waits, pending, in submit order. The
	// zero value: no bound. A Key with a Limit under 1, or a Limit without
	// a Key, is ErrInvalidRunSpec.
	Concurrency Concurrency
}

// SubmitOutcome says what Submit did.
type SubmitOutcome struct {
	RunID string
	// NewlySubmitted is false when the run already existed with the same
	// input (active, or finished within the terminal retention).
	NewlySubmitted bool
}

// reservedHeaderBytes is the room a run's headers leave for the reserved
// ones that the runtime adds to its step jobs, at their largest: the run
// ID, the step's number, a trace parent, and a delivered signal's name and
// timeout mark (419 bytes: RunSpec.Headers says so).
const reservedHeaderBytes = len(HeaderRunID) + MaxRunIDLen + len(HeaderStep) + 10 +
	len(HeaderTraceParent) + 64 + len(HeaderSignal) + MaxSignalNameLen + len(HeaderSignalTimedOut) + 1

// checkHeaderBudget returns a *queue.TooLargeError if headers, with the
// reserved ones at their largest, exceed queue.MaxHeaderBytes: every step
// job of the run carries them, and a later step's, or one a signal wakes,
// would fail to commit.
func checkHeaderBudget(headers map[string]string) error {
	size := reservedHeaderBytes
	for k, v := range headers {
		size += len(k) + len(v)
	}
	if size > queue.MaxHeaderBytes {
		return &queue.TooLargeError{What: "headers with the reserved ones", Size: size, Max: queue.MaxHeaderBytes}
	}
	return nil
}

// ValidateRunID returns ErrInvalidRunID (wrapped with the reason) unless id
// is a valid run ID: 1 to 128 bytes of printable ASCII without '/', not
// starting or ending with a space.
func ValidateRunID(id string) error {
	switch {
	case strings.TrimSpace(id) == "":
		return fmt.Errorf("%w: empty", ErrInvalidRunID)
	case strings.TrimSpace(id) != id:
		return fmt.Errorf("%w: %q has leading or trailing whitespace", ErrInvalidRunID, id)
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
// and restarts: a run that exists with the same input and spec (headers,
// priority, attempt limit, step timeout, start time, retry policy,
// deadline, concurrency) returns
// NewlySubmitted=false and changes nothing; a different input is
// ErrInputMismatch, the same input with another spec ErrSpecMismatch. An
// invalid spec (StepTimeout, Retry, a Deadline that has passed,
// Concurrency) is
// ErrInvalidRunSpec and changes nothing. A Deadline also enqueues, in the
// same transaction, the job that fails the run then (see Policies in the
// package doc). The run record, its index
// entry and step 0 are written in one transaction, so concurrent submits
// of one run ID yield exactly one run.
// If ctx ends before that transaction is durable (the store is slow or
// unreachable), Submit returns queue.ErrOutcomeUnknown wrapping ctx's
// error: the run may or may not have been submitted, and submitting it
// again with the same spec is safe.
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
	if err := checkHeaderBudget(spec.Headers); err != nil {
		return SubmitOutcome{}, err
	}
	if err := validateSpecPolicy(&spec); err != nil {
		return SubmitOutcome{}, err
	}
	if err := validateDeadline(&spec, rt.opts.now); err != nil {
		return SubmitOutcome{}, err
	}
	if err := validateConcurrency(spec.Concurrency); err != nil {
		return SubmitOutcome{}, err
	}
	stepQueue := rt.opts.queueName
	if spec.Queue != "" && spec.Queue != stepQueue {
		if err := rt.validateStepQueue(spec.Queue); err != nil {
			return SubmitOutcome{}, err
		}
		if err := rt.checkNotNotifyQueue(ctx, spec.Queue, notifyReadFor); err != nil {
			return SubmitOutcome{}, err
		}
		stepQueue = spec.Queue
	}
	hash := runrec.HashInput(spec.Input)
	traceParent := rt.tel.traceParent(ctx)
	if k := spec.Concurrency.Key; k != "" {
		defer rt.concMu.lock(k)() // see concLocks
	}
	for {
		txn := qx.TakeTxn()
		jobID, carry, err := rt.submitOps(ctx, txn, id, &spec, stepQueue, hash, traceParent, rt.opts.now().UnixNano())
		if err != nil {
			return SubmitOutcome{}, err
		}
		// Dispatched, step 0 starts with the record (see stepRun).
		_, err = rt.commitPooled(handoff.WithDispatched(ctx, jobID, carry), txn)
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
		if diff := specDiff(existing, &spec); diff != "" {
			return SubmitOutcome{}, fmt.Errorf("%w: run %q was submitted with other %s", ErrSpecMismatch, id, diff)
		}
		return SubmitOutcome{RunID: id, NewlySubmitted: false}, nil
	}
}

// submitOps adds to txn what submits the new run id from spec (valid)
// with step 0 on stepQueue: its run record (a compare-and-put from
// absent), its entry in the submitted index and step 0, dispatched (for a
// run with a concurrency key: a slot and step 0, or a place in the key's
// line and no step, see concTake). hash
// is the input's, traceParent the run's trace context ("": none), now
// the submit time (unix ns). It returns step 0's job ID and the record
// written, for handoff.WithDispatched (see stepRun). Submit and a
// schedule's tick call it.
func (rt *Runtime) submitOps(ctx context.Context, txn *queue.Txn, id string, spec *RunSpec, stepQueue string, hash [32]byte, traceParent string, now int64) (jobID string, carry *carriedRun, err error) {
	jobID = newJobID()
	rec := &kvrecord.Run{
		RunID: id, SubmittedAt: now, UpdatedAt: now, InputHash: hash,
		State: kvrecord.StateActive, CurrentStep: 0, CurrentJob: jobID,
		Headers: spec.Headers, Priority: spec.Priority, MaxAttempts: spec.MaxAttemptsPerStep,
		Queue: stepQueue,
	}
	if !terminal.IsNoop(rt.hook) {
		rec.NotifyQueue = rt.opts.notifyQueueName
	}
	setPolicy(rec, spec)
	setDeadline(rec, spec.Deadline)
	rec.HistorySeq = submittedSeq // its history's submitted entry: this record
	opts := rt.stepOptions(rec, 0, jobID, traceParent)
	opts.RunAt = spec.StartAt          // zero or past: at once
	opts = qx.WithDispatch(opts, true) // starts at once if a local Run has a slot idle
	slot := true
	if c := spec.Concurrency; c.Key != "" { // a slot, or a place in its line
		rec.ConcKey, rec.ConcLimit = c.Key, uint32(c.Limit)
		ent := &runrec.ConcEntry{Payload: spec.Input, DueAt: rec.StartAt, TraceParent: traceParent}
		if slot, err = rt.concTake(ctx, txn, rec, rec.ConcLimit, ent); err != nil {
			return "", nil, err
		}
	}
	key, record := runrec.RunKV(rec)
	carry = &carriedRun{rec: *rec, b: record}
	if len(rec.Headers) > 0 {
		carry.rec.Headers = maps.Clone(rec.Headers) // the caller's map: not shared with the step
	}
	txn.CompareAndPut(key, nil, record).
		Put(runrec.SubmittedKey(now, id), []byte{})
	if slot {
		txn.Enqueue(stepQueue, spec.Input, opts)
	}
	rt.enqueueDeadline(txn, rec, traceParent)
	return jobID, carry, nil
}

// specDiff names what of spec differs from the run record's submission
// ("" if nothing does): headers, priority, attempt limit, step timeout,
// start time, retry policy, deadline.
func specDiff(rec *kvrecord.Run, spec *RunSpec) string {
	var diff []string
	if !maps.Equal(rec.Headers, spec.Headers) {
		diff = append(diff, "headers")
	}
	if rec.Priority != spec.Priority {
		diff = append(diff, fmt.Sprintf("priority (%d, not %d)", rec.Priority, spec.Priority))
	}
	if rec.MaxAttempts != spec.MaxAttemptsPerStep {
		diff = append(diff, fmt.Sprintf("MaxAttemptsPerStep (%d, not %d)", rec.MaxAttempts, spec.MaxAttemptsPerStep))
	}
	diff = policyDiff(diff, rec, spec)
	diff = deadlineDiff(diff, rec, spec)
	diff = concDiff(diff, rec, spec)
	return strings.Join(diff, ", ")
}

// stepOptions are the enqueue options of step n of a run. traceParent is
// the run's trace context (HeaderTraceParent; "" for none).
func (rt *Runtime) stepOptions(rec *kvrecord.Run, n uint32, jobID, traceParent string) queue.EnqueueOptions {
	h := make(map[string]string, len(rec.Headers)+3)
	maps.Copy(h, rec.Headers)
	h[HeaderRunID] = rec.RunID
	step := strconv.FormatUint(uint64(n), 10)
	h[HeaderStep] = step
	if traceParent != "" {
		h[HeaderTraceParent] = traceParent
	}
	dead := rt.notices
	if q := rt.stepQueue(rec); q != rt.opts.queueName {
		dead = runrec.NoticesQueue(q)
	}
	return queue.EnqueueOptions{
		Headers: h, Priority: rec.Priority, MaxAttempts: maxAttempts(rec),
		DedupKey: "run:" + rec.RunID + ":" + step, JobID: jobID,
		DeadLetterQueue: dead,
	}
}

// notifyConfigKey records, in the store, the notify queue of the Runtimes
// that have a hook (written when their Run starts), so that a Runtime
// without one (an API process that only submits and cancels) still
// enqueues the notification of a run it ends.
const notifyConfigKey = "workflow/config/notify_queue"

// resolveNotify sets rec.NotifyQueue, if the run does not carry one yet, to
// where its terminal notification must go: this Runtime's notify queue if it
// has a hook, else the one recorded in the store by a Runtime that has ("":
// none is known, and nothing is enqueued there).
//
// A run that Cancel ends with none known is not left unnotified: the
// hooked Runtime may exist without having Run yet (New does no I/O, so it
// records nothing). Its notification is handed to the Runtimes that work
// the run's step queue instead: terminate enqueues it on the step queue's
// notices queue (<step queue>.dead, which every Run works), and the first
// Run to claim it forwards it to its own hook's notify queue, or the one
// recorded by then, or drops it if there is still none (nobody listens);
// see forwardNotification.
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

// noticesQueue is this Runtime's notices queue: it receives the notices of
// dead step jobs (see handleDeadStep) and the notifications that Cancel
// hands over (see resolveNotify).
func (rt *Runtime) noticesQueue() string { return rt.notices }

// headerNotice marks a job on a notices queue that is not a dead step's
// notice: noticeHandOff, a notification handed over by Cancel.
const (
	headerNotice  = ReservedPrefix + "notice"
	noticeHandOff = "notify"
)

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

// Cancel cancels a run. A queued or scheduled step is removed and the run
// settled Cancelled in one transaction. A running step gets a durable
// cancel flag and its ctx cancelled (cause steprunner.ErrRunCancelled); the
// run settles Cancelled when the step returns, whatever it returns, unless
// the step itself returned Cancel. It returns false for unknown and
// finished runs; true otherwise (also when already cancelling); and
// ErrInvalidRunID for an ID that Submit would refuse. If ctx
// ends before its transaction is durable it returns
// queue.ErrOutcomeUnknown (the cancel may still take effect; calling
// Cancel again is safe).
func (rt *Runtime) Cancel(ctx context.Context, runID string) (bool, error) {
	if err := ValidateRunID(runID); err != nil {
		return false, err
	}
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
		if rec.CurrentJob == "" { // waiting for a signal, or paused
			txn, err := rt.cancelIdle(ctx, rec, old)
			if err != nil {
				return false, err
			}
			_, err = rt.q.Commit(ctx, txn)
			if errors.Is(err, queue.ErrConditionFailed) {
				continue
			}
			return err == nil, err
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
			txn = requireJob(new(queue.Txn), job.ID, queue.JobPending, queue.JobScheduled).
				CancelJob(job.ID)
			rt.terminate(txn, rec, old, ending{status: terminal.Cancelled, step: rec.CurrentStep,
				attempt: job.Attempt, payload: job.Payload, queue: job.Queue, handOff: true})
		case queue.JobClaimed:
			next := *rec
			next.State, next.Cancel = kvrecord.StateCancelling, true
			next.UpdatedAt = rt.opts.now().UnixNano()
			txn = new(queue.Txn)
			rt.addHistory(txn, &next, &runrec.History{Kind: string(HistoryCancelRequested), Step: rec.CurrentStep,
				Queue: job.Queue, Job: job.ID, End: next.UpdatedAt})
			txn = requireJob(txn, job.ID, queue.JobClaimed).
				CompareAndPut(kvrecord.RunKey(runID), old, runrec.EncodeRun(&next)).
				CancelJob(job.ID)
		case queue.JobDead:
			// The step died (its last attempt failed or its worker died)
			// and the run has not been settled yet: settle it cancelled.
			txn = requireJob(new(queue.Txn), job.ID, queue.JobDead)
			rt.terminate(txn, rec, old, ending{status: terminal.Cancelled, step: rec.CurrentStep,
				attempt: job.Attempt, payload: job.Payload, deadJob: job.ID, queue: job.Queue, handOff: true})
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

// cancelIdle returns the transaction that cancels a run without a step
// job: one waiting for a signal (its timeout job is removed; the terminal
// record keeps an empty payload for Retry) or one paused with its next step
// parked (the parked payload is kept).
func (rt *Runtime) cancelIdle(ctx context.Context, rec *kvrecord.Run, old []byte) (*queue.Txn, error) {
	payload, err := rt.idlePayload(ctx, rec)
	if err != nil {
		return nil, err
	}
	txn := new(queue.Txn)
	rt.terminate(txn, rec, old, ending{status: terminal.Cancelled, step: rec.CurrentStep, payload: payload,
		queue: rt.stepQueue(rec), handOff: true})
	return txn, nil
}

// idlePayload returns the payload that the terminal record keeps, for
// Retry, of a run ended while it had no step job: a paused run's parked
// step's, a run's in its key's line, else empty (a run waiting for a
// signal or for its children).
func (rt *Runtime) idlePayload(ctx context.Context, rec *kvrecord.Run) ([]byte, error) {
	switch {
	case rec.ConcLine != 0: // waiting for a concurrency slot: its step's payload
		return rt.concLinePayload(ctx, rec)
	case rec.Parked:
		p, err := rt.loadParked(ctx, rec.RunID)
		if err != nil {
			return nil, err
		}
		return p.Payload, nil
	}
	return []byte{}, nil
}

// ending is how a run ends, for terminate.
type ending struct {
	status terminal.Status
	result []byte // Succeed's result
	reason string
	step   uint32 // the final step
	// attempt is the final step's attempt that settled the run; 0 if
	// unknown or it never ran.
	attempt uint32
	// payload is the final step's payload, kept in the terminal record of
	// a failed or cancelled run for Retry.
	payload []byte
	// deadJob is the final step's job when it was dead-lettered.
	deadJob string
	// queue is the final step job's queue ("" if unknown).
	queue string
	// traceParent is the run's trace context, for the notification job.
	traceParent string
	// memo is the settled Outcome's memory writes (nil: none).
	memo *memoPlan
	// handOff: if no notify queue is known (see resolveNotify), hand the
	// notification to the notices queue of the step queue (queue, else
	// this Runtime's) instead of dropping it. Cancel sets it.
	handOff bool
	// hist is the run's history entry of the ending (nil: one made of
	// the ending's fields, see endHistory); histJob and histDead, the
	// step job whose lost attempts come before it (see attemptHistory).
	hist     *runrec.History
	histJob  *queue.Job
	histDead bool
}

// terminate adds to txn everything that ends a run: the run record's final
// state, the terminal record and (unless the run has no notify queue) the
// notification; with e.handOff, a run without a notify queue has its
// notification handed over (see resolveNotify).
//
// The reason is bounded (errtext.Bound) here, for every way a run ends:
// it goes into the terminal record and the notification (the hook's
// Outcome.Error).
func (rt *Runtime) terminate(txn *queue.Txn, rec *kvrecord.Run, old []byte, e ending) {
	e.reason = errtext.Bound(e.reason)
	ended := rt.opts.now().UnixNano()
	next := *rec
	next.State, next.Status, next.EndedAt, next.CurrentJob = kvrecord.StateTerminal, uint8(e.status), ended, ""
	next.CurrentStep, next.UpdatedAt = e.step, ended
	if rec.WaitTimer != "" {
		txn.CancelJob(rec.WaitTimer)
	}
	if rec.DeadlineJob != "" { // ended before its deadline
		txn.CancelJob(rec.DeadlineJob)
		next.DeadlineJob = ""
	}
	if rec.Parked {
		txn.Delete(runrec.ParkedKey(rec.RunID))
	}
	clearWait(&next)
	next.Paused, next.Parked = false, false
	e.memo.apply(txn, &next)
	if rec.Parent != "" && !rec.JoinReported {
		rt.joinParent(txn, rec, &next, &e) // a child's first end: its parent counts it
	}
	if rec.Pending > 0 { // it waited for children: cancel them
		next.Pending = 0
		deleteShards(txn, rec)
		rt.cascadeNotice(txn, rec, e.queue)
	}
	if rec.ConcKey != "" { // its concurrency slot (or place in line) is released
		rt.concRelease(txn, rec, &next)
	}
	rt.endHistory(txn, &next, &e, ended)
	var hookSeq uint64 // the history entry reserved for the hook's delivery
	if rec.NotifyQueue != "" {
		next.HistorySeq++
		hookSeq = next.HistorySeq
	}
	key, b := runrec.RunKV(&next)
	txn.CompareAndPut(key, old, b)
	t := &kvrecord.Terminal{RunID: rec.RunID, Status: uint8(e.status), Result: e.result, Error: e.reason,
		FinalStep: e.step, EndedAt: ended, Attempt: e.attempt, DeadJob: e.deadJob, Queue: e.queue}
	if e.status != terminal.Succeeded {
		t.Payload = e.payload
		if t.Payload == nil && e.deadJob == "" {
			t.Payload = []byte{} // kept, and empty
		}
	}
	txn.Put(runrec.TerminalKV(t))
	n := notification{RunID: rec.RunID, Status: uint8(e.status), Result: e.result, Error: e.reason,
		Headers: rec.Headers, FinalStep: e.step, EndedAt: ended, Retries: rec.Retries}
	switch {
	case rec.NotifyQueue != "": // resolved by resolveNotify
		txn.Enqueue(rec.NotifyQueue, n.encode(), withHookSeq(notifyOptions(rec.RunID, ended, e.traceParent), hookSeq))
	case e.handOff:
		stepQueue := e.queue
		if stepQueue == "" {
			stepQueue = rt.opts.queueName
		}
		opts := notifyOptions(rec.RunID, ended, e.traceParent)
		opts.Headers[headerNotice] = noticeHandOff
		txn.Enqueue(runrec.NoticesQueue(stepQueue), n.encode(), opts)
	}
}

// notifyOptions are the enqueue options of the notification of the run
// runID that ended at ended (unix ns), in the trace traceParent ("": none).
func notifyOptions(runID string, ended int64, traceParent string) queue.EnqueueOptions {
	headers := map[string]string{HeaderRunID: runID}
	if traceParent != "" {
		headers[HeaderTraceParent] = traceParent
	}
	var d [20]byte
	o := queue.EnqueueOptions{
		DedupKey: "notify:" + runID + ":" + string(strconv.AppendInt(d[:0], ended, 10)),
		Headers:  headers,
	}
	o = qx.WithDispatch(o, true)
	return o
}
