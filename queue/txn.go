package queue

import (
	"context"
	"sync"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/queuex"
)

// Txn is a set of changes committed atomically by Queue.Commit: all of them
// become durable together, or none does. It can mix key-value writes,
// enqueues, the settlement of claimed jobs and job cancellations. Build one
// with new(Txn) and its chaining methods. A Txn holds references to the
// byte slices passed to it until Commit returns.
type Txn struct {
	ops []txnOp
}

// Transaction operation kinds. Part of the wire form of a transaction.
const (
	opPut uint8 = iota + 1
	opDelete
	opCompareAndPut
	opEnqueue
	opAck
	opNack
	opDeadLetter
	opCancelJob
	opRequireJob
	opCompareAndDelete
	opRelease
	opRequeueDead
	opSetLimit // Queue; Value: the encoded Limit, empty to remove it (limit.go)
)

// txnOp is the serializable form of one transaction operation: a remote
// writer receives exactly these values.
type txnOp struct {
	// Ordered for size (192 bytes; a settlement's four fill one 768-byte
	// allocation): the small fields first.
	Kind        uint8
	Absent      bool // CompareAndPut: the key must be absent
	Claim       bool // Enqueue: claim it for the enqueuer (queuex.API.WithClaim)
	Dispatch    bool // Enqueue: start it in a Work slot (queuex.API.WithDispatch)
	Priority    int32
	MaxAttempts uint32
	States      uint32 // requireJobStates: bit 1<<State for each allowed state
	Token       uint64 // settlement: the claim token
	RunAt       int64  // Enqueue: unix ns, 0 = now; Nack: explicit retry time, 0 = backoff
	Key         []byte
	Value       []byte // Put, CompareAndPut: new value; Enqueue: payload
	Expect      []byte
	Queue       string
	JobID       string
	Headers     map[string]string
	DedupKey    string
	Error       string // Nack, DeadLetter: reason recorded in the history
	DeadNotify  string // Enqueue: EnqueueOptions.DeadLetterQueue
}

// txnPool holds emptied transactions of the runtime's (queuex.API.TakeTxn),
// their operations' arrays kept: a step's settlement takes one, and gives
// it back once committed.
var txnPool = sync.Pool{New: func() any { return &Txn{ops: make([]txnOp, 0, 8)} }}

func takeTxn() *Txn { return txnPool.Get().(*Txn) }

func recycleTxn(t *Txn) {
	if c := cap(t.ops); c < 8 || c > 64 {
		*t = Txn{} // kept: arrays with room for 8, not a rare huge one's
		return
	}
	clear(t.ops) // drop what they refer to
	t.ops = t.ops[:0]
	txnPool.Put(t)
}

// add appends op. The first one allocates room for four: a settlement
// (Ack, Enqueue, the run record, its history entry) in one allocation.
func (t *Txn) add(op txnOp) {
	if t.ops == nil {
		t.ops = make([]txnOp, 0, 4)
	}
	t.ops = append(t.ops, op)
}

// Put sets key to value.
func (t *Txn) Put(key, value []byte) *Txn {
	t.add(txnOp{Kind: opPut, Key: key, Value: value})
	return t
}

// Delete removes key (a missing key is not an error).
func (t *Txn) Delete(key []byte) *Txn {
	t.add(txnOp{Kind: opDelete, Key: key})
	return t
}

// CompareAndPut sets key to value if its current value equals old (old ==
// nil: the key must be absent). If the condition fails, Commit returns a
// *ConditionFailedError and the whole transaction changes nothing.
func (t *Txn) CompareAndPut(key, old, value []byte) *Txn {
	t.add(txnOp{Kind: opCompareAndPut, Key: key, Value: value, Expect: old, Absent: old == nil})
	return t
}

// CompareAndDelete removes key if its current value equals old. If it does
// not (or the key is absent), Commit returns a *ConditionFailedError and the
// whole transaction changes nothing.
func (t *Txn) CompareAndDelete(key, old []byte) *Txn {
	t.add(txnOp{Kind: opCompareAndDelete, Key: key, Expect: old})
	return t
}

