package steprunner

import (
	"fmt"
	"strconv"
	"time"

	"github.com/stepwell/stepwell/internal/stepmemo"
)

// OutcomeKind says what an Outcome asks the runtime to do. The zero value is
// invalid.
type OutcomeKind uint8

// Outcome kinds.
const (
	// KindContinue: run the next step (Continue, ContinueAfter).
	KindContinue OutcomeKind = iota + 1
	// KindSucceed: end the run Succeeded (Succeed).
	KindSucceed
	// KindFail: end the run Failed (Fail).
	KindFail
	// KindCancel: end the run Cancelled (Cancel).
	KindCancel
	// KindAwait: park the run until a signal or a timeout (AwaitSignal).
	KindAwait
	// KindSpawn: start child runs and park the run until they end (Spawn).
	KindSpawn
)

// String returns "continue", "succeed", "fail", "cancel", "await" or
// "spawn", and "invalid" for the zero value or "OutcomeKind(n)" for
// anything else.
func (k OutcomeKind) String() string {
	switch k {
	case 0:
		return "invalid"
	case KindContinue:
		return "continue"
	case KindSucceed:
		return "succeed"
	case KindFail:
		return "fail"
	case KindCancel:
		return "cancel"
	case KindAwait:
		return "await"
	case KindSpawn:
		return "spawn"
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is what a step asks the runtime to do next. Build one with
// Continue, ContinueAfter, Succeed, Fail, Cancel, AwaitSignal or Spawn
// (then, if needed, add run memory writes with WithMemo or route the next
// step with OnQueue); the zero Outcome
// is invalid (see IsZero). Outcome is a small immutable value: copy it freely.
type Outcome struct {
	kind   OutcomeKind
	data   []byte           // Continue payload or Succeed result
	delay  time.Duration    // ContinueAfter delay or AwaitSignal timeout
	reason string           // Fail or Cancel reason, or AwaitSignal name
	memo   []stepmemo.Write // WithMemo writes, in order; never appended in place
	queue  string           // OnQueue's name
	// children are Spawn's children.
	children []Child
	// onQueue: OnQueue was called (an empty name is then invalid).
	onQueue bool
}

// Continue asks the runtime to run the next step now, with payload as its
// Step.Payload. The Outcome keeps payload without copying it.
func Continue(payload []byte) Outcome {
	return Outcome{kind: KindContinue, data: payload}
}

// ContinueAfter asks the runtime to run the next step with payload, no
// sooner than delay from now (measured when the runtime settles the step).
// A negative delay is treated as 0, which is the same as Continue; one that
// reaches past 2262-04-11 (times are kept in nanoseconds since 1970) ends
// then. The Outcome keeps payload without copying it.
func ContinueAfter(payload []byte, delay time.Duration) Outcome {
	return Outcome{kind: KindContinue, data: payload, delay: max(delay, 0)}
}

// Succeed ends the run Succeeded; result becomes terminal.Outcome.Result
// (nil stays nil). The Outcome keeps result without copying it.
func Succeed(result []byte) Outcome {
	return Outcome{kind: KindSucceed, data: result}
}

// Fail ends the run Failed with reason as terminal.Outcome.Error. The step
// is acknowledged, not dead-lettered, and not retried.
func Fail(reason string) Outcome {
	return Outcome{kind: KindFail, reason: reason}
}

// Cancel ends the run Cancelled with reason as terminal.Outcome.Error. It
// takes precedence over a concurrent external cancel, whose reason is "".
func Cancel(reason string) Outcome {
	return Outcome{kind: KindCancel, reason: reason}
}

// AwaitSignal parks the run until a signal named name is delivered to it
// (Runtime.Signal) or timeout passes (0 or negative: no timeout). The step
// is acknowledged; while the run waits it holds no step slot, no lease and
// no queued job. Then step n+1 runs with Step.Signal saying what woke it:
//
//   - a signal: Step.Payload is the signal's payload and
//     Step.Signal = &SignalDelivery{Name: name}
//   - the timeout: Step.Payload is empty (len 0) and
//     Step.Signal = &SignalDelivery{Name: name, TimedOut: true}
//
// A signal of that name sent before the await (even before the run
// started) waits in the run's mailbox and is consumed at once, oldest
// first. The name must be 1 to 128 bytes of printable ASCII without '/'
// and without leading or trailing spaces; a step that returns an await on
// an invalid name fails its run (as Permanent would).
func AwaitSignal(name string, timeout time.Duration) Outcome {
	return Outcome{kind: KindAwait, reason: name, delay: max(timeout, 0)}
}

// SignalDelivery says what ended the await that preceded a step.
type SignalDelivery struct {
	// Name is the awaited signal name.
	Name string
	// TimedOut: the await's timeout passed before a signal of that name
	// arrived; Step.Payload is then empty.
	TimedOut bool
}

// SignalName returns the awaited signal's name for an AwaitSignal
// outcome, and "" for every other kind.
func (o Outcome) SignalName() string {
	if o.kind != KindAwait {
		return ""
	}
	return o.reason
}

// Timeout returns an AwaitSignal outcome's timeout (0: none), and 0 for
// every other kind.
func (o Outcome) Timeout() time.Duration {
	if o.kind != KindAwait {
		return 0
	}
	return o.delay
}

// Kind returns the kind of o; 0 (invalid) for the zero Outcome.
func (o Outcome) Kind() OutcomeKind { return o.kind }

// IsZero reports whether o is the zero (invalid) Outcome.
func (o Outcome) IsZero() bool { return o.kind == 0 }

// Payload returns the next step's payload for a Continue outcome, and nil
// for every other kind.
func (o Outcome) Payload() []byte {
	if o.kind != KindContinue {
		return nil
	}
	return o.data
}

// Result returns the run's result for a Succeed outcome, and nil for every
// other kind.
func (o Outcome) Result() []byte {
	if o.kind != KindSucceed {
		return nil
	}
	return o.data
}

// Delay returns how long after settlement the next step becomes due: the
// ContinueAfter delay (never negative), and 0 for every other kind.
func (o Outcome) Delay() time.Duration {
	if o.kind != KindContinue {
		return 0
	}
	return o.delay
}

// Reason returns the reason given to Fail or Cancel, and "" for every other
// kind.
func (o Outcome) Reason() string {
	if o.kind != KindFail && o.kind != KindCancel {
		return ""
	}
	return o.reason
}

// String describes o for logs, without payload bytes, for example
// "continue(12 bytes, after 1s)" or "fail(\"card declined\")"; OnQueue adds
// " on \"name\"", and memory writes "+memo(n)".
func (o Outcome) String() string {
	s := o.kindString()
	if q, ok := o.nextQueue(); ok {
		s += " on " + strconv.Quote(q)
	}
	if len(o.memo) > 0 {
		s += "+memo(" + strconv.Itoa(len(o.memo)) + ")"
	}
	return s
}

func (o Outcome) kindString() string {
	switch o.kind {
	case KindContinue:
		if o.delay > 0 {
			return fmt.Sprintf("continue(%d bytes, after %v)", len(o.data), o.delay)
		}
		return fmt.Sprintf("continue(%d bytes)", len(o.data))
	case KindSucceed:
		if o.data == nil {
			return "succeed(nil)"
		}
		return fmt.Sprintf("succeed(%d bytes)", len(o.data))
	case KindFail, KindCancel:
		return fmt.Sprintf("%s(%q)", o.kind, o.reason)
	case KindAwait:
		if o.delay > 0 {
			return fmt.Sprintf("await(%q, timeout %v)", o.reason, o.delay)
		}
		return fmt.Sprintf("await(%q)", o.reason)
	case KindSpawn:
		return fmt.Sprintf("spawn(%d children)", len(o.children))
	}
	return o.kind.String()
}
