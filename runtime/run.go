package runtime

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/stepmemo"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Run executes steps and delivers terminal notifications until ctx is done,
// then stops claiming, waits for running steps (see WithDrainTimeout) and
// returns nil. It returns early only if the store fails for good (for
// example queue.ErrFenced; see queue.Queue.Err): it rides out an outage of
// the store, which delays steps but fails no run and spends no attempt
// (see queue.Health). Several Runtimes may Run on one store at once. A
// client Runtime (New without a Runner) returns ErrNoRunner at once. A
// Runtime whose step queue is the notify queue of a Runtime with a hook on
// the store (as recorded when that one's Run started) returns an error
// wrapping ErrInvalidQueueName at once: each would take the other's jobs
// for its own, and fail them.
func (rt *Runtime) Run(ctx context.Context) error {
	if rt.runner == nil {
		return ErrNoRunner
	}
	err := rt.checkNotNotifyQueue(ctx, rt.opts.queueName, 0) // read afresh, before this one records its own
	if err == nil {
		err = rt.recordNotifyQueue(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing ran
		}
		return err
	}
	unobserve, err := rt.tel.observe(rt.q, rt.opts.queueName)
	if err != nil {
		return err
	}
	defer unobserve()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Claims bring each step's run record (see stepRun).
		pf := handoff.WithPrefetch(gctx, handoff.Prefetch{Header: HeaderRunID, Prefix: kvrecord.RunPrefix})
		return rt.q.Work(pf, rt.opts.queueName, rt.handleStep, manualSettle(queue.WorkOptions{
			Concurrency: rt.opts.maxConcurrent, DrainTimeout: rt.opts.drainTimeout,
			PollInterval: rt.opts.pollInterval,
		}))
	})
	if !terminal.IsNoop(rt.hook) {
		g.Go(func() error {
			return rt.q.Work(gctx, rt.opts.notifyQueueName, rt.handleNotification, manualSettle(queue.WorkOptions{
				Concurrency: rt.opts.notifyConcurrency, DrainTimeout: rt.opts.drainTimeout,
				PollInterval: rt.opts.pollInterval,
			}))
		})
	}
	g.Go(func() error {
		return rt.q.Work(gctx, rt.noticesQueue(), rt.handleDeadStep, manualSettle(queue.WorkOptions{
			Concurrency: 1, DrainTimeout: rt.opts.drainTimeout,
			PollInterval: rt.opts.pollInterval,
		}))
	})
	g.Go(func() error {
		return rt.q.Work(gctx, rt.timersQueue(), rt.handleTimer, manualSettle(queue.WorkOptions{
			Concurrency: 4, DrainTimeout: rt.opts.drainTimeout,
			PollInterval: rt.opts.pollInterval,
		}))
	})
	g.Go(func() error { rt.janitor(gctx); return nil })
	return g.Wait()
}

// forwardNotification delivers a notification that Cancel handed over to
// the notices queue because no notify queue was known when it ended the
// run (see resolveNotify): in one transaction with the notice's ack, it
// enqueues the notification on this Runtime's notify queue if it has a
// hook, else on the one recorded in the store, else nowhere (nobody
// listens; logged at DEBUG).
func (rt *Runtime) forwardNotification(ctx context.Context, notice *queue.Job) error {
	n, err := decodeNotification(notice.Payload)
	if err != nil {
		return rt.q.DeadLetter(ctx, notice, fmt.Sprintf("undecodable notification: %v", err))
	}
	var to kvrecord.Run
	if err := rt.resolveNotify(ctx, &to); err != nil {
		return err
	}
	txn := new(queue.Txn).Ack(notice)
	if to.NotifyQueue != "" {
		txn.Enqueue(to.NotifyQueue, notice.Payload, notifyOptions(n.RunID, n.EndedAt, notice.Headers[HeaderTraceParent]))
	} else {
		rt.opts.logger.Debug("stepwell: no Runtime with a hook on the store; the run's end is not notified", "run_id", n.RunID)
	}
	_, err = rt.q.Commit(ctx, txn)
	return err
}

