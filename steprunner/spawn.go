package steprunner

import (
	"strconv"

	"github.com/stepwell/stepwell/terminal"
)

// Child is one child run of a Spawn.
type Child struct {
	// RunID is the child's run ID; "" derives one from the parent's run ID,
	// the spawning step and the child's index: "<parent>.s<step>.<index>"
	// (for example "order-7.s2.0"), so that a Spawn that runs again (its
	// attempt's settlement was lost) names the same children. A derived ID
	// over 128 bytes (a long parent ID) fails the step with
	// runtime.ErrInvalidRunID: name the children then.
	RunID string
	// Input is the child's step 0 payload.
	Input []byte
	// Headers reach every step of the child and its terminal hook, as
	// RunSpec.Headers. Keys starting "workflow." are reserved.
	Headers map[string]string
	// Queue is the step queue of the child's step 0 (see RunSpec.Queue);
	// "": the spawning step's queue.
	Queue string
}

// ChildResult is how a child run of a Spawn ended, in Step.Children.
type ChildResult struct {
	RunID string
	// Status is the child's terminal status. A child's first end is the
	// one its parent sees: a child retried afterwards (Runtime.Retry) does
	// not reach its parent again.
	Status terminal.Status
	// Result is a succeeded child's result.
	Result []byte
	// Error is a failed or cancelled child's error (bounded as the
	// terminal record's).
	Error string
}

// Spawn starts children as runs of their own and parks the run until
// every one of them has ended. The step is acknowledged, the children's
// run records and step-0 jobs are written and the run is parked in one
// transaction; while it waits the run holds no step slot, no lease and no
// queued job (runtime.RunStatus: StateWaiting, WaitingFor
// "children: 3 of 10 ended"). The child that ends last starts step n+1, in
// the transaction that ends it, with:
//
//   - Step.Payload: this step's own Payload (the run keeps its state
//     across the join; run memory holds the rest)
//   - Step.Children: one ChildResult per child, in the order given
//
// A child that fails does not fail the parent: the next step decides from
// the results. Cancelling the parent cancels its children (and theirs).
// Children are ordinary runs (Status, Cancel, Signal, Pause, Retry, the
// terminal hook); they inherit the parent's priority, attempt limit, step
// timeout and retry policy. An empty children list, too many children, too
// deep a nesting, too large inputs, an invalid or duplicate RunID, a
// reserved header or an invalid Queue fail the run at once (as Permanent
// would), before anything is written; so does a RunID that names an
// existing run (runtime.ErrInputMismatch when its input differs). Spawn
// can be combined with WithMemo and OnQueue (the queue of step n+1). The
// Outcome keeps children without copying them.
func Spawn(children []Child) Outcome {
	return Outcome{kind: KindSpawn, children: children}
}

// Children returns a Spawn outcome's children, and nil for every other
// kind.
func (o Outcome) Children() []Child {
	if o.kind != KindSpawn {
		return nil
	}
	return o.children
}

// DeriveChildRunID returns the run ID that Spawn gives child index of the
// step step of run parent when its RunID is "": parent + ".s" + step +
// "." + index. It does not check the length.
func DeriveChildRunID(parent string, step uint32, index int) string {
	return parent + ".s" + strconv.FormatUint(uint64(step), 10) + "." + strconv.Itoa(index)
}
