package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/handoff"
)

// commit applies a transaction on the local engine, in four stages: stage
// its values (stageValues), take Work slots for dispatched enqueues
// (slotTable.takeSlots), apply its operations in one engine transaction
// (applyOps), and once the outcome is known, do what follows it
// (committed).
//
// A settlement of the job that the caller's Work slot runs also claims the
// slot's next job, in the same engine transaction (see refillFor and
// refillApply), and hands it to the slot: the slot's next job costs no
// claim transaction, WAL write or hand-off of its own.
func (l *local) commit(ctx context.Context, ops []txnOp, o options) (TxnResult, error) {
	var rf *claimState
	if w := refillFor(ctx, ops); w != nil {
		rf = &claimState{o: o, queue: w.Queue, prefetch: w.Prefetch}
	}
	c, wait, err := l.apply(ctx, ops, o, rf)
	if err != nil {
		return TxnResult{}, err
	}
	res, err := l.await(ctx, c, wait)
	if rf != nil {
		l.refill(ctx, rf, wait)
	}
	return res, err
}

// commitAll commits independent transactions, as many calls of commit at
// once would, but from one goroutine: it applies them all, then waits for
// their outcomes (which come with the same WAL writes). A cluster writer
// commits each call of a member this way. A claim in wants that depends
// on a transaction (IfTxn: a settlement's refill) is applied in it, and
// sees what the transactions before it enqueued; the others are applied
// after the transactions (they see the jobs those enqueued), before it
// waits: they usually share its WAL write.
func (l *local) commitAll(ctx context.Context, txns [][]txnOp, o options, wants []claimWant) ([]TxnResult, []error, []claimOutcome) {
	res, errs := make([]TxnResult, len(txns)), make([]error, len(txns))
	cs, waits := make([]*commitState, len(txns)), make([]func(context.Context) error, len(txns))
	// The transactions and claims go into one WAL write (see
	// engine.Hold), unless one uploads a blob first: the hold ends there.
	release := l.eng.Hold()
	defer func() { release() }()
	claims := make([]claimOutcome, len(wants))
	states := make([]*claimState, len(wants))
	var used int64 // payload bytes the call's claims took
	// A claim that depends on a transaction (a settlement's refill) is
	// applied in it: one engine transaction, as in one process.
	refills := make([]*claimState, len(txns))
	for i, w := range wants {
		if w.N < 1 || w.Queue == "" {
			claims[i].err = invalid("claim of %d jobs of queue %q", w.N, w.Queue)
			continue
		}
		if w.IfTxn > 0 && w.IfTxn <= len(txns) && refills[w.IfTxn-1] == nil {
			states[i] = &claimState{o: o, queue: w.Queue, n: w.N, used: &used, prefetch: w.Prefetch}
			refills[w.IfTxn-1] = states[i]
		}
	}
	for i, ops := range txns {
		if l.stagesBlob(ops) {
			release()
		}
		cs[i], waits[i], errs[i] = l.apply(ctx, ops, o, refills[i])
		if rf := refills[i]; rf != nil {
			rf.wait = waits[i]
		}
	}
	for i, w := range wants {
		if states[i] != nil || claims[i].err != nil {
			continue
		}
		if w.IfTxn > 0 {
			continue // a refill of no transaction of the call, or a second for one: no claim, no jobs
		}
		states[i], claims[i].err = l.claimApply(handoff.WithPrefetch(ctx, w.Prefetch), w.Queue, w.N, o, nil, &used)
	}
	release()
	for i, c := range cs {
		if errs[i] == nil {
			res[i], errs[i] = l.await(ctx, c, waits[i])
		}
	}
	for i, c := range states {
		if c != nil && c.wait != nil && claims[i].err == nil {
			claims[i].jobs, claims[i].err = l.claimAwait(ctx, c)
		}
	}
	return res, errs, claims
}

// stagesBlob reports whether committing ops uploads a value as a blob
// first (see stageValues).
func (l *local) stagesBlob(ops []txnOp) bool {
	for i := range ops {
		switch op := &ops[i]; op.Kind {
		case opPut, opCompareAndPut, opEnqueue:
			if len(op.Value) > l.opts.largeValue { // an inline payload is smaller
				return true
			}
		}
	}
	return false
}

// claimOutcome is the outcome of one claim of commitAll.
type claimOutcome struct {
	jobs []*Job
	err  error
}

