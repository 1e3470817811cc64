package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
)

// Enqueue adds one job to the named queue and returns once it is durable.
// With a DedupKey that matches a pending or scheduled job of the queue, it
// returns that job's ID with Duplicate set and writes nothing.
func (q *Queue) Enqueue(ctx context.Context, queue string, payload []byte, opts EnqueueOptions) (EnqueueResult, error) {
	res, err := q.Commit(ctx, new(Txn).Enqueue(queue, payload, opts))
	if err != nil {
		return EnqueueResult{}, err
	}
	return res.Enqueued[0], nil
}

// EnqueueRequest is one job of an EnqueueBatch.
type EnqueueRequest struct {
	Queue   string
	Payload []byte
	Options EnqueueOptions
}

// EnqueueBatch adds jobs atomically: all become durable together, or none.
func (q *Queue) EnqueueBatch(ctx context.Context, reqs []EnqueueRequest) ([]EnqueueResult, error) {
	t := new(Txn)
	for _, r := range reqs {
		t.Enqueue(r.Queue, r.Payload, r.Options)
	}
	res, err := q.Commit(ctx, t)
	return res.Enqueued, err
}

func checkEnqueue(op *txnOp) error {
	if op.Queue == "" {
		return ErrEmptyQueueName
	}
	if op.JobID != "" && !validJobID(op.JobID) {
		return fmt.Errorf("%w: %q", ErrInvalidJobID, op.JobID)
	}
	if len(op.Queue) > MaxKeySize {
		return &TooLargeError{What: "queue name", Size: len(op.Queue), Max: MaxKeySize}
	}
	if len(op.DedupKey) > MaxKeySize {
		return &TooLargeError{What: "dedup key", Size: len(op.DedupKey), Max: MaxKeySize}
	}
	n := 0
	for k, v := range op.Headers {
		n += len(k) + len(v)
	}
	if n > MaxHeaderBytes {
		return &TooLargeError{What: "headers", Size: n, Max: MaxHeaderBytes}
	}
	return nil
}

// resolveTime turns an op time (unix ns; negative: a delay from now; 0: now)
// into unix ns; a delay that reaches past 2262-04-11 ends then (satAdd).
func resolveTime(t int64, now time.Time) int64 {
	switch {
	case t < 0:
		return satAdd(now.UnixNano(), -t)
	case t == 0:
		return now.UnixNano()
	}
	return t
}

// inlinePayload reports whether an enqueued payload is kept in its job
// record (jobRec.Payload) rather than under p/<id>.
func (l *local) inlinePayload(p []byte) bool {
	return len(p) <= inlinePayloadMax && len(p) <= l.opts.largeValue
}

// enqueueTx adds one job, or reports the pending job holding its dedup key.
// payload is the engine value to store under p/<id>, or nil to keep
// op.Value in the job record (see inlinePayload).
//
// REQUIRES: inside an engine transaction.
//
// With dispatch, the job is claimed only if nothing else in its queue is
// ready (op.Claim's rule is weaker: nothing of higher priority).
//
// A claim also needs the queue's limit (if any) to admit it: it takes a
// token, recorded in taken.
func (l *local) enqueueTx(tx *engine.Tx, op *txnOp, id string, payload []byte, o options, now time.Time, dispatch bool, taken *limitTaken) EnqueueResult {
	if op.DedupKey != "" {
		if holders := l.ix.dedupHolders(op.Queue, op.DedupKey); len(holders) > 0 {
			return EnqueueResult{JobID: holders[0], Duplicate: true}
		}
	}
	cfg := o.config(op.Queue)
	maxAttempts := op.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = cfg.MaxAttempts
	}
	rec := &jobRec{jobCore: jobCore{
		Queue: op.Queue, State: statePending, Priority: op.Priority,
		Order: l.ix.maxOrder + 1, RunAt: resolveTime(op.RunAt, now),
		MaxAttempts: maxAttempts, Headers: op.Headers, DedupKey: op.DedupKey,
		EnqueuedAt: now.UnixNano(), UpdatedAt: now.UnixNano(), Size: int64(len(op.Value)),
		DeadNotify: op.DeadNotify,
	}}
	if payload == nil {
		rec.Payload = op.Value
		if rec.Payload == nil {
			rec.Payload = []byte{}
		}
	}
	due := rec.RunAt <= now.UnixNano()
	claim := due && (op.Claim && !l.readyAbove(op.Queue, op.Priority, now, false) ||
		dispatch && !l.readyAbove(op.Queue, 0, now, true))
	if claim && l.ix.limited > 0 {
		claim = admitLimited(l.ix.queue(op.Queue), now.UnixNano(), taken)
	}
	if claim {
		rec.State, rec.Attempts, rec.Claim = stateClaimed, 1, l.nextToken.Add(1)
	}
	if payload != nil {
		tx.PutIn(payloadSpace, id, payload)
	}
	tx.PutIn(jobSpace, id, l.ix.jobValue(rec)) // the index sees it here
	res := EnqueueResult{JobID: id}
	if claim {
		res.claimed = rec.toJob(id, now)
		res.claimed.token = rec.Claim
	}
	return res
}

// readyAbove reports whether a job of priority above prio (with anyJob: any
// job) is claimable in the queue.
//
// REQUIRES: inside an engine transaction.
func (l *local) readyAbove(queue string, prio int32, now time.Time, anyJob bool) bool {
	qi := l.ix.queues[queue]
	if qi == nil {
		return false
	}
	qi.promote(now.UnixNano())
	it, ok := qi.ready.Min()
	return ok && (anyJob || it.prio > prio)
}

// validJobID reports whether id is 1-64 bytes of [0-9A-Za-z_-].
func validJobID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
