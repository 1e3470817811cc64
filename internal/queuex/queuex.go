// Package queuex is the plumbing of package queue that the workflow
// runtime needs and a user of plain background jobs does not: claiming a
// job in the transaction that enqueues it (chaining), dispatching it to an
// idle Work slot of this process, settling a Work handler's job by hand,
// giving back a claim that never ran, and guarding a transaction on a
// job's state. Keeping it here keeps queue's public API to what users
// call; it is internal, like handoff.
//
// An internal package cannot import queue (queue imports internal
// packages), so queue registers an API of plain functions over its own
// types at init, and a user fetches it once with those types:
//
//	var qx = queuex.Get[*queue.Queue, queue.Txn, *queue.Job,
//		queue.EnqueueOptions, queue.EnqueueResult, queue.WorkOptions]()
//
// Package initialization runs queue's init before the user's package
// variables, so qx is set before any use. Calls go through function
// values on concrete types: no interface boxing. Options, results and
// transactions go in and out by value, and no function is variadic: a
// pointer or a variadic slice passed to a function value escapes (the
// compiler cannot see what the function does with it), which would put a
// caller's local on the heap on every call.
package queuex

import (
	"context"
	"fmt"
)

// API is queue's plumbing over its types: Q *queue.Queue, T queue.Txn,
// J *queue.Job, EO queue.EnqueueOptions, ER queue.EnqueueResult,
// WO queue.WorkOptions.
type API[Q, T, J, EO, ER, WO any] struct {
	// WithClaim returns o with its claim flag set to on. An enqueue with
	// it claims the new job for this process in the same transaction, as
	// if by a claim right after the
	// commit but with no second write: it is created claimed (attempt 1),
	// under a lease that starts when the transaction is durable, and
	// Claimed returns it. This is how a worker chains follow-up work to
	// itself (the runtime runs a run's next step this way). The claim
	// bypasses FIFO order within the job's priority, but it is not
	// granted, and the job is enqueued pending as usual, when it is not
	// due yet (RunAt or Delay in the future) or when a job of higher
	// priority is ready in the queue (counting what the transaction's
	// earlier operations made ready, dead-letter notices included). A
	// dedup hit enqueues nothing and claims nothing. Works in cluster mode
	// (a member's claim is held by the member).
	WithClaim func(o EO, on bool) EO
	// WithDispatch returns o with its dispatch flag set to on. An enqueue
	// with it starts the new job at once in an idle slot of a Work loop of this process that serves its queue,
	// claimed in the same transaction: no claim write of its own and no
	// wait for the loop to notice the job. A service that submits work and
	// runs workers in one process gets its latency from this. The job is
	// enqueued pending as usual, and claimed by whichever worker comes
	// first, when no such slot is idle at commit time (in a cluster
	// member: idle in a loop whose claim call is at the writer, where it
	// waits while nothing is ready), when it is not due yet, when another
	// job of its queue is ready (dispatch never overtakes waiting jobs),
	// or on a dedup hit; Dispatched says which.
	// Ignored when the claim flag is set. The handler that runs the job
	// finds what handoff.WithDispatched put on the commit's context.
	WithDispatch func(o EO, on bool) EO
	// Claimed returns the job an enqueue claimed (WithClaim), owned by
	// this process; nil when not set or not granted. Its Payload shares
	// the slice passed to Enqueue.
	Claimed func(r ER) J
	// Dispatched reports whether an enqueue's job (WithDispatch) was
	// claimed for, and started in, an idle Work slot of this process.
	Dispatched func(r ER) bool
	// WithManualSettle returns o with manual settlement set to on: Work
	// leaves settlement to the handler, which commits its own transaction
	// (Ack, Nack, DeadLetter with other changes). Work then settles only
	// a job whose handler panicked (Nack) or was stopped by the drain
	// timeout (released for another attempt), if the handler has not
	// settled it.
	WithManualSettle func(o WO, on bool) WO
	// RequireJobState returns t with a condition added: the transaction
	// fails with a
	// *queue.ConditionFailedError (changing nothing) unless the job exists
	// and is in one of the states in. It lets a transaction act on what
	// it read of a job, such as removing a pending step, without racing a
	// claim.
	RequireJobState func(t T, id string, in States) T
	// Release returns a claimed job to the queue without counting the
	// attempt: pending again, claimable at once, in its FIFO place. For a
	// job claimed but never started. It fails with a *queue.ClaimLostError
	// if the claim was lost.
	Release func(q Q, ctx context.Context, j J) error
	// OnClaimEnd sets what is told (e.ClaimEnded, once, in a goroutine
	// of its own) when ctx, a running Work handler's own context, is
	// cancelled: its claim was lost or its job cancelled, or a drain timed
	// out. It is context.AfterFunc(ctx, e.ClaimEnded) with no allocation,
	// and at most one per context: a later call replaces e, and nil
	// clears it. It reports false, doing nothing, for any other context
	// (one derived from a handler's included).
	OnClaimEnd func(ctx context.Context, e ClaimEnder) bool
	// WatchKey watches a key of q's key-value space whose value the
	// caller read as v (found: the key exists), as a futex: ch gets a
	// value at the first commit that writes the key after the call, or at
	// once if its value is no longer v; it may also get one without a
	// change (a change of writer): read again and watch again. cancel
	// withdraws the watch (call it in any case). It works on a writer and
	// in a cluster member (one long-poll to the writer carries all of a
	// member's watches); a Queue opened WithReadOnly returns
	// queue.ErrReadOnly. A commit costs one atomic load while nothing is
	// watched.
	WatchKey func(q Q, ctx context.Context, key, v []byte, found bool) (ch <-chan struct{}, cancel func(), err error)
	// TakeTxn returns an empty transaction whose operations go into an
	// array taken from a pool (room for 8), and RecycleTxn gives t's array
	// back, emptied, and empties t. Recycle a transaction only once its
	// Commit returned nil: nothing refers to its operations then (on any
	// error, one may still: an outcome not yet known). Neither the caller
	// nor anything it handed t to may use t's operations after.
	TakeTxn    func() *T
	RecycleTxn func(t *T)
}

// States is a set of job states (queue.State): bit 1<<s for state s.
// Part of the wire form of a transaction (txnOp.States).
type States uint32

// StateSet returns the set of the given states. Call it directly (it is
// not variadic through a function value, so its slice stays on the
// caller's stack).
func StateSet[S ~uint8](states ...S) States {
	var in States
	for _, s := range states {
		in |= 1 << s
	}
	return in
}

var registered any

// Register makes a the API that Get returns. Package queue calls it at
// init; nothing else should.
func Register[Q, T, J, EO, ER, WO any](a *API[Q, T, J, EO, ER, WO]) { registered = a }

// Get returns the API queue registered. It panics if the types are not
// queue's (a programming error, found by any test that imports the
// caller).
func Get[Q, T, J, EO, ER, WO any]() *API[Q, T, J, EO, ER, WO] {
	a, ok := registered.(*API[Q, T, J, EO, ER, WO])
	if !ok {
		panic(fmt.Sprintf("queuex: no API registered for these types (%T)", registered))
	}
	return a
}

// ClaimEnder is told that a handler's context was cancelled (see
// API.OnClaimEnd).
type ClaimEnder interface{ ClaimEnded() }