// apply runs commit's first three stages: the transaction is applied and
// on its way to a WAL write, or failed and changed nothing. With rf, the
// transaction also claims a job for the caller's slot into rf (see
// refillApply).
func (l *local) apply(ctx context.Context, ops []txnOp, o options, rf *claimState) (*commitState, func(context.Context) error, error) {
	c := commitStates.Get().(*commitState)
	c.ops, c.o, c.now = ops, o, l.now()
	c.sizeResults()
	if err := l.stageValues(ctx, c); err != nil {
		c.recycle()
		return nil, nil, err
	}
	if o.member == "" {
		c.slotFor = l.takeSlots(ops, c.now, false)
	} // else a member's enqueues with Dispatch have a slot there
	c.l, c.rf = l, rf
	wait, err := l.eng.ApplyTo(ctx, c)
	if err != nil {
		var cfe *ConditionFailedError
		var cle *ClaimLostError
		if errors.As(err, &cfe) || errors.As(err, &cle) || errors.Is(err, ErrJobExists) {
			l.discard(ctx, c.staged) // nothing refers to the staged blobs
		}
		for _, s := range c.slotFor {
			s.put()
		}
		c.recycle()
		return nil, nil, err
	}
	return c, wait, nil
}

// ApplyTx applies c's operations, and its refill (engine.Applier).
func (c *commitState) ApplyTx(tx *engine.Tx) error {
	if err := c.l.applyOps(tx, c); err != nil {
		c.taken.untake() // rolled back: the claims it made are undone
		return err
	}
	if c.rf != nil {
		c.l.refillApply(tx, c.rf, c.now, &c.taken)
	}
	return nil
}

// await waits for the outcome of a transaction that apply applied, and
// does what follows it. c goes back to the pool (see recycle) unless the
// caller stopped waiting: what follows the commit then keeps it.
func (l *local) await(ctx context.Context, c *commitState, wait func(context.Context) error) (TxnResult, error) {
	if err := wait(ctx); err != nil {
		if errors.Is(err, engine.ErrOutcomeUnknown) {
			// The caller stops waiting; what follows the commit still
			// has to happen once the outcome is known.
			go func() { l.committed(context.WithoutCancel(ctx), c, wait(context.Background()), true) }()
		} else {
			l.committed(ctx, c, err, false)
			c.recycle()
		}
		return TxnResult{}, err
	}
	l.committed(ctx, c, nil, false)
	res := c.res
	if len(res.Enqueued) > 0 && &res.Enqueued[0] == &c.enqBuf[0] {
		res.Enqueued = slices.Clone(res.Enqueued) // c's own buffer: c is reused
	}
	c.recycle()
	return res, nil
}

// commitStates holds emptied commitStates: one is taken for each
// transaction, and given back once its outcome is known and done with.
// A commitState with its buffers and options is about 900 bytes, which
// had been the largest single allocation of a step transition (14% of
// its bytes in a saturated process).
var commitStates = sync.Pool{New: func() any { return new(commitState) }}

// recycle empties c, dropping everything it refers to, and gives it back
// to commitStates.
//
// REQUIRES: nothing refers to c or its buffers (its result's Enqueued
// among them) any more, and the engine is done with it (applied).
func (c *commitState) recycle() {
	*c = commitState{}
	commitStates.Put(c)
}

// commitState is one transaction on its way through commit's stages.
type commitState struct {
	l   *local
	ops []txnOp
	o   options
	now time.Time
	rf  *claimState // the refill claimed in the transaction, or nil

	vals    []opVal        // per op: its staged value, and a new job's ID
	staged  [][]byte       // large values uploaded for the transaction
	slotFor map[int]*slots // op index -> Work slot taken for a dispatched enqueue

	// Set by applyOps (again on each application of the transaction),
	// in slices of the buffers below when they fit (see sizeResults).
	res     TxnResult
	unused  [][]byte   // staged payloads of dedup hits
	after   []afterOp  // done once the operations are applied, under the engine's lock
	signals []*lease   // ended claims: signalLost tells their watchers, once the outcome is known
	taken   limitTaken // tokens of queue limits its claims took

	// Room for the results of a settlement's usual operations (an ack
	// and an enqueue claimed for the next step), allocated with c, before
	// the engine's lock.
	afterBuf  [2]afterOp
	enqBuf    [1]EnqueueResult
	signalBuf [1]*lease
	valsBuf   [4]opVal // a settlement's (an ack, an enqueue, a record and its history entry)
}