// handleDeadStep settles the run of a step job that the queue dead-lettered
// without the runtime (its lease expired on the last attempt, or its worker
// died on it): the run fails with the job's last error (or ends cancelled
// if a cancel was requested), in one transaction with the notice's ack.
// The terminal record keeps the dead job's payload, so that Retry works
// after the dead job is gone (queue.QueueConfig.DeadRetention).
//
// Notices of steps the runtime dead-lettered itself find the run already
// ended and are just acknowledged, as are notices whose job is no longer
// dead: it was requeued (Retry of the run that a Cancel ended, or by hand),
// and its next death, if any, comes with a notice of its own. A dead job
// deleted before its notice was handled (dead retention) still fails its
// run, without the payload.
func (rt *Runtime) handleDeadStep(ctx context.Context, notice *queue.Job) error {
	ctx = context.WithoutCancel(ctx)
	switch notice.Headers[headerNotice] {
	case noticeHandOff:
		return rt.forwardNotification(ctx, notice)
	case noticeCascade:
		return rt.cascade(ctx, notice)
	}
	deadID := string(notice.Payload)
	runID := notice.Headers[HeaderRunID]
	n64, _ := strconv.ParseUint(notice.Headers[HeaderStep], 10, 32)
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: settling run %q of dead step job %s kept racing other writes", runID, deadID)
		}
		rec, old, err := rt.loadRun(ctx, runID)
		if errors.Is(err, ErrRunNotFound) || err == nil && (rec.State == kvrecord.StateTerminal || rec.CurrentJob != deadID) {
			return rt.q.Ack(ctx, notice)
		}
		if err != nil {
			return err
		}
		job, err := rt.q.GetJob(ctx, deadID)
		if err != nil && !errors.Is(err, queue.ErrJobNotFound) {
			return err
		}
		if job != nil && job.State != queue.JobDead {
			// Requeued since it died: it runs again (and settles the run
			// itself), so this death no longer ends the run.
			return rt.q.Ack(ctx, notice)
		}
		if err := rt.resolveNotify(ctx, rec); err != nil {
			return err
		}
		txn := new(queue.Txn).Ack(notice)
		e := ending{status: terminal.Cancelled, step: uint32(n64), deadJob: deadID}
		if job != nil {
			// Still dead when this commits; its payload is kept for Retry.
			requireJob(txn, deadID, queue.JobDead)
			e.attempt, e.payload, e.queue = job.Attempt, job.Payload, job.Queue
			e.traceParent = job.Headers[HeaderTraceParent]
		}
		// Otherwise the dead job was deleted (dead retention): the run
		// record's compare-and-put alone says nothing moved on.
		if !rec.Cancel {
			e.status, e.reason = terminal.Failed, "step "+strconv.FormatUint(n64, 10)+" died: "+notice.Headers[queue.HeaderDeadReason]
		}
		e.hist = &runrec.History{Kind: string(HistoryDead), Step: e.step, Attempt: e.attempt, Queue: e.queue, Job: deadID,
			Error: runrec.HistoryError(notice.Headers[queue.HeaderDeadReason])}
		if job != nil {
			e.hist.PayloadSize, e.histJob, e.histDead = uint64(len(job.Payload)), job, true
		}
		rt.terminate(txn, rec, old, e)
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue
		}
		return err
	}
}

// stepRun returns the run record of step job: as the transaction that
// started the job wrote it, if that transaction carried the record along
// (a settlement that chained the job to this slot, a Submit that
// dispatched step 0 to it: a *carriedRun, decoded already), or as the
// store's writer read it with the claim (claims prefetch its bytes: see
// Run), else as read from the store. A member saves a call to the writer
// per step, one process a read of the store. A carried record is stale
// when a Cancel, Pause or signal committed since; the step's settlement then fails its
// compare-and-put and reads the record again, as it does when the record
// changes while the step runs. A cancel that reached the claim already is
// read at once, so that the step does not start.
func (rt *Runtime) stepRun(claimCtx, settleCtx context.Context, runID string, job *queue.Job) (*kvrecord.Run, []byte, error) {
	if c := handoff.Carried[*queue.Job](claimCtx); c != nil && !errors.Is(context.Cause(claimCtx), queue.ErrJobCancelled) {
		switch c := c.(type) {
		case *carriedRun:
			if c != nil && c.rec.RunID == runID && c.rec.CurrentJob == job.ID {
				return &c.rec, c.b, nil
			}
		case []byte:
			if rec, err := kvrecord.DecodeRun(c); err == nil && rec.RunID == runID && rec.CurrentJob == job.ID {
				return rec, c, nil
			}
		}
	}
	return rt.loadRun(settleCtx, runID)
}

