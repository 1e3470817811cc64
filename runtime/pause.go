package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
)

// Pause stops a run from starting its next step, in one transaction:
//
//   - a step queued or scheduled is removed from the queue and parked
//     (payload and due time kept);
//   - a running step (one claimed when Pause commits, which Status reports
//     as running, even if it has not been handed to the Runner yet)
//     finishes and settles; the step it continues to is parked instead of
//     enqueued, and a retry of it, after an error, is parked when it comes
//     due;
//   - a run waiting for a signal keeps waiting: its timeout keeps
//     counting, and what wakes it (a signal, or the timeout) is parked.
//
// Status reports StatePaused (StateRunning while a step that was running
// when Pause committed still runs). Resume starts the parked step. Cancel
// works on a paused run. A parked step that had failed attempts restarts
// its attempt count on Resume.
//
// Pause of a paused run changes nothing and returns nil. Errors:
// ErrInvalidRunID, ErrRunNotFound, ErrRunEnded (the run ended or is being
// cancelled).
func (rt *Runtime) Pause(ctx context.Context, runID string) error {
	if err := ValidateRunID(runID); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: pause of run %q kept racing its settlement", runID)
		}
		rec, old, err := rt.loadRun(ctx, runID)
		if err != nil {
			return err
		}
		if rec.State != kvrecord.StateActive {
			return fmt.Errorf("%w: run %q", ErrRunEnded, runID)
		}
		if rec.Paused {
			return nil
		}
		next := *rec
		next.Paused, next.UpdatedAt = true, rt.opts.now().UnixNano()
		txn := new(queue.Txn)
		if rec.CurrentJob != "" {
			job, err := rt.q.GetJob(ctx, rec.CurrentJob)
			if errors.Is(err, queue.ErrJobNotFound) {
				continue // settling right now: read again
			}
			if err != nil {
				return err
			}
			switch job.State {
			case queue.JobPending, queue.JobScheduled:
				requireJob(txn, job.ID, queue.JobPending, queue.JobScheduled).CancelJob(job.ID)
				p := &runrec.Parked{RunID: runID, Step: rec.CurrentStep, Payload: job.Payload,
					DueAt: job.RunAt.UnixNano()}
				if sig := signalOf(job.Headers); sig != nil {
					p.Signal, p.TimedOut = sig.Name, sig.TimedOut
				}
				if p.Payload == nil {
					p.Payload = []byte{}
				}
				next.CurrentJob, next.Parked = "", true
				txn.Put(runrec.ParkedKey(runID), runrec.EncodeParked(p))
			case queue.JobClaimed:
				requireJob(txn, job.ID, queue.JobClaimed)
			}
		}
		rt.addHistory(txn, &next, controlHistory(HistoryPause, &next))
		txn.CompareAndPut(kvrecord.RunKey(runID), old, runrec.EncodeRun(&next))
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue // the run moved on meanwhile: read again
		}
		return err
	}
}

// Resume undoes Pause, in one transaction: the parked step is enqueued
// for its due time (now if that has passed: a delay or a timeout that
// ran out while the run was paused fires at once), with the payload it
// was parked with. A run that was paused while waiting for a signal, and
// whose wait has not ended, waits on.
//
// Resume of a run that is not paused changes nothing and returns nil.
// Errors: ErrInvalidRunID, ErrRunNotFound, ErrRunEnded.
func (rt *Runtime) Resume(ctx context.Context, runID string) error {
	if err := ValidateRunID(runID); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: resume of run %q kept racing other writes", runID)
		}
		rec, old, err := rt.loadRun(ctx, runID)
		if err != nil {
			return err
		}
		if rec.State != kvrecord.StateActive {
			return fmt.Errorf("%w: run %q", ErrRunEnded, runID)
		}
		if !rec.Paused {
			return nil
		}
		now := rt.opts.now()
		next := *rec
		next.Paused, next.UpdatedAt = false, now.UnixNano()
		txn := new(queue.Txn)
		if rec.Parked {
			p, err := rt.loadParked(ctx, runID)
			if err != nil {
				return err
			}
			next.Parked = false
			txn.Delete(runrec.ParkedKey(runID))
			var sig *steprunner.SignalDelivery
			if p.Signal != "" {
				sig = &steprunner.SignalDelivery{Name: p.Signal, TimedOut: p.TimedOut}
			}
			rt.startStep(txn, &next, p.Payload, time.Duration(max(p.DueAt-now.UnixNano(), 0)), sig, false, rt.tel.traceParent(ctx))
		}
		rt.addHistory(txn, &next, controlHistory(HistoryResume, &next))
		txn.CompareAndPut(kvrecord.RunKey(runID), old, runrec.EncodeRun(&next))
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue
		}
		return err
	}
}

// loadParked reads a paused run's parked step.
func (rt *Runtime) loadParked(ctx context.Context, runID string) (*runrec.Parked, error) {
	b, err := rt.q.Get(ctx, runrec.ParkedKey(runID))
	if err != nil {
		return nil, fmt.Errorf("runtime: the parked step of run %q: %w", runID, err)
	}
	return runrec.DecodeParked(b)
}

// parkClaimed parks a step job claimed while its run is paused (a retry
// that came due, a redelivery after a lost lease): it does not run. One transaction acks the
// job and parks its payload, due now.
func (rt *Runtime) parkClaimed(ctx context.Context, job *queue.Job, rec *kvrecord.Run, old []byte) error {
	for {
		next := *rec
		next.UpdatedAt, next.Queue = rt.opts.now().UnixNano(), job.Queue
		txn := new(queue.Txn).Ack(job)
		rt.startStep(txn, &next, job.Payload, 0, signalOf(job.Headers), false, job.Headers[HeaderTraceParent])
		txn.CompareAndPut(kvrecord.RunKey(rec.RunID), old, runrec.EncodeRun(&next))
		_, err := rt.q.Commit(ctx, txn)
		if !errors.Is(err, queue.ErrConditionFailed) {
			if queue.IsClaimLost(err) {
				return nil
			}
			return err
		}
		rec, old, err = rt.loadRun(ctx, rec.RunID)
		if errors.Is(err, ErrRunNotFound) || err == nil && (rec.State == kvrecord.StateTerminal || rec.CurrentJob != job.ID) {
			if err := rt.q.Ack(ctx, job); err != nil && !queue.IsClaimLost(err) {
				return err
			}
			return nil
		}
		if err != nil {
			return err
		}
		if !rec.Paused || rec.Cancel {
			// Resumed or cancelled meanwhile: give the job back to run.
			err := qx.Release(rt.q, ctx, job)
			if queue.IsClaimLost(err) {
				return nil
			}
			return err
		}
	}
}
