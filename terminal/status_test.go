package terminal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestStatusString(t *testing.T) {
	for s, want := range map[Status]string{
		0:         "Status(0)",
		Succeeded: "succeeded",
		Failed:    "failed",
		Cancelled: "cancelled",
		4:         "Status(4)",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", uint8(s), got, want)
		}
		if s.Valid() != !strings.HasPrefix(want, "Status(") {
			t.Errorf("Status(%d).Valid() = %v", uint8(s), s.Valid())
		}
	}
	if Succeeded != 1 || Failed != 2 || Cancelled != 3 {
		t.Fatal("status values changed")
	}
}

func TestNoop(t *testing.T) {
	if !IsNoop(Noop) {
		t.Error("IsNoop(Noop) = false")
	}
	if !IsNoop(nil) {
		t.Error("IsNoop(nil) = false")
	}
	if err := Noop.OnTermination(context.Background(), Outcome{}); err != nil {
		t.Error(err)
	}
	if IsNoop(HookFunc(func(context.Context, Outcome) error { return nil })) {
		t.Error("a HookFunc is Noop")
	}
	w, err := NewWebhook(WebhookConfig{URL: "https://example.com", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	if IsNoop(w) {
		t.Error("a Webhook is Noop")
	}
}

func TestHookFunc(t *testing.T) {
	var got Outcome
	want := errors.New("later")
	var h Hook = HookFunc(func(_ context.Context, o Outcome) error { got = o; return want })
	o := Outcome{RunID: "r", Status: Failed, Error: "boom"}
	if err := h.OnTermination(context.Background(), o); err != want {
		t.Fatalf("err = %v", err)
	}
	if got.RunID != "r" || got.Error != "boom" {
		t.Fatalf("got %+v", got)
	}
}

func TestDeliveryErrorHelpers(t *testing.T) {
	cause := errors.New("reset")
	tests := []struct {
		err       error
		permanent bool
		after     time.Duration
		msg       string
	}{
		{err: nil},
		{err: cause},
		{err: &DeliveryError{Err: cause}, msg: "terminal: webhook delivery failed (retryable): reset"},
		{err: &DeliveryError{StatusCode: 503, RetryAfter: 2 * time.Second, Err: cause}, after: 2 * time.Second,
			msg: "terminal: webhook delivery failed with status 503 (retryable after 2s): reset"},
		{err: fmt.Errorf("notify: %w", &DeliveryError{StatusCode: 429, RetryAfter: time.Minute}), after: time.Minute,
			msg: "notify: terminal: webhook delivery failed with status 429 (retryable after 1m0s)"},
		{err: &DeliveryError{StatusCode: 400, Permanent: true, Err: cause}, permanent: true,
			msg: "terminal: webhook delivery failed with status 400 (permanent): reset"},
		// A permanent error never asks for a retry delay.
		{err: &DeliveryError{Permanent: true, RetryAfter: time.Second}, permanent: true,
			msg: "terminal: webhook delivery failed (permanent)"},
	}
	for i, tt := range tests {
		if got := IsPermanent(tt.err); got != tt.permanent {
			t.Errorf("%d: IsPermanent = %v", i, got)
		}
		d, ok := RetryAfter(tt.err)
		if d != tt.after || ok != (tt.after > 0) {
			t.Errorf("%d: RetryAfter = %v, %v; want %v", i, d, ok, tt.after)
		}
		if tt.msg != "" && tt.err.Error() != tt.msg {
			t.Errorf("%d: message %q, want %q", i, tt.err.Error(), tt.msg)
		}
	}
	if !errors.Is(&DeliveryError{Err: cause}, cause) {
		t.Error("DeliveryError does not unwrap")
	}
}

func TestSentinelMessages(t *testing.T) {
	for _, err := range []error{ErrInvalidSecret, ErrInvalidURL, ErrInvalidConfig, ErrForbiddenDestination, ErrRedirectRefused, ErrInvalidOutcome} {
		if !strings.HasPrefix(err.Error(), "terminal: ") {
			t.Errorf("%q does not start with the package name", err)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 500_000_000, time.UTC)
	tests := map[string]time.Duration{
		"":                                  0,
		"0":                                 0,
		"1":                                 time.Second,
		" 30 ":                              30 * time.Second,
		"86400":                             24 * time.Hour,
		"86401":                             24 * time.Hour,
		"-5":                                0,
		"1.5":                               0,
		"5s":                                0,
		"Wed, 04 Mar 2026 05:06:08 GMT":     time.Second,                 // 0.5s, rounded up
		"Wed, 04 Mar 2026 05:06:07 GMT":     0,                           // past
		"Wednesday, 04-Mar-26 05:08:08 GMT": 2*time.Minute + time.Second, // RFC 850
		"Wed Mar  4 06:06:08 2026":          time.Hour + time.Second,
		"Thu, 04 Mar 2027 05:06:08 GMT":     24 * time.Hour,
		"tomorrow":                          0,
		"Wed, 01 OCt 2700 0:00:00 GMT":      24 * time.Hour, // fuzz: saturating Sub
	}
	for in, want := range tests {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}