// opVal is what stageValues made of an operation's value.
type opVal struct {
	enc []byte // the engine value of its value (nil: in the job record, or a key's inline value)
	id  string // an enqueue's: the new job's ID
}

// sizeResults points c's result slices at its buffers, or at new ones
// sized for its operations, so that applyOps does not grow them under the
// engine's lock.
func (c *commitState) sizeResults() {
	var enq, after, settled int
	for i := range c.ops {
		switch c.ops[i].Kind {
		case opEnqueue:
			enq++
			after++
		case opAck, opNack, opDeadLetter, opRelease:
			settled++
			after++
		case opCancelJob:
			after++
		}
	}
	c.after = c.afterBuf[:0]
	if after > len(c.afterBuf) {
		c.after = make([]afterOp, 0, after)
	}
	switch {
	case enq > len(c.enqBuf):
		c.res.Enqueued = make([]EnqueueResult, 0, enq)
	case enq > 0:
		c.res.Enqueued = c.enqBuf[:0:enq]
	}
	c.signals = c.signalBuf[:0]
	if settled > len(c.signalBuf) {
		c.signals = make([]*lease, 0, settled)
	}
}

// afterOp is what an operation leaves to do once all are applied: grant
// the lease of a job it claimed, end the claim it settled, or f.
type afterOp struct {
	grant   *Job
	settled *txnOp
	f       func()
}

// discard deletes staged large values nothing refers to.
func (l *local) discard(ctx context.Context, refs [][]byte) {
	for _, ref := range refs {
		l.eng.DiscardBlob(context.WithoutCancel(ctx), ref)
	}
}

// stageValues encodes the values of c's operations and assigns the IDs of
// its new jobs. Large values are uploaded to objects of their own first:
// the transaction refers to them.
func (l *local) stageValues(ctx context.Context, c *commitState) error {
	c.vals = c.valsBuf[:0]
	if len(c.ops) > len(c.valsBuf) {
		c.vals = make([]opVal, 0, len(c.ops))
	}
	c.vals = c.vals[:len(c.ops)]
	for i := range c.ops {
		op := &c.ops[i]
		switch op.Kind {
		case opPut, opCompareAndPut, opEnqueue:
		default:
			continue
		}
		if op.Kind == opEnqueue {
			c.vals[i].id = op.JobID
			if c.vals[i].id == "" {
				c.vals[i].id = ulid.Make().String()
			}
		}
		if op.Kind == opEnqueue && l.inlinePayload(op.Value) {
			continue // goes into the job record (see enqueueTx)
		}
		if len(op.Value) > l.opts.largeValue {
			ref, err := l.eng.PutBlob(ctx, op.Value)
			if err != nil {
				l.discard(ctx, c.staged)
				return err
			}
			c.staged = append(c.staged, ref)
			c.vals[i].enc = ref
		} else if op.Kind == opEnqueue {
			c.vals[i].enc = engine.Inline(op.Value)
		} // else nil: the value goes inline into the tree (putKV)
	}
	return nil
}