// carriedRun is a run record that a transaction wrote, carried to the
// step it started in this process (see stepRun): decoded (rec) and as
// written (b, the compare-and-put's expected bytes). The step that takes
// it owns it; nothing else reads or changes it once it is handed over.
type carriedRun struct {
	rec kvrecord.Run
	b   []byte
}

// stepCtl holds what a step's contexts need, in one allocation: the
// settlement's context (settle: the claim context's values, never
// cancelled), and the step's (see start).
type stepCtl struct {
	settle    detached // claimCtx's values, without its cancellation
	values    detached // the step's values (its span), when not claimCtx's
	claimCtx  context.Context
	cancelled func() error
	cancel    context.CancelCauseFunc
	stopAfter func() bool // the AfterFunc of a claimCtx that is no handler's, else nil
}

// detached has the values of its Context and none of its cancellation,
// as context.WithoutCancel's does, but it can live inside a struct
// allocated anyway. Unlike WithoutCancel's, context.Cause of it is its
// parent's cause (nil, or the claim's), not nil: it is given only to the
// runtime's own reads and commits, which look at its values and Done
// alone, and as the parent of the step's context, whose Cause is its own.
type detached struct{ context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }

// newStepCtl returns the stepCtl of a step run under claimCtx.
func newStepCtl(claimCtx context.Context) *stepCtl {
	return &stepCtl{settle: detached{claimCtx}, claimCtx: claimCtx}
}

// start returns the step's context: it maps the claim context's causes
// onto steprunner's. Its values are those of values: claimCtx's, and the
// step's span. cancelled, if not nil, says why the job was cancelled
// (see cancelCause); else it was the run's Cancel. stop ends it.
func (c *stepCtl) start(values context.Context, cancelled func() error) context.Context {
	parent := context.Context(&c.settle)
	if values != c.claimCtx {
		c.values.Context = values
		parent = &c.values
	}
	ctx, cancel := context.WithCancelCause(parent)
	c.cancel, c.cancelled = cancel, cancelled
	// A Work handler's context tells c itself, with no allocation; any
	// other (a test's) through an AfterFunc.
	if !qx.OnClaimEnd(c.claimCtx, c) {
		c.stopAfter = context.AfterFunc(c.claimCtx, c.ClaimEnded)
	}
	return ctx
}

// ClaimEnded cancels the step's context with the steprunner cause of the
// claim context's (queuex.ClaimEnder).
func (c *stepCtl) ClaimEnded() {
	cause := context.Cause(c.claimCtx)
	switch {
	case errors.Is(cause, queue.ErrJobCancelled) && c.cancelled != nil:
		c.cancel(c.cancelled())
	case errors.Is(cause, queue.ErrJobCancelled):
		c.cancel(steprunner.ErrRunCancelled)
	case errors.Is(cause, queue.ErrClaimLost):
		c.cancel(steprunner.ErrLeaseLost)
	default:
		c.cancel(steprunner.ErrShutdown)
	}
}

// stop ends the step's context that start returned.
func (c *stepCtl) stop() {
	if c.stopAfter != nil {
		c.stopAfter()
	} else {
		qx.OnClaimEnd(c.claimCtx, nil)
	}
	c.cancel(context.Canceled)
}

