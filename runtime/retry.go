package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/terminal"
)

// Retry starts a failed or cancelled run again at the step that ended it,
// with that step's payload as it was and a fresh attempt budget. The run
// keeps its ID, input, headers, priority and attempt limit; its Retries
// count rises by one (RunStatus.Retries, terminal.Outcome.Retries). When
// the retried run ends, the hook is notified again: a new notification,
// with a new EndedAt (and so a new webhook-id).
//
// One transaction makes the run record pending again, removes its outcome
// (terminal record), and requeues the step: the dead job of a step that
// died is requeued in place (it leaves the dead letters, keeping its ID
// and attempt history); otherwise (Fail, Cancel) a new job is enqueued
// with the payload the terminal record kept. Of concurrent Retry calls on
// one run exactly one succeeds; the others return ErrRunNotRetryable (the
// run is then pending).
//
// Errors: ErrRunNotFound for an unknown run (or one finished longer ago
// than the terminal retention); ErrRunNotRetryable for a run that is not
// failed or cancelled, or whose step payload is no longer kept (a run that
// ended before this version kept it and whose dead job is gone, or one
// whose step's dead job was deleted before a Runtime settled the run).
func (rt *Runtime) Retry(ctx context.Context, runID string) error {
	if err := ValidateRunID(runID); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: retry of run %q kept racing other writes", runID)
		}
		rec, old, err := rt.loadRun(ctx, runID)
		if err != nil {
			return err
		}
		if rec.State != kvrecord.StateTerminal || terminal.Status(rec.Status) == terminal.Succeeded {
			st, err := rt.status(ctx, rec, false)
			if err != nil {
				return err
			}
			return fmt.Errorf("%w: run %q is %s, not failed or cancelled", ErrRunNotRetryable, runID, st.State)
		}
		tkey := kvrecord.TerminalKey(rec.EndedAt, runID)
		tb, err := rt.q.Get(ctx, tkey)
		if errors.Is(err, queue.ErrKeyNotFound) {
			continue // expiring right now: the next read says so
		}
		if err != nil {
			return err
		}
		t, err := kvrecord.DecodeTerminal(tb)
		if err != nil {
			return err
		}
		next := *rec
		next.State, next.Status, next.EndedAt, next.Cancel = kvrecord.StateActive, 0, 0, false
		next.CurrentStep, next.Retries, next.UpdatedAt = t.FinalStep, rec.Retries+1, rt.opts.now().UnixNano()
		txn, slot := new(queue.Txn), true
		if rec.ConcKey != "" { // a slot, or a place in its key's line
			if slot, err = rt.concRetry(ctx, txn, &next, t); err != nil {
				return err
			}
		}
		if slot {
			if err := rt.requeueFinalStep(ctx, txn, &next, t); err != nil {
				return err
			}
		}
		rt.rearmDeadline(txn, &next, rt.tel.traceParent(ctx))
		rt.addHistory(txn, &next, controlHistory(HistoryRetry, &next))
		txn.CompareAndPut(kvrecord.RunKey(runID), old, runrec.EncodeRun(&next)).CompareAndDelete(tkey, tb)
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue // retried, cancelled or expired meanwhile: read again
		}
		return err
	}
}

// requeueFinalStep adds to txn the requeue of the final step of the ended
// run whose terminal record is t, and points next (the run record to be)
// at its job.
func (rt *Runtime) requeueFinalStep(ctx context.Context, txn *queue.Txn, next *kvrecord.Run, t *kvrecord.Terminal) error {
	if t.DeadJob != "" {
		job, err := rt.q.GetJob(ctx, t.DeadJob)
		if err != nil && !errors.Is(err, queue.ErrJobNotFound) {
			return err
		}
		switch {
		case job != nil && job.State == queue.JobDead:
			next.CurrentJob, next.Queue = job.ID, job.Queue
			requireJob(txn, job.ID, queue.JobDead).RequeueDead(job.ID)
			return nil
		case job != nil && (job.State == queue.JobPending || job.State == queue.JobScheduled):
			// Requeued by hand (queue.Queue.RequeueDead): adopt it.
			next.CurrentJob, next.Queue = job.ID, job.Queue
			requireJob(txn, job.ID, queue.JobPending, queue.JobScheduled)
			return nil
		}
	}
	if t.Payload == nil {
		return fmt.Errorf("%w: the payload of run %q's step %d is no longer kept (its dead job %s was deleted)",
			ErrRunNotRetryable, next.RunID, t.FinalStep, t.DeadJob)
	}
	next.CurrentJob = newJobID()
	stepQueue := t.Queue // the queue the step ran on, whichever Runtime retries it
	if stepQueue == "" {
		stepQueue = rt.stepQueue(next)
	}
	next.Queue = stepQueue
	opts := rt.stepOptions(next, t.FinalStep, next.CurrentJob, rt.tel.traceParent(ctx))
	opts.DeadLetterQueue = runrec.NoticesQueue(stepQueue)
	// A dedup key of its own: the step's first job may still be around.
	opts.DedupKey = fmt.Sprintf("%s:retry%d", opts.DedupKey, next.Retries)
	opts = qx.WithDispatch(opts, true)
	txn.Enqueue(stepQueue, t.Payload, opts)
	return nil
}

// refuseStep dead-letters a step job that is not the current step of a live
// run, and logs it: its run ended (or expired) and the job was requeued by
// hand, or the run moved on. Such a step never runs, and is never dropped
// silently: the dead letter's reason says what to do instead (Retry).
func (rt *Runtime) refuseStep(ctx context.Context, job *queue.Job, rec *kvrecord.Run, badHeader error) error {
	runID := job.Headers[HeaderRunID]
	var reason string
	switch {
	case badHeader != nil:
		reason = fmt.Sprintf("not a workflow step: bad %s header %q", HeaderStep, job.Headers[HeaderStep])
	case rec == nil:
		reason = fmt.Sprintf("run %q no longer exists (finished longer ago than the terminal retention): its step is not run", runID)
	case rec.State == kvrecord.StateTerminal:
		reason = fmt.Sprintf("run %q has ended (%s): its steps no longer run; retry the run instead (Runtime.Retry, stepwell retry %s)",
			runID, stateOf(terminal.Status(rec.Status)), runID)
	default:
		reason = fmt.Sprintf("run %q is at step %d (job %s): this step job is stale and is not run", runID, rec.CurrentStep, rec.CurrentJob)
	}
	rt.opts.logger.Warn("stepwell: refusing a step job that is not its run's current step",
		"run_id", runID, "job_id", job.ID, "reason", reason)
	err := rt.q.DeadLetter(ctx, job, reason)
	if queue.IsClaimLost(err) {
		return nil
	}
	return err
}
