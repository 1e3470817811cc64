package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/steprunner"
)

// StepError describes a failed step attempt: what an ErrorHandler is told,
// and what the Runtime logs (WithLogger).
type StepError struct {
	RunID       string
	Step        uint32
	Attempt     uint32 // 1 for the first attempt
	MaxAttempts uint32
	JobID       string
	// Err is the error the step returned (or a timeout, or its panic).
	Err error
	// Panic is the value a panicking step raised, and Stack the stack it
	// panicked with; nil for a step that returned an error.
	Panic any
	Stack []byte
	// Final is set when this attempt ends the run (a permanent error, or
	// the last attempt): the step is dead-lettered and the run fails.
	// Otherwise the step is retried with backoff.
	Final bool
}

func (e *StepError) Error() string {
	return fmt.Sprintf("run %s step %d attempt %d/%d: %v", e.RunID, e.Step, e.Attempt, e.MaxAttempts, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// ErrorHandler is told of every failed step attempt once its settlement
// (retry or failure) has committed, to report step errors and panics to a
// service's own error tracking. An attempt whose run was cancelled while
// it ran did not fail, whatever it returned: the cancel ends the run, and
// the attempt is not reported (a panic is logged). It runs on the worker that ran the step,
// before the worker takes its next job: keep it quick, and do not block.
// A panic in it is recovered and logged.
type ErrorHandler func(ctx context.Context, e *StepError)

// WithErrorHandler sets a handler told of every failed step attempt (see
// ErrorHandler). Default: none; failures are logged either way
// (WithLogger).
func WithErrorHandler(h ErrorHandler) Option {
	return func(o *options) error {
		if h == nil {
			return invalid("error handler must not be nil")
		}
		o.errorHandler = h
		return nil
	}
}

// stepPanic is a recovered panic of a step.
type stepPanic struct {
	value any
	stack []byte
}

func (p *stepPanic) Error() string { return fmt.Sprintf("runtime: step panicked: %v", p.value) }

// reportStepError logs a failed attempt whose settlement committed and
// tells the ErrorHandler. A retry is logged at WARN, a failure that ends
// the run at ERROR; a panic carries its stack.
func (rt *Runtime) reportStepError(ctx context.Context, e *StepError) {
	attrs := []any{"run_id", e.RunID, "step", e.Step, "attempt", e.Attempt, "max_attempts", e.MaxAttempts,
		"job_id", e.JobID, "err", errtext.Bound(e.Err.Error())}
	if e.Panic != nil {
		attrs = append(attrs, "stack", string(e.Stack))
	}
	switch {
	case e.Final:
		rt.opts.logger.Error("stepwell: step failed; the run fails", attrs...)
	default:
		rt.opts.logger.Warn("stepwell: step failed; it will be retried", attrs...)
	}
	if rt.opts.errorHandler == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			rt.opts.logger.Error("stepwell: the error handler panicked", "run_id", e.RunID, "panic", fmt.Sprint(r))
		}
	}()
	rt.opts.errorHandler(ctx, e)
}

// logCancelledPanic logs the panic of an attempt whose run was cancelled
// while it ran (not reported: see ErrorHandler), with its stack.
func (rt *Runtime) logCancelledPanic(e *StepError) {
	if e.Panic != nil {
		rt.opts.logger.Warn("stepwell: step panicked after its run was cancelled", "run_id", e.RunID, "step", e.Step,
			"attempt", e.Attempt, "job_id", e.JobID, "err", errtext.Bound(e.Err.Error()), "stack", string(e.Stack))
	}
}

// stepError returns the StepError of an attempt of job's step that ended
// with err.
func stepError(s *steprunner.Step, err error) *StepError {
	e := &StepError{RunID: s.RunID, Step: s.Number, Attempt: s.Attempt, MaxAttempts: s.MaxAttempts, JobID: s.JobID, Err: err,
		Final: steprunner.IsPermanent(err) || s.Attempt >= s.MaxAttempts}
	var p *stepPanic
	if errors.As(err, &p) {
		e.Panic, e.Stack = p.value, p.stack
	}
	return e
}

// logHookError logs a failed delivery of a run's end to the terminal hook.
func logHookError(log *slog.Logger, runID string, attempt uint32, final bool, err error) {
	text := errtext.Bound(err.Error())
	if final {
		log.Error("stepwell: the terminal hook failed for good; the notification is dead-lettered", "run_id", runID, "attempt", attempt, "err", text)
		return
	}
	log.Warn("stepwell: the terminal hook failed; it will be retried", "run_id", runID, "attempt", attempt, "err", text)
}