// handleStep runs one step and settles it in one transaction per the
// table in the package documentation.
func (rt *Runtime) handleStep(claimCtx context.Context, job *queue.Job) error {
	ctl := newStepCtl(claimCtx)
	settleCtx := context.Context(&ctl.settle)
	runID := job.Headers[HeaderRunID]
	n64, perr := strconv.ParseUint(job.Headers[HeaderStep], 10, 32)
	rec, old, err := rt.stepRun(claimCtx, settleCtx, runID, job)
	if err == nil && rec.State == kvrecord.StateTerminal && (job.CancelRequested || errors.Is(context.Cause(claimCtx), queue.ErrJobCancelled)) {
		return rt.q.Ack(settleCtx, job) // its run ended while it was claimed (a deadline): not run
	}
	if perr != nil || errors.Is(err, ErrRunNotFound) || err == nil && (rec.State == kvrecord.StateTerminal || rec.CurrentJob != job.ID) {
		// Not a live step of a live run (its run ended or expired, and the
		// job was requeued by hand): refuse it, visibly.
		return rt.refuseStep(settleCtx, job, rec, perr)
	}
	if err != nil {
		return err // the claim's lease expires and the step is retried
	}
	n := uint32(n64)
	if rec.Paused && !rec.Cancel && job.Attempt > 1 {
		// A retry (or redelivery) of a paused run's step: it does not
		// start. A first attempt claimed before Pause committed (dispatched
		// or chained; Status said running) runs.
		return rt.parkClaimed(settleCtx, job, rec, old)
	}

	began := time.Now()
	spanCtx, span := rt.tel.startStep(claimCtx, job, runID, n)
	spanEnded := false
	defer func() {
		if !spanEnded { // not settled here: the settlement's store error
			span.End()
		}
	}()
	var outcome steprunner.Outcome
	var boxed any    // outcome as stepmemo reads it: boxed once
	var nextQ string // the queue of the step the outcome starts (see nextQueue)
	var stepErr error
	step := &steprunner.Step{
		RunID: runID, Number: n, Payload: job.Payload, Headers: userHeaders(job.Headers),
		JobID: job.ID, Attempt: job.Attempt, MaxAttempts: job.MaxAttempts, Signal: signalOf(job.Headers),
	}
	var memo map[string][]byte
	if !rec.Cancel {
		// The run's memory: read only when its record counts some.
		if memo, err = rt.loadMemo(settleCtx, rec); err != nil {
			rt.logMemoUnread(job, n, err)
			return err // the claim's lease expires and the step is retried
		}
		setStepMemo(step, memo)
		if rec.Spawned > 0 && n == rec.SpawnStep+1 { // after a Spawn: its children's results
			if step.Children, err = rt.childResults(settleCtx, rec); err != nil {
				return err // the claim's lease expires and the step is retried
			}
		}
		ctx := ctl.start(spanCtx, rt.cancelCause(rec))
		outcome, stepErr = rt.runWithTimeout(ctx, step, rt.stepTimeout(rec))
		ctl.stop()
		switch cause := context.Cause(claimCtx); {
		case errors.Is(cause, queue.ErrClaimLost):
			spanEnded = true
			endSpan(span, cause) // another attempt owns the step now
			rt.logClaimLost(job, n, cause, false)
			return nil
		case errors.Is(cause, queue.ErrDrainTimeout):
			spanEnded = true
			endSpan(span, cause) // Work releases the job for another attempt
			return nil
		}
		if stepErr == nil && outcome.IsZero() {
			stepErr = errors.New("runtime: the runner returned the zero Outcome with a nil error")
		}
		if stepErr == nil && outcome.Kind() == steprunner.KindAwait {
			if err := ValidateSignalName(outcome.SignalName()); err != nil {
				stepErr = steprunner.Permanent(fmt.Errorf("AwaitSignal: %w", err))
			}
		}
		if stepErr == nil && !outcome.IsZero() {
			boxed = outcome
			if nextQ, err = rt.nextQueue(boxed); err != nil {
				stepErr = steprunner.Permanent(err)
			}
		}
	}
	// The Outcome's memory writes, checked against the limits and the
	// memory that committed before the step: over a limit, the step fails
	// permanently before anything of its Outcome is written.
	var mp *memoPlan
	if stepErr == nil && !outcome.IsZero() {
		if boxed == nil {
			boxed = outcome
		}
		if mp, err = planMemo(rec, memo, stepmemo.Writes(boxed), rt.opts.memoLimits); err != nil {
			stepErr = steprunner.Permanent(fmt.Errorf("step %d's memory writes: %w", n, err))
		}
	}
	var sp *spawnPlan // a Spawn's children, checked against the limits
	if stepErr == nil && outcome.Kind() == steprunner.KindSpawn {
		if sp, err = rt.planSpawn(rec, n, outcome); err != nil {
			stepErr = steprunner.Permanent(fmt.Errorf("step %d's Spawn: %w", n, err))
		}
	}

	// Settle with the run record read above, re-reading it until the
	// compare-and-put holds (a concurrent Cancel may have changed it). A
	// cancel that reached the step changed it for sure: read it again at
	// once, or a step that returns its ctx's error would be retried (an
	// attempt and a backoff spent) before the run ends cancelled.
	//
	// A settlement that cannot commit for good (a result, payload or
	// record over the queue's limits: a *queue.TooLargeError) is replaced
	// by one that can: the step is dead-lettered and the run fails with
	// that reason (unsettleable). Any settlement that does not commit is
	// logged: the step then runs again once its lease runs out.
	if rt.opts.beforeSettle != nil {
		rt.opts.beforeSettle(settleCtx, job)
	}
	reread := errors.Is(context.Cause(claimCtx), queue.ErrJobCancelled)
	// The step ran: what follows settles it, and the settlement may claim
	// the slot's next job (see handoff.Settling).
	handoff.Settling[*queue.Job](claimCtx)
	var unsettleable error
	for first := true; ; first = false {
		if !first || reread {
			rec, old, err = rt.loadRun(settleCtx, runID)
			if errors.Is(err, ErrRunNotFound) || err == nil && (rec.State == kvrecord.StateTerminal || rec.CurrentJob != job.ID) {
				return rt.q.Ack(settleCtx, job)
			}
			if err != nil {
				rt.logUnsettled(job, n, err)
				return err
			}
		}
		if err := rt.resolveNotify(settleCtx, rec); err != nil {
			rt.logUnsettled(job, n, err)
			return err
		}
		var mail *queue.KV
		if unsettleable == nil && stepErr == nil && !rec.Cancel && outcome.Kind() == steprunner.KindAwait {
			if mail, err = rt.mailHead(settleCtx, rec, outcome.SignalName()); err != nil {
				rt.logUnsettled(job, n, err)
				return err
			}
		}
		var txn *queue.Txn
		var carry *carriedRun
		if unsettleable != nil {
			txn = rt.failSettlement(rec, old, job, n, unsettleable.Error())
		} else {
			txn, carry = rt.settlement(rec, old, job, n, outcome, nextQ, stepErr, mail, mp, sp, rt.stepHistory(job, n, began))
		}
		res, err := rt.commitPooled(settleCtx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			if sp != nil && stepErr == nil && !rec.Cancel {
				// A child's run ID may exist: fail the step, not loop.
				if cerr := rt.spawnConflict(settleCtx, sp); cerr != nil {
					stepErr, sp = steprunner.Permanent(fmt.Errorf("step %d's Spawn: %w", n, cerr)), nil
				}
			}
			continue
		}
		if errors.Is(err, queue.ErrTooLarge) && unsettleable == nil {
			// It would fail the same way on every attempt: fail the run
			// with the reason instead (reported below, once committed).
			unsettleable = fmt.Errorf("runtime: step %d's settlement (%s) cannot commit: %w",
				n, settledAs(rec.Cancel, outcome, stepErr), err)
			stepErr = steprunner.Permanent(unsettleable)
			continue
		}
		spanEnded = true
		if err != nil {
			endSpan(span, err)
		}
		if queue.IsClaimLost(err) {
			rt.logClaimLost(job, n, err, true)
			return nil
		}
		if err != nil {
			rt.logUnsettled(job, n, err)
		}
		if err == nil {
			outc := stepOutcome(rec.Cancel && unsettleable == nil, job, outcome, stepErr)
			rt.tel.endStep(spanCtx, span, outc, stepErr, began)
			switch {
			case stepErr == nil:
			case outc == outcomeCancelled:
				// The run's cancel ended it, not the error (most often
				// the step's answer to its cancelled context): no retry,
				// no failure to report.
				rt.logCancelledPanic(stepError(step, stepErr))
			default:
				// The handler's context: context.WithoutCancel's, exactly.
				rt.reportStepError(context.WithoutCancel(claimCtx), stepError(step, stepErr))
			}
			rt.chain(claimCtx, res, carry)
		}
		return err
	}
}

