package steprunner

import "context"

// Step is one delivery of one step of a run.
type Step struct {
	// RunID identifies the run.
	RunID string
	// Number is the zero-based step number.
	Number uint32
	// Payload is RunSpec.Input for step 0 and, for step n>0, the previous
	// step's Continue payload, the payload of the signal that ended its
	// AwaitSignal (empty after a timeout), or after a Spawn's join the
	// spawning step's own Payload.
	Payload []byte
	// Headers are the submitter's headers (nil if it gave none). Reserved
	// "workflow." keys never appear.
	Headers map[string]string
	// JobID identifies the queue job carrying this delivery.
	JobID string
	// Attempt is 1 on the first delivery of this step and grows by one with
	// each redelivery.
	Attempt uint32
	// MaxAttempts is the step's attempt limit: a transient error on attempt
	// MaxAttempts fails the run.
	MaxAttempts uint32
	// Signal says what woke this step when the previous step returned
	// AwaitSignal: the signal (Payload is its payload) or the timeout
	// (Payload is empty). nil for a step that did not follow an await.
	Signal *SignalDelivery
	// Children are the results of the children of the previous step's
	// Spawn, in the order given (nil for a step that did not follow a
	// Spawn).
	Children []ChildResult

	// memo is the run's memory as it committed before the step started
	// (Memo); set by the runtime through internal/stepmemo.
	memo map[string][]byte
}

// LastAttempt reports whether this delivery is the step's last: a transient
// error now fails the run.
func (s *Step) LastAttempt() bool {
	return s.MaxAttempts > 0 && s.Attempt >= s.MaxAttempts
}

// Runner runs steps. The runtime calls RunStep from many goroutines at once
// (up to its concurrency limit), so implementations must be safe for
// concurrent use.
type Runner interface {
	// RunStep runs one step and returns its Outcome, or an error: transient
	// (retried with backoff until step.MaxAttempts, then the run fails)
	// unless wrapped with Permanent (the run fails at once). The Outcome is
	// ignored when the error is non-nil.
	RunStep(ctx context.Context, step *Step) (Outcome, error)
}

// RunnerFunc adapts an ordinary function to the Runner interface.
type RunnerFunc func(ctx context.Context, step *Step) (Outcome, error)

// RunStep calls f(ctx, step).
func (f RunnerFunc) RunStep(ctx context.Context, step *Step) (Outcome, error) {
	return f(ctx, step)
}
