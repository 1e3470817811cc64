package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stepwell/stepwell/internal/engine"
)

// commit applies a transaction on the local engine.
func (l *local) commit(ctx context.Context, ops []txnOp, o options) (TxnResult, error) {
	// Encode values first; large ones are uploaded to their own objects
	// before the transaction that refers to them.
	encs := make([][]byte, len(ops))
	ids := make([]string, len(ops))
	var staged [][]byte
	discard := func(refs [][]byte) {
		for _, ref := range refs {
			l.eng.DiscardBlob(context.WithoutCancel(ctx), ref)
		}
	}
	for i := range ops {
		op := &ops[i]
		switch op.Kind {
		case opPut, opCompareAndPut, opEnqueue:
		default:
			continue
		}
		if op.Kind == opEnqueue {
			ids[i] = op.JobID
			if ids[i] == "" {
				ids[i] = ulid.Make().String()
			}
		}
		if op.Kind == opEnqueue && l.inlinePayload(op.Value) {
			continue // goes into the job record (see enqueueTx)
		}
		if len(op.Value) > l.opts.largeValue {
			ref, err := l.eng.PutBlob(ctx, op.Value)
			if err != nil {
				discard(staged)
				return TxnResult{}, err
			}
			staged = append(staged, ref)
			encs[i] = ref
		} else {
			encs[i] = engine.Inline(op.Value)
		}
	}
	// Dispatched enqueues take an idle Work slot now, before the commit, so
	// that the claim granted in the transaction has somewhere to run.
	var slotFor map[int]*slots // op index -> slot taken for it
	now := l.now()
	for i := range ops {
		// A job not due at commit time cannot be granted: take no slot.
		if ops[i].Kind == opEnqueue && ops[i].Dispatch && resolveTime(ops[i].RunAt, now) <= now.UnixNano() {
			if s := l.takeSlot(ops[i].Queue); s != nil {
				if slotFor == nil {
					slotFor = map[int]*slots{}
				}
				slotFor[i] = s
			}
		}
	}
	var res TxnResult
	var unused [][]byte  // staged payloads of dedup hits
	var after []func()   // run once the transaction is applied
	var signals []func() // tell the watchers of settled claims, once the outcome is known
	wait, err := l.eng.Apply(ctx, func(tx *engine.Tx) error {
		res, unused, after, signals = TxnResult{}, nil, nil, nil
		for i := range ops {
			op := &ops[i]
			var err error
			switch op.Kind {
			case opPut:
				tx.Put(kvSpace+string(op.Key), encs[i])
			case opDelete:
				tx.Delete(kvSpace + string(op.Key))
			case opCompareAndPut:
				key := kvSpace + string(op.Key)
				cur, ok := tx.Get(key)
				if op.Absent && ok || !op.Absent && (!ok || !valueMatches(cur, op.Expect)) {
					return &ConditionFailedError{Key: op.Key}
				}
				tx.Put(key, encs[i])
			case opCompareAndDelete:
				key := kvSpace + string(op.Key)
				cur, ok := tx.Get(key)
				if !ok || !valueMatches(cur, op.Expect) {
					return &ConditionFailedError{Key: op.Key}
				}
				tx.Delete(key)
			case opEnqueue:
				if op.JobID != "" {
					if _, exists := tx.Get(jobSpace + op.JobID); exists {
						return fmt.Errorf("%w: %s", ErrJobExists, op.JobID)
					}
				}
				r := l.enqueueTx(tx, op, ids[i], encs[i], o, now, slotFor[i] != nil)
				if r.Duplicate && len(op.Value) > l.opts.largeValue {
					unused = append(unused, encs[i])
				}
				if j := r.Claimed; j != nil {
					j.Payload = op.Value
					after = append(after, func() { l.grantLeases([]*Job{j}, o.config(j.Queue), now, o.member) })
				}
				res.Enqueued = append(res.Enqueued, r)
			case opAck, opNack, opDeadLetter, opRelease:
				var f func() func()
				f, err = l.settleTx(tx, op, o, now)
				after = append(after, func() { signals = append(signals, f()) })
			case opRequireJob:
				v, ok := tx.Get(jobSpace + op.JobID)
				var st State
				if ok {
					rec, err := decodeJob(v)
					if err != nil {
						return err
					}
					st = rec.toJob(op.JobID, now).State
				}
				if !ok || op.States&(1<<st) == 0 {
					return &ConditionFailedError{Key: []byte(jobSpace + op.JobID)}
				}
			case opCancelJob:
				var c CancelOutcome
				var f func()
				c, f = l.cancelTx(tx, op.JobID, now)
				res.Cancelled = append(res.Cancelled, c)
				if f != nil {
					after = append(after, f)
				}
			case opRequeueDead:
				err = requeueDeadTx(tx, op.JobID, now)
			default:
				err = errors.New("queue: unknown transaction operation")
			}
			if err != nil {
				return err
			}
		}
		// Claims are released (and granted) while the engine's lock is
		// still held, so the reaper cannot also act on them.
		for _, f := range after {
			f()
		}
		return nil
	})
	if err != nil {
		var cfe *ConditionFailedError
		var cle *ClaimLostError
		if errors.As(err, &cfe) || errors.As(err, &cle) || errors.Is(err, ErrJobExists) {
			discard(staged) // nothing refers to the staged blobs
		}
		for _, s := range slotFor {
			s.put()
		}
		return TxnResult{}, err
	}
	if err := wait(ctx); err != nil {
		if errors.Is(err, engine.ErrOutcomeUnknown) {
			// The caller stops waiting; what follows the commit still
			// has to happen once the outcome is known.
			go func() { l.committed(ops, slotFor, res, unused, signals, wait(context.Background()), o, true) }()
		} else {
			l.committed(ops, slotFor, res, unused, signals, err, o, false)
		}
		return TxnResult{}, err
	}
	l.committed(ops, slotFor, res, unused, signals, nil, o, false)
	return res, nil
}

