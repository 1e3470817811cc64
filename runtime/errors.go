package runtime

import (
	"errors"
	"fmt"
)

// Errors returned by the runtime. None is retryable with the same input.
var (
	// ErrInputMismatch: Submit of a known run ID with a different input.
	ErrInputMismatch = errors.New("runtime: run already submitted with a different input")
	// ErrReservedHeader: a RunSpec header starts with "workflow.".
	ErrReservedHeader = errors.New(`runtime: header keys starting "workflow." are reserved`)
	// ErrInvalidRunID: empty after trimming spaces, with leading or
	// trailing spaces, over 128 bytes, not printable ASCII, or containing
	// '/'.
	ErrInvalidRunID = errors.New("runtime: invalid run ID")
	// ErrRunNotFound: no run with that ID in the store (never submitted, or
	// finished longer ago than the terminal retention).
	ErrRunNotFound = errors.New("runtime: run not found")
	// ErrInvalidOption: an Option, an argument of New or a ListOptions
	// field (such as a Cursor that no ListRuns returned) had an invalid
	// value.
	ErrInvalidOption = errors.New("runtime: invalid option")
	// ErrSpecMismatch: Submit of a known run ID with the same input but
	// another spec: headers, priority, attempt limit, step timeout, start
	// time, retry policy or deadline (ErrInputMismatch is for a different
	// input). The message names what differs.
	ErrSpecMismatch = errors.New("runtime: run already submitted with another spec")
	// ErrInvalidRunSpec: Submit of a RunSpec with an invalid field (a
	// negative StepTimeout, an invalid Retry policy: then it wraps a
	// *steprunner.RetryPolicyError too; a Deadline that has passed).
	// Nothing is written.
	ErrInvalidRunSpec = errors.New("runtime: invalid run spec")
	// ErrRunDeadline: a run whose RunSpec.Deadline passed before it ended
	// ends Failed with an error wrapping it (its text, which contains
	// "deadline", is the run's Error); a step running then sees it as its
	// ctx's cause (context.Cause). Retrying the step cannot help; Retry of
	// the run runs it without the deadline that passed.
	ErrRunDeadline = errors.New("runtime: run deadline passed")
	// ErrRunNotRetryable: Retry of a run that is not failed or cancelled
	// (pending, running, cancelling or succeeded; including a run that a
	// concurrent Retry has just retried), or whose final step's payload is
	// no longer kept. The message says which. Retrying the call helps only
	// once the run has failed or been cancelled again.
	ErrRunNotRetryable = errors.New("runtime: run cannot be retried")
	// ErrNoRunner: Run of a client Runtime (New with a nil Runner), which
	// does not execute steps.
	ErrNoRunner = errors.New("runtime: this Runtime has no Runner: it cannot Run")
	// ErrRunEnded: Signal, Pause or Resume of a run that has ended
	// (succeeded, failed or cancelled, within the terminal retention) or
	// is being cancelled. Retrying cannot help; Retry the run first.
	ErrRunEnded = errors.New("runtime: run has ended")
	// ErrInvalidSignalName: a signal name that is empty after trimming
	// spaces, has leading or trailing spaces, is over 128 bytes, is not
	// printable ASCII, or contains '/'. Retrying cannot help.
	ErrInvalidSignalName = errors.New("runtime: invalid signal name")
	// ErrSignalTooLarge is wrapped by SignalTooLargeError.
	ErrSignalTooLarge = errors.New("runtime: signal payload too large")
	// ErrInvalidQueueName: a step queue name (WithQueueName,
	// RunSpec.Queue, steprunner.Outcome.OnQueue) that ValidateQueueName
	// refuses. Submit and New return it (New wrapped in ErrInvalidOption);
	// a step whose Outcome names one fails its run, as
	// steprunner.Permanent would. Retrying cannot help.
	ErrInvalidQueueName = errors.New("runtime: invalid step queue name")
	// ErrMemoTooLarge is wrapped by MemoLimitError: a step's memory writes
	// (steprunner.Outcome.WithMemo) over a limit (WithMemoLimits).
	ErrMemoTooLarge = errors.New("runtime: run memory over a limit")
	// ErrInvalidMemoKey: a memory write's key is empty or not printable
	// ASCII (ValidateMemoKey). Like a MemoLimitError it fails the step
	// permanently; retrying cannot help.
	ErrInvalidMemoKey = errors.New("runtime: invalid memo key")
	// ErrInvalidSchedule: SetSchedule of a Schedule with an invalid field
	// (its name, both or neither of Every and Cron, Every under 1s, a
	// Cron that does not parse, a Location that cannot be loaded by name,
	// a Spec with a RunID or a StartAt or headers too large for a step
	// job (then it wraps a *queue.TooLargeError), or a Spec that Submit
	// would refuse: then it wraps that error too), or DeleteSchedule of an
	// invalid name. The message says which. Nothing is written; retrying
	// cannot help.
	ErrInvalidSchedule = errors.New("runtime: invalid schedule")
	// ErrScheduleNotFound: DeleteSchedule of a schedule that does not
	// exist (never set, or deleted).
	ErrScheduleNotFound = errors.New("runtime: schedule not found")
)

// MemoLimitError: the memory writes of a step's Outcome break a limit
// (WithMemoLimits). The step fails permanently and its run ends Failed
// with this error (the step is dead-lettered, as with a
// steprunner.Permanent error); nothing of the Outcome is written, so a
// Retry of the run runs the step again with the memory as it was.
// Retrying with the same writes cannot help.
type MemoLimitError struct {
	// What is over its limit: "key" (a key's length), "value" (a value's
	// length), "memory" (the run's memory in bytes, keys and values) or
	// "keys" (the run's number of keys).
	What string
	// Key is the key written ("key": its first 64 bytes; "value": the
	// key); "" for "memory" and "keys".
	Key string
	// Size is the length or count that the writes would reach; Max its
	// limit.
	Size, Max int
}

func (e *MemoLimitError) Error() string {
	switch e.What {
	case "keys":
		return fmt.Sprintf("runtime: run memory of %d keys, at most %d", e.Size, e.Max)
	case "memory":
		return fmt.Sprintf("runtime: run memory of %d bytes, at most %d", e.Size, e.Max)
	}
	return fmt.Sprintf("runtime: memo %s %q of %d bytes, at most %d", e.What, e.Key, e.Size, e.Max)
}

// Unwrap returns ErrMemoTooLarge.
func (e *MemoLimitError) Unwrap() error { return ErrMemoTooLarge }

// SignalTooLargeError: a Signal payload of Size bytes, over the Max that
// WithMaxSignalPayload sets. It changed nothing; retrying with the same
// payload cannot help.
type SignalTooLargeError struct {
	Size, Max int
}

func (e *SignalTooLargeError) Error() string {
	return fmt.Sprintf("runtime: signal payload of %d bytes, at most %d", e.Size, e.Max)
}

// Unwrap returns ErrSignalTooLarge.
func (e *SignalTooLargeError) Unwrap() error { return ErrSignalTooLarge }
