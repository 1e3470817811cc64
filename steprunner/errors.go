package steprunner

import "errors"

// Causes of a step's ctx cancellation, as reported by context.Cause. Each
// says what happens to what RunStep returns afterwards.
var (
	// ErrRunCancelled: the run was cancelled from outside (Runtime.Cancel)
	// while the step was running. Whatever RunStep returns, the step is
	// acknowledged and the run ends Cancelled with an empty Error, unless
	// it returns Cancel(reason), which keeps its reason. Retrying cannot help.
	ErrRunCancelled = errors.New("steprunner: run cancelled")

	// ErrLeaseLost: this process lost its claim on the step (its lease
	// expired or the store was taken over by another writer), so the step
	// may be delivered again, here or elsewhere. Whatever RunStep returns is
	// discarded. Return promptly and undo nothing: the next delivery
	// settles the step.
	ErrLeaseLost = errors.New("steprunner: step lease lost")

	// ErrShutdown: the runtime is shutting down and its drain period ended
	// before the step returned. What RunStep returns may not be recorded,
	// and the step will be delivered again later, by this process after a
	// restart or by another one.
	ErrShutdown = errors.New("steprunner: runtime shutting down")

	// ErrStepTimeout: the attempt ran past its deadline (RunSpec.StepTimeout,
	// or the Runtime's WithStepTimeout default). The attempt counts as a
	// failed one, whatever RunStep returns, and the runtime does not wait
	// for it: at the deadline it settles the attempt (retried with the
	// run's backoff, or the run fails on the last attempt) and discards
	// what RunStep returns later. Return promptly; the retry runs with a
	// fresh deadline.
	ErrStepTimeout = errors.New("steprunner: step timed out")
)

// permanentError marks an error as permanent. See Permanent.
type permanentError struct {
	err error
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: a step whose RunStep returns it (or an
// error wrapping it) is dead-lettered at once instead of being retried, and
// its run ends Failed with err's message as Outcome.Error.
//
// Permanent returns nil for a nil err and returns err unchanged if it is
// already permanent. The returned error has err's message and unwraps to
// err, so errors.Is and errors.As see through it.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err is, or wraps, an error returned by
// Permanent. It is false for nil.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