// chain hands the next step, claimed by its settlement, to the worker slot
// that ran this one: it runs at once, without a claim of its own, and with
// carry, the run record the settlement wrote (see stepRun).
func (rt *Runtime) chain(claimCtx context.Context, res queue.TxnResult, carry *carriedRun) {
	for i := range res.Enqueued {
		j := qx.Claimed(res.Enqueued[i])
		if j == nil || handoff.Give(claimCtx, j.Queue, j, carry) {
			continue
		}
		// Not run from a worker (cannot happen in handleStep): give it back.
		if err := qx.Release(rt.q, context.WithoutCancel(claimCtx), j); err != nil && !queue.IsClaimLost(err) {
			rt.opts.logger.Warn("stepwell: releasing a chained step failed", "err", err)
		}
	}
}

// settlement builds the one transaction that settles step n, and returns
// with it the run record it writes when the run goes on (nil otherwise).
// nextQ is the queue of the step that out starts (see nextQueue; checked
// when the step returned).
// mail is the oldest signal in the mailbox that an AwaitSignal outcome
// consumes (nil: none); mp is the outcome's memory writes (nil: none),
// written only when the outcome is settled as such; h is the attempt's
// history entry (its kind and output set here), written in the same
// transaction.
func (rt *Runtime) settlement(rec *kvrecord.Run, old []byte, job *queue.Job, n uint32, out steprunner.Outcome, nextQ string, stepErr error, mail *queue.KV, mp *memoPlan, sp *spawnPlan, h *runrec.History) (txn *queue.Txn, carry *carriedRun) {
	// Taken from a pool: handleStep gives it back once committed.
	txn = qx.TakeTxn()
	tp := job.Headers[HeaderTraceParent] // the run's trace: kept by successors
	// A retry (Nack) keeps the job, and with it its headers.
	switch {
	case rec.Cancel && !(stepErr == nil && out.Kind() == steprunner.KindCancel):
		// Cancelled from outside: whatever the step did, the run ends here.
		txn.Ack(job)
		h.Kind = string(HistoryCancel)
		if stepErr != nil {
			h.Error = runrec.HistoryError(stepErr.Error())
		}
		rt.terminate(txn, rec, old, ending{status: terminal.Cancelled, step: n, attempt: job.Attempt,
			payload: job.Payload, queue: job.Queue, traceParent: tp, hist: h, histJob: job})
	case stepErr != nil && !steprunner.IsPermanent(stepErr) && job.Attempt < job.MaxAttempts:
		delay := retryDelay(rec, job, stepErr)
		txn.Nack(job, boundedErr(stepErr), delay)
		// The run record, for its history alone.
		h.Kind, h.Error = string(errorKind(stepErr)), runrec.HistoryError(stepErr.Error())
		h.End = rt.opts.now().UnixNano()
		h.Due = h.End + int64(delay)
		next := *rec
		rt.attemptHistory(txn, &next, job, false, h)
		txn.CompareAndPut(kvrecord.RunKey(rec.RunID), old, runrec.EncodeRun(&next))
	case stepErr != nil:
		reason := errtext.Bound(stepErr.Error())
		txn.DeadLetter(job, reason)
		h.Kind = string(errorKind(stepErr))
		rt.terminate(txn, rec, old, ending{status: terminal.Failed, reason: reason, step: n,
			attempt: job.Attempt, payload: job.Payload, deadJob: job.ID, queue: job.Queue, traceParent: tp,
			hist: h, histJob: job})
	default:
		switch out.Kind() {
		case steprunner.KindContinue, steprunner.KindAwait, steprunner.KindSpawn:
			next := *rec
			next.CurrentStep = n + 1
			next.Queue = nextQ
			next.UpdatedAt = rt.opts.now().UnixNano()
			txn.Ack(job)
			mp.apply(txn, &next)
			h.End = next.UpdatedAt
			switch out.Kind() {
			case steprunner.KindAwait:
				rt.await(txn, &next, out, mail, tp)
				h.Kind, h.Signal, h.Due = string(HistoryAwait), out.SignalName(), next.WaitDeadline
				setOutput(h, out.Payload())
			case steprunner.KindSpawn:
				rt.spawn(txn, rec, &next, job, n, sp, tp)
				h.Kind, h.ResultSize = string(HistorySpawn), uint64(next.Spawned)
			default:
				rt.startStep(txn, &next, out.Payload(), out.Delay(), nil, true, tp)
				h.Kind = string(HistoryContinue)
				if out.Delay() > 0 {
					h.Kind, h.Due = string(HistoryDelay), addNanos(h.End, out.Delay())
				}
				setOutput(h, out.Payload())
			}
			rt.attemptHistory(txn, &next, job, false, h)
			key, b := runrec.RunKV(&next)
			txn.CompareAndPut(key, old, b)
			return txn, &carriedRun{rec: next, b: b}
		case steprunner.KindSucceed:
			txn.Ack(job)
			h.Kind = string(HistorySucceed)
			rt.terminate(txn, rec, old, ending{status: terminal.Succeeded, result: out.Result(), step: n, attempt: job.Attempt, traceParent: tp, memo: mp,
				hist: h, histJob: job})
		case steprunner.KindFail:
			txn.Ack(job)
			h.Kind = string(HistoryFail)
			rt.terminate(txn, rec, old, ending{status: terminal.Failed, reason: out.Reason(), step: n,
				attempt: job.Attempt, payload: job.Payload, queue: job.Queue, traceParent: tp, memo: mp,
				hist: h, histJob: job})
		case steprunner.KindCancel:
			txn.Ack(job)
			h.Kind = string(HistoryCancel)
			rt.terminate(txn, rec, old, ending{status: terminal.Cancelled, reason: out.Reason(), step: n,
				attempt: job.Attempt, payload: job.Payload, queue: job.Queue, traceParent: tp, memo: mp,
				hist: h, histJob: job})
		}
	}
	return txn, nil
}