// EnqueueOptions describe a job to enqueue.
type EnqueueOptions struct {
	// Headers are small string metadata carried with the job.
	Headers map[string]string
	// Priority: higher is claimed first; FIFO within a priority. Default 0.
	Priority int32
	// RunAt makes the job claimable no earlier than this time. Zero, or a
	// time that has passed (one before 1970 included): now. A job's times
	// are recorded in nanoseconds since 1970, which end on 2262-04-11: a
	// later RunAt is taken as that.
	RunAt time.Time
	// Delay is an alternative to RunAt: claimable after now + Delay (on
	// 2262-04-11 at the latest, as RunAt).
	Delay time.Duration
	// MaxAttempts overrides the queue's attempt limit for this job.
	MaxAttempts uint32
	// DedupKey, when set, makes the enqueue a no-op returning the existing
	// job's ID while a job with the same key is pending or scheduled in the
	// same queue.
	DedupKey string
	// DeadLetterQueue, when set, names a queue that receives a notice job
	// whenever this job is dead-lettered, in the same transaction: by
	// DeadLetter, by a Nack on its last attempt, or by the queue itself (a
	// lease that expired on the last attempt, a claim whose process died
	// on its last attempt). The notice's payload is the dead job's ID; its
	// headers are the dead job's plus HeaderDeadJob and HeaderDeadReason.
	// It lets an owner of the job react durably to its death.
	DeadLetterQueue string
	// JobID sets the new job's ID instead of a generated ULID, so that a
	// transaction can refer to the job (say, in a record it writes). At most
	// 64 bytes of [0-9A-Za-z_-]. If a job with that ID exists, Commit fails
	// with ErrJobExists and changes nothing.
	JobID string
	// claim and dispatch are the runtime's plumbing (internal/queuex:
	// WithClaim, WithDispatch): claim the new job for this process in the
	// same transaction, or start it in an idle Work slot of this process.
	claim, dispatch bool
}

// Enqueue adds a job to the named queue. Its result (the job ID, or the
// existing job on a dedup hit) is in TxnResult.Enqueued, in order.
func (t *Txn) Enqueue(queue string, payload []byte, opts EnqueueOptions) *Txn {
	op := txnOp{Kind: opEnqueue, Queue: queue, Value: payload, Priority: opts.Priority,
		MaxAttempts: opts.MaxAttempts, Headers: opts.Headers, DedupKey: opts.DedupKey, JobID: opts.JobID,
		DeadNotify: opts.DeadLetterQueue, Claim: opts.claim, Dispatch: opts.dispatch && !opts.claim}
	op.RunAt = format.UnixNano(opts.RunAt) // zero, or before 1970: now (0)
	if opts.Delay > 0 {
		op.RunAt = -int64(opts.Delay) // resolved against the writer's clock
	}
	t.add(op)
	return t
}

// Ack settles a claimed job as done. Fails with a *ClaimLostError if the
// claim was lost (lease expired, job cancelled and settled elsewhere).
func (t *Txn) Ack(job *Job) *Txn {
	t.add(txnOp{Kind: opAck, JobID: job.ID, Token: job.token, Queue: job.Queue})
	return t
}

// Nack settles a claimed job as failed: it is retried after retryAfter (0:
// the queue's exponential backoff), or dead-lettered if this was its last
// attempt. cause is recorded in the job's history.
func (t *Txn) Nack(job *Job, cause error, retryAfter time.Duration) *Txn {
	op := txnOp{Kind: opNack, JobID: job.ID, Token: job.token, Queue: job.Queue, Error: errText(cause)}
	if retryAfter > 0 {
		op.RunAt = -int64(retryAfter)
	}
	t.add(op)
	return t
}

// DeadLetter settles a claimed job as dead at once, with reason.
func (t *Txn) DeadLetter(job *Job, reason string) *Txn {
	t.add(txnOp{Kind: opDeadLetter, JobID: job.ID, Token: job.token, Queue: job.Queue, Error: reason})
	return t
}

// release returns a claimed job to the queue without counting the attempt:
// it is pending again, its attempt count lowered by one (back to what it was
// before the claim) and no entry added to its history. It keeps its RunAt,
// which had passed when it was claimed, so it is claimable at once, and its
// FIFO position within its priority (ahead of the jobs enqueued after it). A
// cancel request made while it was claimed stays: the next claim sees it at
// once. Use it for a job claimed but never started (say, one handed to a
// worker that is stopping). Fails with a *ClaimLostError if the claim was
// lost (lease expired, or the job already settled or released). The
// runtime's, through Queue.release (queuex.API.Release).
func (t *Txn) release(job *Job) *Txn {
	t.add(txnOp{Kind: opRelease, JobID: job.ID, Token: job.token, Queue: job.Queue})
	return t
}

