// Package handoff lets a Work handler give the job its transaction just
// claimed (queuex.API.WithClaim) to the worker slot running it, to
// run next in the same slot, with a value of its choosing carried along.
// The queue package puts a Slot in each handler's context; the runtime
// chains a run's steps with Give, carrying the run record its settlement
// wrote so that the next step need not read it back. A handler that is
// settling its job as its last act (Settling) opens its slot to a
// settlement's refill: the queue claims the slot's next job in the
// settlement's transaction and gives it to the slot. It is internal: the
// queue's public API need not carry the runtime's plumbing.
package handoff

import (
	"context"
	"sync"
)

// Slot is the handoff point of one handler run: the job handed to it, and
// what came with the job this run handles. With makes it the context that
// carries it, so that a handler run costs no context of its own.
type Slot[J any] struct {
	// Context is the context the slot extends (set by With).
	context.Context
	// Queue is the queue the slot's worker serves: only its jobs are taken.
	Queue string
	// JobID is the job the handler runs.
	JobID string
	// Stopping, if set, reports whether the slot's worker is stopping
	// (see Open).
	Stopping func() bool
	// Carried is what the handler that handed over this run's job gave
	// with it (nil for a job the worker claimed or was dispatched).
	Carried  any
	mu       sync.Mutex // guards the fields below: Give may come from another goroutine
	next     J
	carry    any
	taken    bool
	settling bool // see Settling
	closed   bool // see Next
}

type key[J any] struct{}

// With returns ctx carrying s: s itself, extending ctx (s is used with
// one ctx at a time).
func With[J any](ctx context.Context, s *Slot[J]) context.Context {
	s.Context = ctx
	return s
}

// Value returns s for the slot key, else what the context it extends
// holds.
func (s *Slot[J]) Value(k any) any {
	if _, ok := k.(key[J]); ok {
		return s
	}
	return s.Context.Value(k)
}

// Give hands job (of queue) to the slot of the handler whose context is
// ctx, with carried for the handler that runs it. It reports false,
// leaving the job to the caller, when ctx carries no slot, the slot serves
// another queue, holds a job already, or was done with (see Next).
func Give[J any](ctx context.Context, queue string, job J, carried any) bool {
	s, _ := ctx.Value(key[J]{}).(*Slot[J])
	if s == nil || queue != s.Queue {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken || s.closed {
		return false
	}
	s.next, s.carry, s.taken = job, carried, true
	return true
}

// Next returns the job handed to s, if any, and what came with it. The
// slot takes no job after: a later Give reports false.
func (s *Slot[J]) Next() (job J, carried any, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.next, s.carry, s.taken
}

// Settling marks the handler run whose context is ctx as settling its
// job as its last act (the worker once the handler returned, or the
// runtime's settlement of a step): a settlement from then on may claim the
// slot's next job (see Open). One made before, by a handler that settles
// first and works on, does not: the job would wait for the handler to
// return, its lease running and not renewed.
func Settling[J any](ctx context.Context) {
	if s, _ := ctx.Value(key[J]{}).(*Slot[J]); s != nil {
		s.mu.Lock()
		s.settling = true
		s.mu.Unlock()
	}
}

// Carried returns what came with the job of the handler whose context is
// ctx (nil: nothing, or no slot).
func Carried[J any](ctx context.Context) any {
	if s, _ := ctx.Value(key[J]{}).(*Slot[J]); s != nil {
		return s.Carried
	}
	return nil
}

type dispatchKey struct{}

// dispatched is what a context carries for a dispatched job: it is the
// context that carries it (it extends the context it was made from).
type dispatched struct {
	context.Context
	jobID string
	v     any
	next  *dispatched
}

// Value returns d for dispatchKey, else what the context it extends holds.
func (d *dispatched) Value(k any) any {
	if k == (dispatchKey{}) {
		return d
	}
	return d.Context.Value(k)
}

// WithDispatched returns ctx carrying v for the job jobID, should a commit
// under ctx dispatch it (queuex.API.WithDispatch) into a slot: the
// handler that runs it there finds v with Carried. The runtime's Submit
// carries the record of the run it creates to the run's first step.
func WithDispatched(ctx context.Context, jobID string, v any) context.Context {
	prev, _ := ctx.Value(dispatchKey{}).(*dispatched)
	return &dispatched{Context: ctx, jobID: jobID, v: v, next: prev}
}

// DispatchedCarry returns what ctx carries for the job jobID (nil:
// nothing).
func DispatchedCarry(ctx context.Context, jobID string) any {
	for d, _ := ctx.Value(dispatchKey{}).(*dispatched); d != nil; d = d.next {
		if d.jobID == jobID {
			return d.v
		}
	}
	return nil
}

type prefetchKey struct{}

// Prefetch names a value to read with each job a Work loop claims: the
// key Prefix followed by the job's header Header. The store's writer
// reads it in the claim's transaction (a member's comes in the claim's
// reply), and the handler finds it with Carried (nil when the key is
// absent). The runtime's step loop prefetches each step's run record
// this way.
type Prefetch struct {
	Header, Prefix string
}

// WithPrefetch returns ctx carrying p, for the Work loop run with it.
func WithPrefetch(ctx context.Context, p Prefetch) context.Context {
	return context.WithValue(ctx, prefetchKey{}, p)
}

// PrefetchOf returns the Prefetch that ctx carries (ok false: none).
func PrefetchOf(ctx context.Context) (p Prefetch, ok bool) {
	p, ok = ctx.Value(prefetchKey{}).(Prefetch)
	return p, ok
}

// Open returns the queue of the slot of the handler whose context is ctx,
// and the job it runs, if its handler is settling its job (see Settling),
// no job has been handed to it yet and its worker is not stopping (ok
// false: no slot, or one that is not settling, holds a job or stops).
func Open[J any](ctx context.Context) (queue, jobID string, ok bool) {
	s, _ := ctx.Value(key[J]{}).(*Slot[J])
	if s == nil {
		return "", "", false
	}
	s.mu.Lock()
	open := s.settling && !s.taken && !s.closed
	s.mu.Unlock()
	if !open || s.Stopping != nil && s.Stopping() {
		return "", "", false
	}
	return s.Queue, s.JobID, true
}