// committed does what follows a transaction's outcome (err == nil:
// durable): it tells the watchers of the claims it settled, starts the
// leases of the jobs it claimed and the dispatched jobs in the slots taken
// for them, or gives the slots back. abandoned says the caller stopped
// waiting (ErrOutcomeUnknown) and will not see the result: the jobs
// claimed for it (EnqueueOptions.Claim) are then released, their attempt
// not counted.
func (l *local) committed(ops []txnOp, slotFor map[int]*slots, res TxnResult, unused [][]byte, signals []func(), err error, o options, abandoned bool) {
	for _, signal := range signals {
		signal()
	}
	if err != nil {
		for _, s := range slotFor {
			s.put()
		}
		return
	}
	for _, ref := range unused {
		l.eng.DiscardBlob(context.Background(), ref)
	}
	var claimed []*Job
	for _, r := range res.Enqueued {
		if r.Claimed != nil {
			claimed = append(claimed, r.Claimed)
		}
	}
	l.startLeases(claimed, o)
	if slotFor != nil {
		startDispatched(ops, slotFor, res.Enqueued)
	}
	if abandoned {
		var unrun []*Job
		for _, r := range res.Enqueued {
			if r.Claimed != nil { // not dispatched (startDispatched cleared those)
				unrun = append(unrun, r.Claimed)
			}
		}
		if len(unrun) > 0 {
			l.releaseUnrun(unrun, o)
		}
	}
}

