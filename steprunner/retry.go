package steprunner

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how often and how soon the steps of one run are retried
// after a failed attempt (a transient error, a timeout). Set it as
// runtime.RunSpec.Retry; it is stored with the run and applies to every
// step of it, across restarts. The zero value of each field means its
// default, so the zero RetryPolicy is the same as none.
//
// The delay before the retry that follows failed attempt n (1-based) is
//
//	d = min(InitialBackoff * Multiplier^(n-1), MaxBackoff)
//
// minus a random fraction of up to Jitter of it: a delay in
// [d*(1-Jitter), d]. The queue's own backoff (queue.WithRetryBackoff) is
// this formula with Multiplier 2 and Jitter 0.5.
type RetryPolicy struct {
	// MaxAttempts bounds each step's attempts, the first included. 0:
	// runtime.RunSpec.MaxAttemptsPerStep, or if that is 0 too the queue's
	// default (queue.WithMaxAttempts, 5 by default). When both are set,
	// MaxAttempts wins.
	MaxAttempts uint32
	// InitialBackoff is the delay after the first failed attempt. 0: the
	// queue's backoff times the retries (queue.WithRetryBackoff: 1s
	// doubling up to 5m by default), and MaxBackoff, Multiplier and Jitter
	// must be 0 too.
	InitialBackoff time.Duration
	// MaxBackoff caps the delay. 0: 5 minutes, or InitialBackoff if that is
	// longer. Must not be below InitialBackoff.
	MaxBackoff time.Duration
	// Multiplier grows the delay after each failed attempt. 0: 2. Must be
	// at least 1 (1: a constant delay).
	Multiplier float64
	// Jitter is the fraction of each delay that is random, from 0 to 1
	// (1: anything from 0 to the delay). 0: none, every delay is exact.
	Jitter float64
}

// Default values of RetryPolicy fields left zero.
const (
	DefaultRetryMaxBackoff = 5 * time.Minute
	DefaultRetryMultiplier = 2.0
)

// ErrInvalidRetryPolicy is matched (errors.Is) by every *RetryPolicyError.
var ErrInvalidRetryPolicy = errors.New("steprunner: invalid retry policy")

// RetryPolicyError says which field of a RetryPolicy is invalid and why.
// Submitting the same policy again cannot help.
type RetryPolicyError struct {
	Field  string // "InitialBackoff", "MaxBackoff", "Multiplier" or "Jitter"
	Reason string
}

func (e *RetryPolicyError) Error() string {
	return "steprunner: invalid retry policy: " + e.Field + ": " + e.Reason
}

// Is reports whether target is ErrInvalidRetryPolicy.
func (e *RetryPolicyError) Is(target error) bool { return target == ErrInvalidRetryPolicy }

// Validate returns a *RetryPolicyError for the first invalid field of p,
// or nil.
func (p RetryPolicy) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &RetryPolicyError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case p.InitialBackoff < 0:
		return bad("InitialBackoff", "%v is negative", p.InitialBackoff)
	case p.MaxBackoff < 0:
		return bad("MaxBackoff", "%v is negative", p.MaxBackoff)
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier != 0 && p.Multiplier < 1:
		return bad("Multiplier", "%v: want 0 (default 2) or a finite value of at least 1", p.Multiplier)
	case math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1:
		return bad("Jitter", "%v: want a fraction from 0 to 1", p.Jitter)
	case p.InitialBackoff == 0 && p.MaxBackoff != 0:
		return bad("MaxBackoff", "set without InitialBackoff (0 leaves the backoff to the queue)")
	case p.InitialBackoff == 0 && p.Multiplier != 0:
		return bad("Multiplier", "set without InitialBackoff (0 leaves the backoff to the queue)")
	case p.InitialBackoff == 0 && p.Jitter != 0:
		return bad("Jitter", "set without InitialBackoff (0 leaves the backoff to the queue)")
	case p.MaxBackoff != 0 && p.MaxBackoff < p.InitialBackoff:
		return bad("MaxBackoff", "%v is below InitialBackoff %v", p.MaxBackoff, p.InitialBackoff)
	}
	return nil
}

// IsZero reports whether every field of p is zero: the same as no policy.
func (p RetryPolicy) IsZero() bool { return p == RetryPolicy{} }

// Backoff returns the delay before the retry that follows failed attempt
// number attempt (1-based), per the formula in the type's documentation,
// jitter drawn at random. It returns 0 when InitialBackoff is 0: the
// queue's backoff applies. p must be valid (Validate).
func (p RetryPolicy) Backoff(attempt uint32) time.Duration {
	return p.backoff(attempt, rand.Float64)
}

func (p RetryPolicy) backoff(attempt uint32, random func() float64) time.Duration {
	if p.InitialBackoff <= 0 {
		return 0
	}
	maxD := p.MaxBackoff
	if maxD == 0 {
		maxD = max(DefaultRetryMaxBackoff, p.InitialBackoff)
	}
	mult := p.Multiplier
	if mult == 0 {
		mult = DefaultRetryMultiplier
	}
	d := float64(p.InitialBackoff)
	for i := uint32(1); i < attempt && d < float64(maxD); i++ {
		d *= mult
	}
	d = min(d, float64(maxD))
	if p.Jitter > 0 {
		d -= d * p.Jitter * random()
	}
	return max(time.Duration(d), 1)
}

// retryAfterError carries the delay of RetryAfter.
type retryAfterError struct {
	err error
	d   time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks a transient err with the delay the failed call asked
// for (the Retry-After of an HTTP 429 or 503): the step is retried no
// earlier than d after the runtime settles the attempt, instead of after
// the run's backoff. The attempt still counts: on the step's last attempt
// the run fails as for any error. A permanent error stays permanent
// (Permanent wins, whichever wraps the other): the step is dead-lettered
// at once.
//
// RetryAfter returns nil for a nil err and err unchanged for d <= 0. The
// returned error has err's message and unwraps to err.
func RetryAfter(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &retryAfterError{err: err, d: d}
}

// RetryAfterDelay returns the delay of the outermost RetryAfter in err's
// chain. ok is false when there is none, and when err is permanent (see
// RetryAfter).
func RetryAfterDelay(err error) (d time.Duration, ok bool) {
	var ra *retryAfterError
	if !errors.As(err, &ra) || IsPermanent(err) {
		return 0, false
	}
	return ra.d, true
}