func (rt *Runtime) callRunner(ctx context.Context, s *steprunner.Step) (out steprunner.Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &stepPanic{value: r, stack: debug.Stack()}
		}
	}()
	out, err = rt.runner.RunStep(ctx, s)
	return out, errtext.Safe(err) // its text is read, maybe where nothing recovers
}

// userHeaders returns the headers of h that are not reserved: nil if
// there are none (a run submitted without headers), as is most common.
func userHeaders(h map[string]string) map[string]string {
	n := 0
	for k := range h {
		if !strings.HasPrefix(k, ReservedPrefix) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	for k, v := range h {
		if !strings.HasPrefix(k, ReservedPrefix) {
			out[k] = v
		}
	}
	return out
}

// janitor deletes the records of runs that ended longer ago than the
// terminal retention, once a minute (and at start).
func (rt *Runtime) janitor(ctx context.Context) {
	every := max(min(time.Minute, rt.opts.retention/2), time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := rt.indexRuns(ctx); err != nil && ctx.Err() == nil {
			rt.opts.logger.Warn("stepwell: indexing runs for ListRuns failed", "err", err)
		}
		if err := rt.expireTerminal(ctx); err != nil && ctx.Err() == nil {
			rt.opts.logger.Warn("stepwell: expiring terminal records failed", "err", err)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// expireTerminal deletes terminal and run records past the retention.
func (rt *Runtime) expireTerminal(ctx context.Context) error {
	cutoff := rt.opts.now().Add(-rt.opts.retention).UnixNano()
	var after []byte
	for {
		page, err := rt.q.Scan(ctx, []byte(kvrecord.TerminalPrefix), queue.ScanOptions{After: after, Limit: 100})
		if err != nil {
			return err
		}
		for _, kv := range page.Items {
			ended, runID, err := kvrecord.ParseTerminalKey(kv.Key)
			if err != nil || ended > cutoff {
				return nil // keys sort by end time: the rest are younger
			}
			txn := new(queue.Txn).Delete(kv.Key)
			rec, old, err := rt.loadRun(ctx, runID)
			switch {
			case errors.Is(err, ErrRunNotFound):
			case err != nil:
				// Keep the terminal record: deleting it alone would leave a
				// run record that nothing expires. Later passes retry it.
				rt.opts.logger.Warn("stepwell: expiring a run failed; will retry", "run_id", runID, "err", err)
				continue
			case rec.State == kvrecord.StateTerminal && rec.EndedAt == ended:
				txn.CompareAndDelete(kvrecord.RunKey(runID), old).Delete(runrec.SubmittedKey(rec.SubmittedAt, runID))
				err = rt.deleteRunKeys(ctx, txn, rec, old) // mailbox, memory: deleted with the record
				if err != nil && !errors.Is(err, queue.ErrConditionFailed) {
					return err
				}
			}
			if _, err := rt.q.Commit(ctx, txn); err != nil && !errors.Is(err, queue.ErrConditionFailed) {
				return err
			}
		}
		if page.Next == nil {
			return nil
		}
		after = page.Next
	}
}
