package terminal

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Errors. Each says whether retrying can help.
var (
	// ErrInvalidSecret is wrapped by the ConfigError NewWebhook returns for
	// a missing or malformed WebhookConfig.Secret. Not retryable.
	ErrInvalidSecret = errors.New("terminal: invalid webhook secret")

	// ErrInvalidURL: a webhook URL (WebhookConfig.URL, or a run's
	// "callback_url" header) is not an absolute http or https URL with a
	// host. From NewWebhook it is wrapped by a ConfigError; from a delivery,
	// by a permanent DeliveryError. Not retryable.
	ErrInvalidURL = errors.New("terminal: invalid webhook URL")

	// ErrInvalidConfig is wrapped by a ConfigError for any other invalid
	// WebhookConfig field (a negative Timeout). Not retryable.
	ErrInvalidConfig = errors.New("terminal: invalid webhook config")

	// ErrForbiddenDestination: the default client refused to connect to a
	// loopback, private, link-local, unspecified, multicast or otherwise
	// non-public address (see WebhookConfig.AllowPrivateNetworks). Wrapped
	// by a permanent DeliveryError: retrying the same URL cannot help. From
	// NewWebhook, wrapped by a ConfigError: WebhookConfig.URL names such an
	// address literally (an IP literal or "localhost"). Not retryable.
	ErrForbiddenDestination = errors.New("terminal: webhook destination address not allowed")

	// ErrRedirectRefused: the default client refused to follow a redirect:
	// to another host or port, from https to http, one that would turn the
	// POST into a GET (301, 302, 303), or a fourth one in a row. Wrapped by
	// a permanent DeliveryError. Not retryable.
	ErrRedirectRefused = errors.New("terminal: webhook redirect refused")

	// ErrInvalidOutcome: OnTermination got an Outcome without a RunID or
	// with an invalid Status, a bug in the caller. Wrapped by a permanent
	// DeliveryError. Not retryable.
	ErrInvalidOutcome = errors.New("terminal: invalid outcome")
)

// ConfigError reports an invalid WebhookConfig field. It unwraps to
// ErrInvalidSecret, ErrInvalidURL, ErrForbiddenDestination or
// ErrInvalidConfig. Not retryable.
type ConfigError struct {
	Field  string // "URL", "Secret" or "Timeout"
	Reason string // what is wrong, never the secret itself
	Err    error  // the sentinel
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%v: %s: %s", e.Err, e.Field, e.Reason)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// DeliveryError reports a failed webhook delivery and how to retry it.
//
// A Hook of one's own may return a DeliveryError too, to mark an error
// permanent or to ask for a delay.
type DeliveryError struct {
	// StatusCode is the HTTP status of the response; 0 when there was none
	// (network error, timeout, refused destination or invalid URL).
	StatusCode int
	// RetryAfter is the delay the receiver asked for with a Retry-After
	// header on a retryable response (capped at 24 hours); 0 when it gave
	// none, in which case the caller's own backoff applies.
	RetryAfter time.Duration
	// Permanent is true when retrying the delivery cannot help: a 4xx
	// response other than 408 and 429, a redirect that was refused, an
	// invalid URL or a forbidden destination. Network errors, timeouts,
	// 408, 429 and 5xx responses are retryable.
	Permanent bool
	// Err is the underlying cause.
	Err error
}

func (e *DeliveryError) Error() string {
	var b strings.Builder
	b.WriteString("terminal: webhook delivery failed")
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " with status %d", e.StatusCode)
	}
	if e.Permanent {
		b.WriteString(" (permanent)")
	} else if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retryable after %v)", e.RetryAfter)
	} else {
		b.WriteString(" (retryable)")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// RetryAfter returns the delay a failed delivery asked for: the RetryAfter
// of the first DeliveryError in err's chain, when it is positive and the
// error is not permanent. ok is false otherwise; the caller then uses its
// own backoff.
func RetryAfter(err error) (d time.Duration, ok bool) {
	var de *DeliveryError
	if !errors.As(err, &de) || de.Permanent || de.RetryAfter <= 0 {
		return 0, false
	}
	return de.RetryAfter, true
}

// IsPermanent reports whether err is, or wraps, a DeliveryError marked
// Permanent: the runtime dead-letters the notification instead of retrying
// it. It is false for nil and for every other error.
func IsPermanent(err error) bool {
	var de *DeliveryError
	return errors.As(err, &de) && de.Permanent
}

// maxRetryAfter caps a receiver's Retry-After, so a hostile or broken
// receiver cannot park a notification for years.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter parses a Retry-After header value: delay-seconds or an
// HTTP-date (RFC 9110 section 10.2.3). It returns 0 for an absent,
// malformed or past value, and caps the result at maxRetryAfter.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		var secs int64
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				return 0
			}
			secs = secs*10 + int64(c-'0')
			if secs > int64(maxRetryAfter/time.Second) {
				return maxRetryAfter
			}
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now) // saturates for dates centuries away
	switch {
	case d <= 0:
		return 0
	case d >= maxRetryAfter:
		return maxRetryAfter
	}
	// Round up: never retry before the time the receiver named.
	return (d + time.Second - 1).Truncate(time.Second)
}
