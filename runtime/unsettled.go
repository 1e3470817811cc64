package runtime

import (
	"errors"

	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Settlements that do not commit, and the error text that goes into
// records: see handleStep, and errtext for the bound (the package
// documentation states it).

// boundedErr returns err, or an error whose text is err's bounded
// (errtext.Bound) if err's is longer: what a Nack records in the job's
// history, so that a huge error is not sent (to a cluster's writer) only
// to be cut there.
func boundedErr(err error) error {
	if s := err.Error(); len(s) > errtext.Max {
		return errors.New(errtext.Bound(s))
	}
	return err
}

// failSettlement builds the transaction that settles step n when its own
// settlement cannot commit (see handleStep): dead-letter the step job and
// fail the run with reason. The terminal record does not keep the step's
// payload (it might be what is too large): the dead job keeps it, and
// Retry requeues that job.
func (rt *Runtime) failSettlement(rec *kvrecord.Run, old []byte, job *queue.Job, n uint32, reason string) *queue.Txn {
	reason = errtext.Bound(reason)
	txn := new(queue.Txn).DeadLetter(job, reason)
	rt.terminate(txn, rec, old, ending{status: terminal.Failed, reason: reason, step: n, attempt: job.Attempt,
		deadJob: job.ID, queue: job.Queue, traceParent: job.Headers[HeaderTraceParent]})
	return txn
}

// settledAs names what a settlement did with a step's answer, for the
// reason of a settlement that cannot commit.
func settledAs(cancelled bool, out steprunner.Outcome, stepErr error) string {
	switch {
	case cancelled:
		return "the run's cancel"
	case stepErr != nil:
		return "a failed attempt"
	}
	return out.Kind().String()
}

// logClaimLost logs a step whose claim was lost (its lease ran out while
// the process did not renew it, or another worker settled the job): what
// the step returned is discarded, and the queue runs the step again (or
// dead-letters it, on its last attempt). refused says the settlement's
// commit was refused; otherwise the loss was seen before settling.
func (rt *Runtime) logClaimLost(job *queue.Job, n uint32, err error, refused bool) {
	msg := "stepwell: the step's claim was lost while it ran (its lease ran out, or the job was settled elsewhere): its outcome is discarded"
	if refused {
		msg = "stepwell: a late settlement was refused: the step's claim was lost (its lease ran out, or the job was settled elsewhere); its outcome is discarded"
	}
	rt.opts.logger.Warn(msg, "run_id", job.Headers[HeaderRunID], "step", n, "attempt", job.Attempt,
		"max_attempts", job.MaxAttempts, "job_id", job.ID, "err", errtext.Bound(err.Error()))
}

// logUnsettled logs a settlement that could not commit (nor be read for)
// and that the runtime leaves to the queue: the step runs again once its
// lease runs out (or is dead-lettered, on its last attempt).
func (rt *Runtime) logUnsettled(job *queue.Job, n uint32, err error) {
	rt.opts.logger.Error("stepwell: the step's settlement did not commit; it runs again once its lease runs out",
		"run_id", job.Headers[HeaderRunID], "step", n, "attempt", job.Attempt, "max_attempts", job.MaxAttempts,
		"job_id", job.ID, "err", errtext.Bound(err.Error()))
}

// logMemoUnread logs a step that did not start because the run's memory
// could not be read (loadMemo): like an unsettled step, it is left to the
// queue, and runs again once its lease runs out.
func (rt *Runtime) logMemoUnread(job *queue.Job, n uint32, err error) {
	rt.opts.logger.Error("stepwell: reading the run's memory failed, so the step did not start; it runs again once its lease runs out",
		"run_id", job.Headers[HeaderRunID], "step", n, "attempt", job.Attempt, "max_attempts", job.MaxAttempts,
		"job_id", job.ID, "err", errtext.Bound(err.Error()))
}

// logNotificationLost logs a hook delivery whose claim was lost (its
// lease ran out): its settlement is discarded, and the queue delivers the
// notification again.
func (rt *Runtime) logNotificationLost(job *queue.Job, err error) {
	rt.opts.logger.Warn("stepwell: a terminal notification's claim was lost (its lease ran out): its delivery is not settled; the hook is called again",
		"run_id", job.Headers[HeaderRunID], "attempt", job.Attempt, "job_id", job.ID, "err", errtext.Bound(err.Error()))
}
