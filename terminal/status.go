package terminal

import (
	"context"
	"strconv"
	"time"
)

// Status is how a run ended.
type Status uint8

// Terminal statuses. The zero Status is invalid.
const (
	// Succeeded: a step returned steprunner.Succeed.
	Succeeded Status = iota + 1
	// Failed: a step returned steprunner.Fail, a permanent error, or a
	// transient error on its last attempt.
	Failed
	// Cancelled: a step returned steprunner.Cancel, or the run was cancelled
	// from outside.
	Cancelled
)

// String returns "succeeded", "failed" or "cancelled", and "Status(n)" for
// any other value.
func (s Status) String() string {
	switch s {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is Succeeded, Failed or Cancelled.
func (s Status) Valid() bool { return s >= Succeeded && s <= Cancelled }

// Outcome describes how a run ended. The runtime builds it when the run's
// termination commits and hands the same value to every delivery attempt.
type Outcome struct {
	RunID  string
	Status Status
	// Result is the run's result (steprunner.Succeed); nil otherwise.
	Result []byte
	// Error is the Fail or Cancel reason or the failing step's error; ""
	// for an external cancel and for success.
	Error string
	// Headers are the submitter's headers, reserved "workflow." keys
	// stripped.
	Headers map[string]string
	// FinalStep is the number of the step that settled the run.
	FinalStep uint32
	// EndedAt is when the run's termination committed. The runtime sets it
	// once and keeps it across delivery attempts; a zero EndedAt is
	// reported by the webhook as the time of the attempt.
	EndedAt time.Time
	// Retries is how many times the run was retried (runtime.Runtime.Retry)
	// before this termination; 0 for a run that was never retried. Each
	// termination of a retried run is a notification of its own.
	Retries uint32
}

// Hook observes the end of runs. The runtime calls OnTermination at least
// once for every run whose termination committed, and for no other run;
// calls may repeat (after an error, or after a crash between a successful
// call and its acknowledgement), so implementations should be idempotent.
// Key on the termination, not on the run alone: a failed or cancelled run
// that is retried (runtime.Runtime.Retry) terminates again, and that is a
// new notification with a higher Outcome.Retries and a later EndedAt, whose
// outcome may differ. (Outcome.RunID, Outcome.Retries) identifies one
// termination, as does the webhook-id. OnTermination may be called from
// several goroutines at once.
type Hook interface {
	// OnTermination is told that a run ended. A non-nil error makes the
	// runtime retry the delivery later with backoff, unless IsPermanent
	// reports it permanent, in which case the notification is
	// dead-lettered. RetryAfter lets an error ask for a delay.
	OnTermination(ctx context.Context, outcome Outcome) error
}

// HookFunc adapts an ordinary function to the Hook interface.
type HookFunc func(ctx context.Context, outcome Outcome) error

// OnTermination calls f(ctx, outcome).
func (f HookFunc) OnTermination(ctx context.Context, outcome Outcome) error {
	return f(ctx, outcome)
}

// noopHook is Noop's type. It is unexported so that IsNoop can recognise
// Noop by type; no other value has it.
type noopHook struct{}

func (noopHook) OnTermination(context.Context, Outcome) error { return nil }

// Noop is a Hook that observes nothing. The runtime recognises it (see
// IsNoop) and then enqueues no notification at all, so a run's end costs
// nothing beyond its terminal record.
var Noop Hook = noopHook{}

// IsNoop reports whether h is Noop or nil; neither observes anything.
func IsNoop(h Hook) bool {
	if h == nil {
		return true
	}
	_, ok := h.(noopHook)
	return ok
}
