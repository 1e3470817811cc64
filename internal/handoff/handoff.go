// Package handoff lets a Work handler give the job its transaction just
// claimed (queue.EnqueueOptions.Claim) to the worker slot running it, to
// run next in the same slot. The queue package puts a Slot in each
// handler's context; the runtime chains a run's steps with Give. It is
// internal: the queue's public API need not carry the runtime's plumbing.
package handoff

import "context"

// Slot is the handoff point of one handler run: the job handed to it.
type Slot[J any] struct {
	// Queue is the queue the slot's worker serves: only its jobs are taken.
	Queue string
	next  J
	taken bool
}

type key[J any] struct{}

// With returns ctx carrying s.
func With[J any](ctx context.Context, s *Slot[J]) context.Context {
	return context.WithValue(ctx, key[J]{}, s)
}

// Give hands job (of queue) to the slot of the handler whose context is
// ctx. It reports false, leaving the job to the caller, when ctx carries
// no slot, the slot serves another queue, or it holds a job already.
func Give[J any](ctx context.Context, queue string, job J) bool {
	s, _ := ctx.Value(key[J]{}).(*Slot[J])
	if s == nil || s.taken || queue != s.Queue {
		return false
	}
	s.next, s.taken = job, true
	return true
}

// Next returns the job handed to s, if any.
func (s *Slot[J]) Next() (J, bool) { return s.next, s.taken }
