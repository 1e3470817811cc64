// Package steprunner is the user's side of a Stepwell step: the Step a
// Runner receives, the Outcome it returns, and how errors are classified.
//
// # Basics
//
// A run is a chain of steps. The runtime delivers each step as a job from a
// durable queue and calls Runner.RunStep with it. Step 0 receives the run's
// input; step n>0 receives the payload that step n-1 passed to Continue.
// RunStep answers with exactly one of:
//
//	Continue(p)          the next step (n+1) runs with payload p, now
//	ContinueAfter(p, d)  the next step runs with payload p, d from now
//	Succeed(r)           the run ends Succeeded with result r
//	Fail(reason)         the run ends Failed with reason; not retried
//	Cancel(reason)       the run ends Cancelled with reason
//	AwaitSignal(name, t) the run parks until Runtime.Signal delivers a signal
//	                     of that name (its payload is step n+1's payload) or
//	                     t passes (0: never; step n+1 then gets an empty
//	                     payload); Step.Signal says which
//	Spawn(children)      child runs start and the run parks until all have
//	                     ended; step n+1 then runs with this step's payload
//	                     and Step.Children, their results in order
//
// or a non-nil error:
//
//	err                  transient: the step is retried with backoff until
//	                     Step.MaxAttempts, then the run ends Failed
//	RetryAfter(err, d)   transient, retried no earlier than d from now
//	                     (a server's Retry-After) instead of after the
//	                     backoff; the attempt counts
//	Permanent(err)       the step is dead-lettered at once; the run ends
//	                     Failed (also when wrapped in RetryAfter)
//
// The backoff and the attempt limit are the queue's unless the run has a
// RetryPolicy (runtime.RunSpec.Retry), which sets them for all its steps.
//
// Continue, ContinueAfter, AwaitSignal and Spawn may send the next step to
// another step queue (Outcome.OnQueue), served by a Runtime of its own.
// Any Outcome may also carry writes to the run's memory, a small key-value
// map kept with the run (Outcome.WithMemo; Step.Memo reads it): they
// commit with the step's settlement, or not at all.
//
// When RunStep returns a non-nil error its Outcome is ignored. The zero
// Outcome (Kind() == 0) is not a valid answer: returning it with a nil error
// is a bug in the Runner, and the runtime treats it as a failed attempt.
//
// # Delivery semantics
//
// Steps are delivered at least once. A step's settlement (ack, enqueue of the
// next step, run-record update) is one atomic transaction, so a step that
// returned is never half-settled; but a process may crash after RunStep
// returned and before the settlement committed, and a step whose lease was
// lost may be running elsewhere. RunStep must therefore be idempotent for a
// given (Step.RunID, Step.Number), or make its side effects idempotent, for
// example by keying them on those two values. Step.Attempt counts deliveries
// of the step, starting at 1.
//
// # Cancellation
//
// The ctx passed to RunStep is cancelled when the run is cancelled from
// outside (Runtime.Cancel), when the step's lease is lost, at the end of a
// shutdown drain, and at the attempt's deadline when the run has a step
// timeout (runtime.RunSpec.StepTimeout; ctx.Deadline reports it).
// context.Cause(ctx) tells which: ErrRunCancelled, ErrLeaseLost,
// ErrShutdown or ErrStepTimeout (compare with errors.Is). A step that
// overruns its timeout is not waited for: the attempt fails at the
// deadline and what RunStep returns afterwards is discarded. A Runner should
// return promptly once ctx is done; see each error for what happens to what
// it returns.
//
// # Ownership of byte slices
//
// Outcome constructors keep the slice they are given without copying it; do
// not modify it after returning the Outcome. Treat Step.Payload and
// Step.Headers as read-only.
package steprunner
