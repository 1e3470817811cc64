package steprunner

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

func TestRetryPolicyValidate(t *testing.T) {
	ms := time.Millisecond
	valid := []RetryPolicy{
		{},
		{MaxAttempts: 3},
		{InitialBackoff: ms},
		{InitialBackoff: ms, MaxBackoff: ms, Multiplier: 1, Jitter: 1},
		{InitialBackoff: 10 * ms, MaxBackoff: time.Hour, Multiplier: 3.5, Jitter: 0.25},
	}
	for _, p := range valid {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v, want nil", p, err)
		}
	}
	invalid := map[string]RetryPolicy{
		"InitialBackoff": {InitialBackoff: -ms},
		"MaxBackoff":     {InitialBackoff: 2 * ms, MaxBackoff: ms},
		"Multiplier":     {InitialBackoff: ms, Multiplier: 0.5},
		"Jitter":         {InitialBackoff: ms, Jitter: 1.5},
	}
	more := []struct {
		field string
		p     RetryPolicy
	}{
		{"MaxBackoff", RetryPolicy{MaxBackoff: -ms}},
		{"MaxBackoff", RetryPolicy{MaxBackoff: ms}}, // without InitialBackoff
		{"Multiplier", RetryPolicy{Multiplier: 2}},
		{"Jitter", RetryPolicy{Jitter: 0.1}},
		{"Multiplier", RetryPolicy{InitialBackoff: ms, Multiplier: math.NaN()}},
		{"Multiplier", RetryPolicy{InitialBackoff: ms, Multiplier: math.Inf(1)}},
		{"Jitter", RetryPolicy{InitialBackoff: ms, Jitter: math.NaN()}},
		{"Jitter", RetryPolicy{InitialBackoff: ms, Jitter: -0.1}},
	}
	for field, p := range invalid {
		more = append(more, struct {
			field string
			p     RetryPolicy
		}{field, p})
	}
	for _, tt := range more {
		err := tt.p.Validate()
		var pe *RetryPolicyError
		if !errors.As(err, &pe) || pe.Field != tt.field || !errors.Is(err, ErrInvalidRetryPolicy) {
			t.Errorf("%+v: Validate() = %v, want a *RetryPolicyError for %s", tt.p, err, tt.field)
		}
	}
}

func TestRetryPolicyBackoff(t *testing.T) {
	ms := time.Millisecond
	p := RetryPolicy{InitialBackoff: 10 * ms, MaxBackoff: 100 * ms, Multiplier: 3}
	for attempt, want := range map[uint32]time.Duration{0: 10 * ms, 1: 10 * ms, 2: 30 * ms, 3: 90 * ms, 4: 100 * ms, 1000: 100 * ms} {
		if got := p.Backoff(attempt); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", attempt, got, want)
		}
	}
	// Defaults: multiplier 2, cap 5 minutes.
	d := RetryPolicy{InitialBackoff: time.Second}
	if got := d.Backoff(3); got != 4*time.Second {
		t.Errorf("default multiplier: Backoff(3) = %v, want 4s", got)
	}
	if got := d.Backoff(100); got != DefaultRetryMaxBackoff {
		t.Errorf("default cap: Backoff(100) = %v, want %v", got, DefaultRetryMaxBackoff)
	}
	if got := (RetryPolicy{InitialBackoff: time.Hour}).Backoff(2); got != time.Hour {
		t.Errorf("InitialBackoff above the default cap: Backoff(2) = %v, want 1h", got)
	}
	// No InitialBackoff: the queue's backoff applies.
	if got := (RetryPolicy{MaxAttempts: 3}).Backoff(2); got != 0 {
		t.Errorf("no InitialBackoff: Backoff = %v, want 0", got)
	}
	// Jitter takes up to its fraction off, never adds.
	j := RetryPolicy{InitialBackoff: 100 * ms, Multiplier: 1, Jitter: 0.5}
	for _, tt := range []struct {
		r    float64
		want time.Duration
	}{{0, 100 * ms}, {0.5, 75 * ms}, {0.999999, 50*ms + 50*time.Nanosecond}} {
		if got := j.backoff(1, func() float64 { return tt.r }); got != tt.want {
			t.Errorf("jitter with random %v: %v, want %v", tt.r, got, tt.want)
		}
	}
	for range 1000 {
		if got := j.Backoff(1); got < 50*ms || got > 100*ms {
			t.Fatalf("Backoff with Jitter 0.5 = %v, want within [50ms, 100ms]", got)
		}
	}
	// Full jitter never yields 0 (which would mean "the queue's backoff").
	if got := (RetryPolicy{InitialBackoff: ms, Jitter: 1}).backoff(1, func() float64 { return 1 }); got <= 0 {
		t.Errorf("full jitter: %v, want > 0", got)
	}
}

func TestRetryAfter(t *testing.T) {
	if RetryAfter(nil, time.Second) != nil {
		t.Fatal("RetryAfter(nil) != nil")
	}
	base := errors.New("429 too many requests")
	if RetryAfter(base, 0) != base || RetryAfter(base, -time.Second) != base {
		t.Fatal("RetryAfter with d <= 0 did not return err unchanged")
	}
	err := fmt.Errorf("call api: %w", RetryAfter(base, 3*time.Second))
	if d, ok := RetryAfterDelay(err); !ok || d != 3*time.Second {
		t.Fatalf("RetryAfterDelay = %v, %v; want 3s, true", d, ok)
	}
	if !errors.Is(err, base) || err.Error() != "call api: 429 too many requests" || IsPermanent(err) {
		t.Fatalf("RetryAfter changed the error: %v", err)
	}
	if _, ok := RetryAfterDelay(base); ok {
		t.Fatal("RetryAfterDelay of a plain error: ok")
	}
	if _, ok := RetryAfterDelay(nil); ok {
		t.Fatal("RetryAfterDelay(nil): ok")
	}
	// Permanent wins, whichever wraps the other.
	for _, e := range []error{Permanent(RetryAfter(base, time.Second)), RetryAfter(Permanent(base), time.Second)} {
		if !IsPermanent(e) {
			t.Errorf("%v: not permanent", e)
		}
		if _, ok := RetryAfterDelay(e); ok {
			t.Errorf("%v: RetryAfterDelay ok for a permanent error", e)
		}
	}
}
