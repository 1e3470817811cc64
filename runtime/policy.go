package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
)

// This file holds a run's execution policy: its step timeout, its retry
// policy and its scheduled start (RunSpec.StepTimeout, Retry, StartAt),
// all kept in the run record so that they hold across restarts.

// validateSpecPolicy checks the policy fields of a RunSpec.
func validateSpecPolicy(spec *RunSpec) error {
	if spec.StepTimeout < 0 {
		return fmt.Errorf("%w: StepTimeout %v is negative", ErrInvalidRunSpec, spec.StepTimeout)
	}
	if spec.Retry != nil {
		if err := spec.Retry.Validate(); err != nil {
			return fmt.Errorf("%w: Retry: %w", ErrInvalidRunSpec, err)
		}
	}
	return nil
}

// setPolicy records the policy fields of spec in rec.
func setPolicy(rec *kvrecord.Run, spec *RunSpec) {
	rec.StepTimeout = int64(spec.StepTimeout)
	rec.StartAt = format.UnixNano(spec.StartAt)
	if p := spec.Retry; p != nil {
		rec.RetryMaxAttempts, rec.RetryInitialBackoff, rec.RetryMaxBackoff = p.MaxAttempts, int64(p.InitialBackoff), int64(p.MaxBackoff)
		rec.RetryMultiplier, rec.RetryJitter = p.Multiplier, p.Jitter
	}
}

// retryPolicy returns the retry policy a run record holds (the zero
// policy if none).
func retryPolicy(rec *kvrecord.Run) steprunner.RetryPolicy {
	return steprunner.RetryPolicy{
		MaxAttempts: rec.RetryMaxAttempts, InitialBackoff: time.Duration(rec.RetryInitialBackoff),
		MaxBackoff: time.Duration(rec.RetryMaxBackoff), Multiplier: rec.RetryMultiplier, Jitter: rec.RetryJitter,
	}
}

// policyDiff adds to diff what of spec's policy fields differs from the
// run record's submission.
func policyDiff(diff []string, rec *kvrecord.Run, spec *RunSpec) []string {
	if rec.StepTimeout != int64(spec.StepTimeout) {
		diff = append(diff, fmt.Sprintf("StepTimeout (%v, not %v)", time.Duration(rec.StepTimeout), spec.StepTimeout))
	}
	if start := format.UnixNano(spec.StartAt); rec.StartAt != start {
		diff = append(diff, fmt.Sprintf("StartAt (%s, not %s)", startText(rec.StartAt), startText(start)))
	}
	var want steprunner.RetryPolicy
	if spec.Retry != nil {
		want = *spec.Retry
	}
	if got := retryPolicy(rec); got != want {
		diff = append(diff, fmt.Sprintf("Retry (%+v, not %+v)", got, want))
	}
	return diff
}

func startText(ns int64) string {
	if ns == 0 {
		return "none"
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// maxAttempts is the attempt limit of the run's steps: the retry policy's,
// else MaxAttemptsPerStep; 0 leaves it to the queue.
func maxAttempts(rec *kvrecord.Run) uint32 {
	if rec.RetryMaxAttempts != 0 {
		return rec.RetryMaxAttempts
	}
	return rec.MaxAttempts
}

// maxRetryDelay bounds a RetryAfter delay, so that a huge one cannot
// overflow the queue's due time.
const maxRetryDelay = 365 * 24 * time.Hour

// retryDelay is how long after a failed attempt the step is retried: the
// error's RetryAfter delay, else the run's backoff; 0 leaves it to the
// queue's backoff.
func retryDelay(rec *kvrecord.Run, job *queue.Job, stepErr error) time.Duration {
	if d, ok := steprunner.RetryAfterDelay(stepErr); ok {
		return min(d, maxRetryDelay)
	}
	return retryPolicy(rec).Backoff(job.Attempt)
}

// stepTimeout is the run's per-attempt timeout: its own, else this
// Runtime's default (0: none).
func (rt *Runtime) stepTimeout(rec *kvrecord.Run) time.Duration {
	if rec.StepTimeout > 0 {
		return time.Duration(rec.StepTimeout)
	}
	return rt.opts.stepTimeout
}

// timeoutError is the error of an attempt that ran past its step timeout.
func timeoutError(d time.Duration, attempt uint32) error {
	return fmt.Errorf("%w after %v (attempt %d)", steprunner.ErrStepTimeout, d, attempt)
}

// runWithTimeout runs the step under its timeout d (0: none): the step's
// ctx gets the deadline, with cause steprunner.ErrStepTimeout. An attempt
// that returns after its deadline has timed out, whatever it returned. One
// that has not returned by then is not waited for: the attempt is settled
// at once as timed out (or as the run's cancel, lost lease or shutdown
// says), and its result, when it comes, is discarded and logged.
func (rt *Runtime) runWithTimeout(ctx context.Context, s *steprunner.Step, d time.Duration) (steprunner.Outcome, error) {
	if d <= 0 {
		return rt.callRunner(ctx, s)
	}
	// expire ends ctx at the deadline even if its own timer has not fired
	// yet when this one does, so that the abandoned step sees the cause.
	ctx, expire := context.WithCancelCause(ctx)
	ctx, cancel := context.WithTimeoutCause(ctx, d, steprunner.ErrStepTimeout)
	type result struct {
		out  steprunner.Outcome
		err  error
		late bool // returned after the deadline
	}
	done := make(chan result, 1)
	go func() {
		defer expire(context.Canceled)
		defer cancel()
		sent := false
		defer func() {
			if !sent { // the step called runtime.Goexit: its attempt failed
				done <- result{err: errStepGoexit}
			}
		}()
		out, err := rt.callRunner(ctx, s)
		done <- result{out, err, errors.Is(context.Cause(ctx), steprunner.ErrStepTimeout)}
		sent = true
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	var r result
	select {
	case r = <-done:
	case <-timer.C:
		select {
		case r = <-done:
		default:
			expire(steprunner.ErrStepTimeout)
			start := time.Now()
			go func() {
				r := <-done
				rt.opts.logger.Warn("stepwell: a step returned after its timeout: its result is discarded",
					"run_id", s.RunID, "step", s.Number, "attempt", s.Attempt, "timeout", d,
					"late_by", time.Since(start), "returned", lateText(r.out, r.err))
			}()
			return steprunner.Outcome{}, timeoutError(d, s.Attempt)
		}
	}
	if r.late {
		return steprunner.Outcome{}, timeoutError(d, s.Attempt)
	}
	return r.out, r.err
}

// errStepGoexit is the failure of an attempt whose step called
// runtime.Goexit (testing.T.FailNow does) instead of returning, seen where
// the step runs on a goroutine of its own (a step timeout).
var errStepGoexit = errors.New("runtime: the step called runtime.Goexit instead of returning")

func lateText(out steprunner.Outcome, err error) string {
	if err != nil {
		return errtext.Bound("error: " + strings.SplitN(err.Error(), "\n", 2)[0])
	}
	return errtext.Bound(out.String())
}
