package queue

import (
	"context"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/errtext"
)

// Ack settles a claimed job as done. It fails with a *ClaimLostError,
// changing nothing, if the claim was lost.
func (q *Queue) Ack(ctx context.Context, job *Job) error {
	_, err := q.Commit(ctx, new(Txn).Ack(job))
	return err
}

// Nack settles a claimed job as failed: retried after retryAfter (0: the
// queue's exponential backoff with jitter; pass a server's Retry-After
// here), or dead-lettered if that was its last attempt.
func (q *Queue) Nack(ctx context.Context, job *Job, cause error, retryAfter time.Duration) error {
	_, err := q.Commit(ctx, new(Txn).Nack(job, cause, retryAfter))
	return err
}

// DeadLetter settles a claimed job as dead at once.
func (q *Queue) DeadLetter(ctx context.Context, job *Job, reason string) error {
	_, err := q.Commit(ctx, new(Txn).DeadLetter(job, reason))
	return err
}

// release returns a claimed job to the queue without counting the attempt
// (see Txn.release).
func (q *Queue) release(ctx context.Context, job *Job) error {
	_, err := q.Commit(ctx, new(Txn).release(job))
	return err
}

// CancelJob cancels a job: a pending or scheduled job is removed; a claimed
// job gets a durable cancel request, seen by its worker: a Work handler's
// context is cancelled (cause ErrJobCancelled), and Job.CancelRequested
// is set on the job's record (GetJob) and on its next claim.
func (q *Queue) CancelJob(ctx context.Context, id string) (CancelOutcome, error) {
	res, err := q.Commit(ctx, new(Txn).CancelJob(id))
	if err != nil {
		return 0, err
	}
	return res.Cancelled[0], nil
}

// claimedRec returns the record of a job this process holds a claim on with
// the given token, or a *ClaimLostError.
//
// REQUIRES: inside an engine transaction.
func (l *local) claimedRec(tx *engine.Tx, id string, token uint64, reaping bool) (*jobRec, error) {
	v, err := l.claimedValue(tx, id, token, reaping)
	if err != nil {
		return nil, err
	}
	rec, err := decodeJob(v)
	if err != nil {
		return nil, err
	}
	if rec.State != stateClaimed {
		return nil, &ClaimLostError{JobID: id}
	}
	return rec, nil
}

// claimedValue is claimedRec returning the engine value of the job record,
// not yet decoded (nor its state checked).
//
// REQUIRES: inside an engine transaction.
func (l *local) claimedValue(tx *engine.Tx, id string, token uint64, reaping bool) ([]byte, error) {
	l.lmu.Lock()
	ls := l.leases[id]
	held := ls != nil && ls.token == token && token != 0
	// An expired lease is lost even before the reaper requeues the job: the
	// reaper may be about to, and another worker may claim it next.
	expired := held && l.expired(ls, l.now())
	l.lmu.Unlock()
	if !held || expired && !reaping {
		return nil, &ClaimLostError{JobID: id}
	}
	v, ok := tx.GetIn(jobSpace, id)
	if !ok {
		return nil, &ClaimLostError{JobID: id}
	}
	return v, nil
}

// ackDeleteTx applies the Ack op of a job whose queue keeps no done jobs
// (DoneRetention 0, the default), which deletes its record: it reads only
// what the index keeps of the record, not its headers and history. done
// false: the queue keeps done jobs (or op names another queue than the
// record's), and nothing was applied.
//
// REQUIRES: inside an engine transaction.
func (l *local) ackDeleteTx(tx *engine.Tx, op *txnOp, o *options) (done bool, err error) {
	cfg := o.config(op.Queue)
	if cfg.DoneRetention > 0 {
		return false, nil
	}
	v, err := l.claimedValue(tx, op.JobID, op.Token, false)
	if err != nil {
		return false, err
	}
	var r indexRec
	if err := decodeIndexRec(v, &r); err != nil {
		return false, err
	}
	if r.state != stateClaimed {
		return false, &ClaimLostError{JobID: op.JobID}
	}
	if string(r.queue) != op.Queue {
		return false, nil
	}
	if !r.inline {
		tx.DeleteIn(payloadSpace, op.JobID)
	}
	tx.DeleteIn(jobSpace, op.JobID)
	return true, nil
}

// settleTx applies Ack, Nack, DeadLetter or Release. The caller ends the
// claim (endLease, inside the transaction) and tells its watchers once the
// outcome is known.
//
// REQUIRES: inside an engine transaction.
func (l *local) settleTx(tx *engine.Tx, op *txnOp, o *options, now time.Time) error {
	if op.Kind == opAck {
		if done, err := l.ackDeleteTx(tx, op, o); done || err != nil {
			return err
		}
	}
	rec, err := l.claimedRec(tx, op.JobID, op.Token, false)
	if err != nil {
		return err
	}
	cfg := o.config(rec.Queue)
	switch op.Kind {
	case opAck:
		l.finishTx(tx, op.JobID, rec, cfg, now)
	case opNack:
		l.retryTx(tx, op.JobID, rec, cfg, op.Error, op.RunAt, now)
	case opDeadLetter:
		l.deadTx(tx, op.JobID, rec, op.Error, now)
	case opRelease:
		rec.State, rec.UpdatedAt = statePending, now.UnixNano()
		rec.Attempts = max(rec.Attempts, 1) - 1
		tx.PutIn(jobSpace, op.JobID, l.ix.jobValue(rec))
	}
	return nil
}

