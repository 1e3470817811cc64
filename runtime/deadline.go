package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// This file holds run deadlines (RunSpec.Deadline): a scheduled job per
// run, on the timers queue of the run's first step queue, whose handler
// ends the run Failed with ErrRunDeadline in one transaction, as Cancel
// ends a run Cancelled.

// timerDeadline is the kind (headerTimer) of a deadline job on a timers
// queue (see handleTimer).
const timerDeadline = "deadline"

// validateDeadline checks RunSpec.Deadline against now: a deadline that
// has passed is ErrInvalidRunSpec. (One before StartAt is valid: the run
// fails at its deadline without having started.)
// The clock is read only for a spec that has a deadline.
func validateDeadline(spec *RunSpec, now func() time.Time) error {
	if d := spec.Deadline; !d.IsZero() && !d.After(now()) {
		return fmt.Errorf("%w: Deadline %s has passed", ErrInvalidRunSpec, d.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// setDeadline records a run's deadline (zero: none) in its record to be,
// with the ID of the job that will fire it (see enqueueDeadline).
func setDeadline(rec *kvrecord.Run, deadline time.Time) {
	if deadline.IsZero() {
		return
	}
	rec.Deadline, rec.DeadlineJob = format.UnixNano(deadline), newJobID()
}

// enqueueDeadline adds to txn the job that fires rec's deadline, if it has
// one: rec.DeadlineJob, due at rec.Deadline, on the timers queue of the
// step queue rec names (the Runtimes that serve it fire it).
func (rt *Runtime) enqueueDeadline(txn *queue.Txn, rec *kvrecord.Run, traceParent string) {
	if rec.DeadlineJob == "" {
		return
	}
	h := map[string]string{HeaderRunID: rec.RunID, headerTimer: timerDeadline}
	if traceParent != "" {
		h[HeaderTraceParent] = traceParent
	}
	txn.Enqueue(runrec.TimersQueue(rt.stepQueue(rec)), nil, queue.EnqueueOptions{
		JobID: rec.DeadlineJob, RunAt: time.Unix(0, rec.Deadline), MaxAttempts: timerAttempts, Headers: h,
	})
}

// rearmDeadline is Retry's part: a retried run keeps a deadline that is
// still ahead (a new job fires it) and drops one that has passed (the
// retried run has none; this includes a run that its deadline failed).
func (rt *Runtime) rearmDeadline(txn *queue.Txn, next *kvrecord.Run, traceParent string) {
	next.DeadlineJob = ""
	if next.Deadline == 0 {
		return
	}
	if next.Deadline <= rt.opts.now().UnixNano() {
		next.Deadline = 0
		return
	}
	next.DeadlineJob = newJobID()
	rt.enqueueDeadline(txn, next, traceParent)
}

// deadlineDiff adds to diff the deadline, if spec's differs from the run
// record's submission.
func deadlineDiff(diff []string, rec *kvrecord.Run, spec *RunSpec) []string {
	if d := format.UnixNano(spec.Deadline); rec.Deadline != d {
		diff = append(diff, fmt.Sprintf("Deadline (%s, not %s)", startText(rec.Deadline), startText(d)))
	}
	return diff
}

// deadlineError is the error a run that its deadline ended fails with.
func deadlineError(ns int64) error {
	return fmt.Errorf("%w (%s)", ErrRunDeadline, time.Unix(0, ns).UTC().Format(time.RFC3339Nano))
}

// handleDeadline fires a run's deadline job: if the run has not ended (the
// job is still its DeadlineJob), one transaction acks the job and ends the
// run Failed with ErrRunDeadline, wherever it is, as Cancel ends a run:
// a queued or scheduled step is removed; a waiting, paused or parked run
// has its timeout job or parked step removed; a run waiting for children
// has them cancelled (the cascade notice); a running step's job is
// cancelled, so that the step's ctx ends with cause ErrRunDeadline (see
// cancelCause), and what it returns later finds the run ended and is
// discarded. A deadline job that lost to the run's end is acknowledged
// and dropped (terminate also cancels it).
func (rt *Runtime) handleDeadline(claimCtx context.Context, job *queue.Job) error {
	ctx := context.WithoutCancel(claimCtx)
	runID := job.Headers[HeaderRunID]
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: the deadline of run %q kept racing its settlement", runID)
		}
		rec, old, err := rt.loadRun(ctx, runID)
		if errors.Is(err, ErrRunNotFound) || err == nil && (rec.State == kvrecord.StateTerminal || rec.DeadlineJob != job.ID) {
			err = rt.q.Ack(ctx, job)
			if queue.IsClaimLost(err) {
				return nil
			}
			return err
		}
		if err != nil {
			return err // the lease expires and the deadline fires again
		}
		if err := rt.resolveNotify(ctx, rec); err != nil {
			return err
		}
		// The job is acked here, not cancelled by terminate.
		cur := *rec
		cur.DeadlineJob = ""
		e := ending{status: terminal.Failed, reason: deadlineError(rec.Deadline).Error(), step: rec.CurrentStep,
			payload: []byte{}, queue: rt.stepQueue(rec), traceParent: job.Headers[HeaderTraceParent], handOff: true}
		txn := new(queue.Txn).Ack(job)
		if rec.CurrentJob == "" { // waiting for a signal, children or a slot, or paused
			if e.payload, err = rt.idlePayload(ctx, rec); err != nil {
				return err
			}
		} else {
			step, err := rt.q.GetJob(ctx, rec.CurrentJob)
			if errors.Is(err, queue.ErrJobNotFound) {
				continue // settling right now: read again
			}
			if err != nil {
				return err
			}
			e.attempt, e.payload, e.queue = step.Attempt, step.Payload, step.Queue
			switch step.State {
			case queue.JobPending, queue.JobScheduled, queue.JobClaimed:
				// A claimed step's ctx ends (cause ErrRunDeadline); its
				// settlement finds the run ended and only acks it.
				requireJob(txn, step.ID, step.State).CancelJob(step.ID)
			case queue.JobDead:
				requireJob(txn, step.ID, queue.JobDead)
				e.deadJob = step.ID
			default:
				continue // settling right now: read again
			}
		}
		e.hist = &runrec.History{Kind: string(HistoryDeadline), Step: e.step, Queue: e.queue} // run history
		rt.terminate(txn, &cur, old, e)
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue // the run moved on meanwhile
		}
		if queue.IsClaimLost(err) {
			return nil // cancelled by the run's end
		}
		return err
	}
}

// cancelCause returns, for a step of a run with a deadline, the cause its
// ctx ends with when its job is cancelled: ErrRunDeadline when the
// deadline ended the run, steprunner.ErrRunCancelled when a Cancel did
// (the run record tells them apart: Cancel sets its cancel flag). It reads
// the run record, so a run without a deadline (nil: always
// steprunner.ErrRunCancelled) costs nothing; if the read fails, the clock
// decides.
func (rt *Runtime) cancelCause(rec *kvrecord.Run) func() error {
	if rec.Deadline == 0 {
		return nil
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cur, _, err := rt.loadRun(ctx, rec.RunID)
		switch {
		case err == nil && cur.Cancel:
			return steprunner.ErrRunCancelled
		case err == nil, rt.opts.now().UnixNano() >= rec.Deadline:
			return ErrRunDeadline
		}
		return steprunner.ErrRunCancelled
	}
}