// applyOps applies c's operations in tx; an error rolls them all back.
//
// REQUIRES: inside the engine transaction of c (it may run more than once).
func (l *local) applyOps(tx *engine.Tx, c *commitState) error {
	ops, o, now := c.ops, &c.o, c.now
	c.res = TxnResult{Enqueued: c.res.Enqueued[:0]} // nil without enqueues
	c.unused, c.after, c.signals, c.taken = nil, c.after[:0], c.signals[:0], nil
	for i := range ops {
		op := &ops[i]
		var err error
		switch op.Kind {
		case opPut:
			putKV(tx, op, c.vals[i].enc)
		case opDelete:
			tx.DeleteKey(kvSpace, op.Key)
		case opCompareAndPut:
			cur, ok := tx.GetKey(kvSpace, op.Key)
			if op.Absent && ok || !op.Absent && (!ok || !valueMatches(cur, op.Expect)) {
				return &ConditionFailedError{Key: op.Key}
			}
			putKV(tx, op, c.vals[i].enc)
		case opCompareAndDelete:
			cur, ok := tx.GetKey(kvSpace, op.Key)
			if !ok || !valueMatches(cur, op.Expect) {
				return &ConditionFailedError{Key: op.Key}
			}
			tx.DeleteKey(kvSpace, op.Key)
		case opEnqueue:
			if op.JobID != "" {
				if _, exists := tx.GetIn(jobSpace, op.JobID); exists {
					return fmt.Errorf("%w: %s", ErrJobExists, op.JobID)
				}
			}
			r := l.enqueueTx(tx, op, c.vals[i].id, c.vals[i].enc, *o, now, c.slotFor[i] != nil || o.member != "" && op.Dispatch, &c.taken)
			if r.Duplicate && len(op.Value) > l.opts.largeValue {
				c.unused = append(c.unused, c.vals[i].enc)
			}
			if j := r.claimed; j != nil {
				j.Payload = op.Value
				c.after = append(c.after, afterOp{grant: j})
			}
			c.res.Enqueued = append(c.res.Enqueued, r)
		case opAck, opNack, opDeadLetter, opRelease:
			err = l.settleTx(tx, op, o, now)
			c.after = append(c.after, afterOp{settled: op})
		case opRequireJob:
			v, ok := tx.GetIn(jobSpace, op.JobID)
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
			co, f := l.cancelTx(tx, op.JobID, now)
			c.res.Cancelled = append(c.res.Cancelled, co)
			if f != nil {
				c.after = append(c.after, afterOp{f: f})
			}
		case opRequeueDead:
			err = requeueDeadTx(tx, op.JobID, now)
		case opSetLimit:
			err = setLimitTx(tx, op)
		default:
			err = errors.New("queue: unknown transaction operation")
		}
		if err != nil {
			return err
		}
	}
	// Claims are released (and granted) while the engine's lock is still
	// held, so the reaper cannot also act on them.
	for _, a := range c.after {
		switch {
		case a.grant != nil:
			l.grantLeases([]*Job{a.grant}, o.config(a.grant.Queue), now, o.member)
		case a.settled != nil:
			if ls := l.endLease(a.settled.JobID, a.settled.Token, nil); ls != nil {
				c.signals = append(c.signals, ls)
			}
		default:
			a.f()
		}
	}
	return nil
}

// putKV applies a Put or CompareAndPut whose staged value is enc: a blob
// reference, or nil for a value stored inline, built into the tree's item
// at once.
func putKV(tx *engine.Tx, op *txnOp, enc []byte) {
	if enc != nil {
		tx.Put(kvSpace+string(op.Key), enc)
	} else {
		tx.PutInline(kvSpace, op.Key, op.Value)
	}
}

// committed does what follows a transaction's outcome (err == nil:
// durable): it tells the watchers of the claims it settled, fires the
// watches of the keys it wrote (watch.go), starts the
// leases of the jobs it claimed and the dispatched jobs in the slots taken
// for them, or gives the slots back. abandoned says the caller stopped
// waiting (ErrOutcomeUnknown) and will not see the result: the jobs
// claimed for it (queuex.API.WithClaim) are then released, their attempt
// not counted.
func (l *local) committed(ctx context.Context, c *commitState, err error, abandoned bool) {
	ops, slotFor, res, unused, signals, o := c.ops, c.slotFor, c.res, c.unused, c.signals, c.o
	if len(signals) > 0 {
		l.signalLost(signals...)
	}
	if err != nil {
		for _, s := range slotFor {
			s.put()
		}
		return
	}
	l.watches.fireOps(ops)
	for _, ref := range unused {
		l.eng.DiscardBlob(context.Background(), ref)
	}
	var claimed []*Job
	for _, r := range res.Enqueued {
		if r.claimed != nil {
			claimed = append(claimed, r.claimed)
		}
	}
	l.startLeases(claimed, o)
	if slotFor != nil {
		startDispatched(ctx, ops, slotFor, res.Enqueued)
	}
	if abandoned {
		var unrun []*Job
		for _, r := range res.Enqueued {
			if r.claimed != nil { // not dispatched (startDispatched cleared those)
				unrun = append(unrun, r.claimed)
			}
		}
		if len(unrun) > 0 {
			l.releaseUnrun(unrun, o)
		}
	}
}

// startDispatched starts each dispatched job that the transaction claimed
// in the slot taken for it, with what ctx carries for it (see
// handoff.WithDispatched), and gives back the slots of the others (not
// granted: those jobs wait in the queue). enqueued holds one result per
// enqueue of ops, in order.
func startDispatched(ctx context.Context, ops []txnOp, slotFor map[int]*slots, enqueued []EnqueueResult) {
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
		case r.claimed == nil:
			s.put()
		default:
			j := r.claimed
			r.claimed, r.dispatched = nil, true
			s.start(j, handoff.DispatchedCarry(ctx, j.ID))
		}
	}
}