// CancelJob cancels a job: a pending or scheduled job is removed; a claimed
// job gets a durable cancel request that its worker observes. The outcome is
// in TxnResult.Cancelled, in order.
func (t *Txn) CancelJob(id string) *Txn {
	t.add(txnOp{Kind: opCancelJob, JobID: id})
	return t
}

// requireJobStates makes the transaction fail with a *ConditionFailedError
// (changing nothing) unless the job exists and is in one of the states in.
// It lets a transaction act on what it read of a job, such as removing a
// pending step, without racing a claim. The runtime's
// (queuex.API.RequireJobState).
func (t *Txn) requireJobStates(id string, in queuex.States) *Txn {
	t.add(txnOp{Kind: opRequireJob, JobID: id, States: uint32(in)})
	return t
}

// RequeueDead makes a dead job pending again with a fresh attempt budget
// (its history is kept), as Queue.RequeueDead does, in the transaction. If
// the job does not exist or is not dead, Commit fails (ErrJobNotFound,
// ErrNotDead) and the whole transaction changes nothing. The workflow
// runtime retries a failed run this way: its dead step is requeued in the
// transaction that makes the run active again.
func (t *Txn) RequeueDead(id string) *Txn {
	t.add(txnOp{Kind: opRequeueDead, JobID: id})
	return t
}

// Len returns the number of operations.
func (t *Txn) Len() int { return len(t.ops) }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// EnqueueResult is the outcome of one enqueue.
type EnqueueResult struct {
	JobID string
	// Duplicate is true when the dedup key matched a pending or scheduled
	// job: JobID is that job and nothing was written.
	Duplicate bool
	// claimed is the new job, claimed by this process, when the claim
	// flag was set and the claim was granted (queuex.API.Claimed); its
	// Payload shares the slice passed to Enqueue. dispatched: the dispatch
	// flag was set and the job was claimed for, and started in, an idle
	// Work slot of this process (queuex.API.Dispatched).
	claimed    *Job
	dispatched bool
}

// CancelOutcome says what CancelJob did.
type CancelOutcome uint8

// Cancel outcomes.
const (
	CancelNotFound  CancelOutcome = iota + 1 // no such job
	CancelRemoved                            // was pending or scheduled: removed
	CancelRequested                          // was claimed: its worker is told
	CancelFinished                           // already done or dead: unchanged
)

func (c CancelOutcome) String() string {
	switch c {
	case CancelNotFound:
		return "not-found"
	case CancelRemoved:
		return "removed"
	case CancelRequested:
		return "requested"
	case CancelFinished:
		return "finished"
	}
	return "unknown"
}

// TxnResult reports the outcome of a transaction's operations.
type TxnResult struct {
	Enqueued  []EnqueueResult
	Cancelled []CancelOutcome
}

// Commit applies t atomically and returns once it is durable. Validation
// errors (empty or oversized keys, oversized values, a lost claim, a failed
// compare-and-put) are returned before anything is written.
func (q *Queue) Commit(ctx context.Context, t *Txn) (TxnResult, error) {
	if err := q.checkOpen(); err != nil {
		return TxnResult{}, err
	}
	if len(t.ops) == 0 {
		return TxnResult{}, nil
	}
	inline := 0
	for i := range t.ops {
		op := &t.ops[i]
		switch op.Kind {
		case opPut, opDelete, opCompareAndPut, opCompareAndDelete:
			if err := checkKey(op.Key); err != nil {
				return TxnResult{}, err
			}
			inline += len(op.Key)
		case opEnqueue:
			if err := checkEnqueue(op); err != nil {
				return TxnResult{}, err
			}
		}
		if op.Kind == opPut || op.Kind == opCompareAndPut || op.Kind == opEnqueue {
			if len(op.Value) > q.opts.maxValue {
				return TxnResult{}, &TooLargeError{What: "value", Size: len(op.Value), Max: q.opts.maxValue}
			}
			if len(op.Value) <= q.opts.largeValue {
				inline += len(op.Value)
			}
		}
	}
	if inline > MaxTxnInlineBytes {
		return TxnResult{}, &TooLargeError{What: "transaction", Size: inline, Max: MaxTxnInlineBytes}
	}
	res, err := q.be.commit(ctx, t.ops, q.opts)
	return res, mapErr(err)
}