// finishTx records a job as done: deleted, or kept without its payload for
// the done retention.
func (l *local) finishTx(tx *engine.Tx, id string, rec *jobRec, cfg QueueConfig, now time.Time) {
	if rec.Payload == nil {
		tx.DeleteIn(payloadSpace, id)
	}
	if cfg.DoneRetention <= 0 {
		tx.DeleteIn(jobSpace, id)
		return
	}
	rec.State, rec.UpdatedAt, rec.CancelReq, rec.Payload = stateDone, now.UnixNano(), false, nil
	tx.PutIn(jobSpace, id, l.ix.jobValue(rec))
}

// retryTx makes a failed job pending again after its backoff (or at an
// explicit time), or dead when it has no attempts left.
func (l *local) retryTx(tx *engine.Tx, id string, rec *jobRec, cfg QueueConfig, reason string, at int64, now time.Time) {
	if rec.Attempts >= rec.MaxAttempts {
		l.deadTx(tx, id, rec, reason, now)
		return
	}
	rec.addHistory(now, reason)
	rec.State, rec.UpdatedAt = statePending, now.UnixNano()
	if at != 0 {
		rec.RunAt = resolveTime(at, now)
	} else {
		rec.RunAt = satAdd(now.UnixNano(), int64(backoff(cfg, rec.Attempts)))
	}
	tx.PutIn(jobSpace, id, l.ix.jobValue(rec))
}

func (l *local) deadTx(tx *engine.Tx, id string, rec *jobRec, reason string, now time.Time) {
	rec.addHistory(now, reason)
	rec.State, rec.UpdatedAt = stateDead, now.UnixNano()
	tx.PutIn(jobSpace, id, l.ix.jobValue(rec))
	if rec.DeadNotify != "" {
		l.deadNoticeTx(tx, id, rec, reason, now)
	}
}

// Headers of a dead-letter notice (see EnqueueOptions.DeadLetterQueue).
const (
	HeaderDeadJob    = "queue.dead_job"
	HeaderDeadReason = "queue.dead_reason"
)

// deadNoticeTx enqueues the notice of job id's death to rec.DeadNotify.
//
// REQUIRES: inside an engine transaction.
func (l *local) deadNoticeTx(tx *engine.Tx, id string, rec *jobRec, reason string, now time.Time) {
	reason = errtext.Truncate(reason, errtext.HeaderMax)
	h := make(map[string]string, len(rec.Headers)+2)
	maps.Copy(h, rec.Headers)
	h[HeaderDeadJob], h[HeaderDeadReason] = id, reason
	nid := ulid.Make().String()
	notice := &jobRec{jobCore: jobCore{
		Queue: rec.DeadNotify, State: statePending, Order: l.ix.maxOrder + 1, RunAt: now.UnixNano(),
		MaxAttempts: l.opts.config(rec.DeadNotify).MaxAttempts, Headers: h,
		EnqueuedAt: now.UnixNano(), UpdatedAt: now.UnixNano(), Size: int64(len(id)),
	}, Payload: []byte(id)}
	tx.PutIn(jobSpace, nid, l.ix.jobValue(notice))
}

// backoff returns the delay before retry number attempts (1-based):
// base * 2^(attempts-1), capped, with jitter in [d/2, d].
func backoff(cfg QueueConfig, attempts uint32) time.Duration {
	d := cfg.BackoffBase
	for i := uint32(1); i < attempts && d < cfg.BackoffMax; i++ {
		if d > cfg.BackoffMax/2 {
			d = cfg.BackoffMax // doubling would pass it (or wrap around)
			break
		}
		d *= 2
	}
	d = min(d, cfg.BackoffMax)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// cancelTx cancels one job; the returned function (if any) tells the claim
// holder.
func (l *local) cancelTx(tx *engine.Tx, id string, now time.Time) (CancelOutcome, func()) {
	v, ok := tx.GetIn(jobSpace, id)
	if !ok {
		return CancelNotFound, nil
	}
	rec, err := decodeJob(v)
	if err != nil {
		return CancelNotFound, nil
	}
	switch rec.State {
	case statePending:
		tx.DeleteIn(jobSpace, id)
		if rec.Payload == nil {
			tx.DeleteIn(payloadSpace, id)
		}
		return CancelRemoved, nil
	case stateClaimed:
		if !rec.CancelReq {
			rec.CancelReq, rec.UpdatedAt = true, now.UnixNano()
			tx.PutIn(jobSpace, id, l.ix.jobValue(rec))
		}
		return CancelRequested, func() { l.signalCancel(id) }
	}
	return CancelFinished, nil
}