// startDispatched starts each dispatched job that the transaction claimed
// in the slot taken for it, and gives back the slots of the others (not
// granted: those jobs wait in the queue). enqueued holds one result per
// enqueue of ops, in order.
func startDispatched(ops []txnOp, slotFor map[int]*slots, enqueued []EnqueueResult) {
	k := 0 // index in enqueued of the next enqueue
	for i := range ops {
		if ops[i].Kind != opEnqueue {
			continue
		}
		r := &enqueued[k]
		k++
		s := slotFor[i]
		switch {
		case s == nil:
		case r.Claimed == nil:
			s.put()
		default:
			j := r.Claimed
			r.Claimed, r.Dispatched = nil, true
			s.start(j)
		}
	}
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
// into unix ns.
func resolveTime(t int64, now time.Time) int64 {
	switch {
	case t < 0:
		return now.Add(time.Duration(-t)).UnixNano()
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
func (l *local) enqueueTx(tx *engine.Tx, op *txnOp, id string, payload []byte, o options, now time.Time, dispatch bool) EnqueueResult {
	if op.DedupKey != "" {
		if holders := l.ix.dedup[dedupKey(op.Queue, op.DedupKey)]; len(holders) > 0 {
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
	if claim {
		rec.State, rec.Attempts, rec.Claim = stateClaimed, 1, l.nextToken.Add(1)
	}
	if payload != nil {
		tx.Put(payloadSpace+id, payload)
	}
	tx.Put(jobSpace+id, encodeJob(rec)) // the index sees it here
	res := EnqueueResult{JobID: id}
	if claim {
		res.Claimed = rec.toJob(id, now)
		res.Claimed.token = rec.Claim
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

// claimedRec returns the record of a job this process holds a claim on with
// the given token, or a *ClaimLostError.
//
// REQUIRES: inside an engine transaction.
func (l *local) claimedRec(tx *engine.Tx, id string, token uint64, reaping bool) (*jobRec, error) {
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
	v, ok := tx.Get(jobSpace + id)
	if !ok {
		return nil, &ClaimLostError{JobID: id}
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

// settleTx applies Ack, Nack, DeadLetter or Release and returns the
// function that ends the claim (run inside the transaction), which returns
// the one that tells its watchers (run once the outcome is known).
//
// REQUIRES: inside an engine transaction.
func (l *local) settleTx(tx *engine.Tx, op *txnOp, o options, now time.Time) (func() func(), error) {
	rec, err := l.claimedRec(tx, op.JobID, op.Token, false)
	if err != nil {
		return nil, err
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
		tx.Put(jobSpace+op.JobID, encodeJob(rec))
	}
	return func() func() { return l.unlease(op.JobID, op.Token, nil) }, nil
}

// finishTx records a job as done: deleted, or kept without its payload for
// the done retention.
func (l *local) finishTx(tx *engine.Tx, id string, rec *jobRec, cfg QueueConfig, now time.Time) {
	if rec.Payload == nil {
		tx.Delete(payloadSpace + id)
	}
	if cfg.DoneRetention <= 0 {
		tx.Delete(jobSpace + id)
		return
	}
	rec.State, rec.UpdatedAt, rec.CancelReq, rec.Payload = stateDone, now.UnixNano(), false, nil
	tx.Put(jobSpace+id, encodeJob(rec))
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
		rec.RunAt = now.Add(backoff(cfg, rec.Attempts)).UnixNano()
	}
	tx.Put(jobSpace+id, encodeJob(rec))
}

func (l *local) deadTx(tx *engine.Tx, id string, rec *jobRec, reason string, now time.Time) {
	rec.addHistory(now, reason)
	rec.State, rec.UpdatedAt = stateDead, now.UnixNano()
	tx.Put(jobSpace+id, encodeJob(rec))
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
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	h := make(map[string]string, len(rec.Headers)+2)
	maps.Copy(h, rec.Headers)
	h[HeaderDeadJob], h[HeaderDeadReason] = id, reason
	nid := ulid.Make().String()
	notice := &jobRec{jobCore: jobCore{
		Queue: rec.DeadNotify, State: statePending, Order: l.ix.maxOrder + 1, RunAt: now.UnixNano(),
		MaxAttempts: l.opts.config(rec.DeadNotify).MaxAttempts, Headers: h,
		EnqueuedAt: now.UnixNano(), UpdatedAt: now.UnixNano(), Size: int64(len(id)),
	}, Payload: []byte(id)}
	tx.Put(jobSpace+nid, encodeJob(notice))
}

// backoff returns the delay before retry number attempts (1-based):
// base * 2^(attempts-1), capped, with jitter in [d/2, d].
func backoff(cfg QueueConfig, attempts uint32) time.Duration {
	d := cfg.BackoffBase
	for i := uint32(1); i < attempts && d < cfg.BackoffMax; i++ {
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
	v, ok := tx.Get(jobSpace + id)
	if !ok {
		return CancelNotFound, nil
	}
	rec, err := decodeJob(v)
	if err != nil {
		return CancelNotFound, nil
	}
	switch rec.State {
	case statePending:
		tx.Delete(jobSpace + id)
		if rec.Payload == nil {
			tx.Delete(payloadSpace + id)
		}
		return CancelRemoved, nil
	case stateClaimed:
		if !rec.CancelReq {
			rec.CancelReq, rec.UpdatedAt = true, now.UnixNano()
			tx.Put(jobSpace+id, encodeJob(rec))
		}
		return CancelRequested, func() { l.signalCancel(id) }
	}
	return CancelFinished, nil
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
