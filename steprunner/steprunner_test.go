package steprunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

func TestOutcomeConstructors(t *testing.T) {
	payload := []byte("next")
	tests := []struct {
		name    string
		o       Outcome
		kind    OutcomeKind
		payload []byte
		result  []byte
		delay   time.Duration
		reason  string
		str     string
	}{
		{name: "continue", o: Continue(payload), kind: KindContinue, payload: payload, str: "continue(4 bytes)"},
		{name: "continue nil", o: Continue(nil), kind: KindContinue, str: "continue(0 bytes)"},
		{name: "continue after", o: ContinueAfter(payload, time.Second), kind: KindContinue, payload: payload, delay: time.Second, str: "continue(4 bytes, after 1s)"},
		{name: "continue after negative", o: ContinueAfter(payload, -time.Second), kind: KindContinue, payload: payload, str: "continue(4 bytes)"},
		{name: "succeed", o: Succeed([]byte("res")), kind: KindSucceed, result: []byte("res"), str: "succeed(3 bytes)"},
		{name: "succeed nil", o: Succeed(nil), kind: KindSucceed, str: "succeed(nil)"},
		{name: "fail", o: Fail("boom"), kind: KindFail, reason: "boom", str: `fail("boom")`},
		{name: "cancel", o: Cancel("stop"), kind: KindCancel, reason: "stop", str: `cancel("stop")`},
		{name: "zero", o: Outcome{}, kind: 0, str: "invalid"},
		{name: "await", o: AwaitSignal("approve", time.Hour), kind: KindAwait, str: `await("approve", timeout 1h0m0s)`},
		{name: "await no timeout", o: AwaitSignal("approve", -time.Second), kind: KindAwait, str: `await("approve")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			if o.Kind() != tt.kind {
				t.Errorf("Kind() = %v, want %v", o.Kind(), tt.kind)
			}
			if o.IsZero() != (tt.kind == 0) {
				t.Errorf("IsZero() = %v", o.IsZero())
			}
			if string(o.Payload()) != string(tt.payload) || (o.Payload() == nil) != (tt.payload == nil) {
				t.Errorf("Payload() = %q, want %q", o.Payload(), tt.payload)
			}
			if string(o.Result()) != string(tt.result) || (o.Result() == nil) != (tt.result == nil) {
				t.Errorf("Result() = %q, want %q", o.Result(), tt.result)
			}
			if o.Delay() != tt.delay {
				t.Errorf("Delay() = %v, want %v", o.Delay(), tt.delay)
			}
			if o.Reason() != tt.reason {
				t.Errorf("Reason() = %q, want %q", o.Reason(), tt.reason)
			}
			if o.String() != tt.str {
				t.Errorf("String() = %q, want %q", o.String(), tt.str)
			}
		})
	}
}

func TestSucceedEmptyResultIsNotNil(t *testing.T) {
	if r := Succeed([]byte{}).Result(); r == nil || len(r) != 0 {
		t.Fatalf("Succeed([]byte{}).Result() = %#v, want empty non-nil", r)
	}
}

func TestOutcomeKindString(t *testing.T) {
	want := map[OutcomeKind]string{
		0:            "invalid",
		KindContinue: "continue",
		KindSucceed:  "succeed",
		KindFail:     "fail",
		KindCancel:   "cancel",
		KindSpawn:    "spawn",
		9:            "OutcomeKind(9)",
	}
	for k, s := range want {
		if got := k.String(); got != s {
			t.Errorf("OutcomeKind(%d).String() = %q, want %q", uint8(k), got, s)
		}
	}
}

func TestPermanent(t *testing.T) {
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	if IsPermanent(nil) {
		t.Fatal("IsPermanent(nil)")
	}
	base := errors.New("bad input")
	if IsPermanent(base) {
		t.Fatal("plain error is permanent")
	}
	p := Permanent(base)
	if !IsPermanent(p) {
		t.Fatal("Permanent(err) is not permanent")
	}
	if p.Error() != "bad input" {
		t.Errorf("message = %q", p.Error())
	}
	if !errors.Is(p, base) {
		t.Error("errors.Is(Permanent(err), err) = false")
	}
	wrapped := fmt.Errorf("step 3: %w", p)
	if !IsPermanent(wrapped) {
		t.Error("wrapped permanent error not detected")
	}
	if !IsPermanent(errors.Join(io.EOF, p)) {
		t.Error("joined permanent error not detected")
	}
	if Permanent(p) != p {
		t.Error("Permanent is not idempotent")
	}
	if Permanent(wrapped) != wrapped {
		t.Error("Permanent re-wrapped an already permanent error")
	}
	var target *permanentError
	if !errors.As(wrapped, &target) || target.err != base {
		t.Error("errors.As does not reach the marker")
	}
}

func TestSentinels(t *testing.T) {
	for _, err := range []error{ErrRunCancelled, ErrLeaseLost, ErrShutdown, ErrStepTimeout, ErrInvalidRetryPolicy} {
		if got := err.Error(); len(got) < len("steprunner: ") || got[:len("steprunner: ")] != "steprunner: " {
			t.Errorf("%q does not start with the package name", got)
		}
		if IsPermanent(err) {
			t.Errorf("%v is permanent", err)
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrLeaseLost)
	if !errors.Is(context.Cause(ctx), ErrLeaseLost) {
		t.Fatal("context.Cause does not carry the sentinel")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal("ctx.Err() is not context.Canceled")
	}
}

func TestRunnerFunc(t *testing.T) {
	var r Runner = RunnerFunc(func(ctx context.Context, s *Step) (Outcome, error) {
		if s.Number == 0 {
			return Continue(s.Payload), nil
		}
		return Succeed(s.Payload), nil
	})
	o, err := r.RunStep(context.Background(), &Step{Payload: []byte("x")})
	if err != nil || o.Kind() != KindContinue || string(o.Payload()) != "x" {
		t.Fatalf("step 0: %v, %v", o, err)
	}
	o, err = r.RunStep(context.Background(), &Step{Number: 1, Payload: []byte("y")})
	if err != nil || o.Kind() != KindSucceed || string(o.Result()) != "y" {
		t.Fatalf("step 1: %v, %v", o, err)
	}
}

func TestLastAttempt(t *testing.T) {
	for _, tt := range []struct {
		attempt, max uint32
		want         bool
	}{{1, 3, false}, {3, 3, true}, {4, 3, true}, {1, 1, true}, {1, 0, false}} {
		s := &Step{Attempt: tt.attempt, MaxAttempts: tt.max}
		if got := s.LastAttempt(); got != tt.want {
			t.Errorf("Attempt %d of %d: LastAttempt() = %v", tt.attempt, tt.max, got)
		}
	}
}

// TestAwaitSignal: the await's name and timeout are read back by their
// own accessors, and do not leak into Reason or Delay.
func TestAwaitSignal(t *testing.T) {
	o := AwaitSignal("approve", time.Minute)
	if o.SignalName() != "approve" || o.Timeout() != time.Minute || o.Reason() != "" || o.Delay() != 0 {
		t.Fatalf("AwaitSignal: name %q timeout %v reason %q delay %v", o.SignalName(), o.Timeout(), o.Reason(), o.Delay())
	}
	if c := ContinueAfter(nil, time.Second); c.SignalName() != "" || c.Timeout() != 0 {
		t.Fatalf("ContinueAfter: name %q timeout %v", c.SignalName(), c.Timeout())
	}
	if KindAwait.String() != "await" {
		t.Fatalf("KindAwait = %q", KindAwait)
	}
}

func TestSpawnOutcome(t *testing.T) {
	cs := []Child{{Input: []byte("a")}, {RunID: "b"}}
	o := Spawn(cs).OnQueue("gpu")
	if o.Kind() != KindSpawn || len(o.Children()) != 2 || o.Payload() != nil || o.String() != `spawn(2 children) on "gpu"` {
		t.Fatalf("Spawn = %v, kind %v, %d children", o, o.Kind(), len(o.Children()))
	}
	if q, ok := o.nextQueue(); !ok || q != "gpu" {
		t.Fatalf("NextQueue = %q, %v", q, ok)
	}
	if Continue(nil).Children() != nil {
		t.Fatal("Continue has children")
	}
	if id := DeriveChildRunID("order-7", 2, 10); id != "order-7.s2.10" {
		t.Fatalf("DeriveChildRunID = %q", id)
	}
}
