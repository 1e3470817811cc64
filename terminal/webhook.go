package terminal

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Webhook constants. Part of the wire contract with receivers: do not change.
const (
	// CallbackURLHeader is the run header that names the endpoint when
	// WebhookConfig.URL is "".
	CallbackURLHeader = "callback_url"

	// UserAgent is sent with every delivery.
	UserAgent = "stepwell-webhook/1"

	// DefaultWebhookTimeout bounds one delivery attempt when
	// WebhookConfig.Timeout is 0.
	DefaultWebhookTimeout = 10 * time.Second

	secretPrefix    = "whsec_"
	minSecretBytes  = 24 // Standard Webhooks: "between 24 bytes and 64 bytes"
	maxSecretBytes  = 64
	idPrefix        = "msg_"
	idDomain        = "stepwell/webhook-id/v1"
	maxSnippetBytes = 4 << 10  // response body read into an error
	maxDrainBytes   = 64 << 10 // response body read and discarded for connection reuse
	maxSnippetShown = 512      // of the snippet, quoted into the error message
)

// WebhookConfig configures NewWebhook.
type WebhookConfig struct {
	// URL is the fixed endpoint every notification is POSTed to: an
	// absolute http or https URL. "" means each run's "callback_url" header
	// (CallbackURLHeader) names its endpoint, and runs without one are not
	// notified. Defaults to "".
	URL string
	// Secret is the Standard Webhooks signing secret, "whsec_" followed by
	// the standard base64 encoding of 24 to 64 random bytes. Required:
	// every delivery is signed.
	Secret string
	// Timeout bounds one delivery attempt (connect, send, response). 0
	// means DefaultWebhookTimeout (10 seconds); negative is an error.
	Timeout time.Duration
	// AllowPrivateNetworks lets the default client connect to loopback,
	// private, link-local and other non-public addresses, for tests and
	// on-premises receivers. Defaults to false. No effect when Client is set.
	AllowPrivateNetworks bool
	// Client sends the requests. nil means a client of the Webhook's own
	// with the SSRF guard (unless AllowPrivateNetworks), no proxy, and at
	// most 3 same-host 307/308 redirects. A Client supplied here is used as
	// is: its dialing and redirect policy are the caller's responsibility.
	Client *http.Client
}

// Webhook is a Hook that POSTs each run's Outcome as a signed JSON object
// to an HTTP endpoint. See the package documentation for the wire format.
// It is safe for concurrent use.
type Webhook struct {
	// Immutable after NewWebhook.
	url     *url.URL // nil: per-run callback_url
	key     []byte
	timeout time.Duration
	client  *http.Client
	now     func() time.Time // tests replace it
}

var _ Hook = (*Webhook)(nil)

// NewWebhook validates cfg and returns a Webhook. An invalid field yields a
// *ConfigError wrapping ErrInvalidSecret, ErrInvalidURL or ErrInvalidConfig.
// A URL whose host is itself a forbidden address (an IP literal such as
// 127.0.0.1, 10.0.0.5 or [fe80::1]) or "localhost" (or a name under
// ".localhost") yields a *ConfigError wrapping ErrForbiddenDestination,
// unless AllowPrivateNetworks is set or a Client is given: the default
// client's SSRF guard would refuse every delivery to it, and each
// notification would be dead-lettered. Hostnames that resolve to such
// addresses are still refused at each delivery, by the guard.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	w := &Webhook{
		timeout: cfg.Timeout,
		client:  cfg.Client,
		now:     time.Now,
	}
	if cfg.URL != "" {
		u, reason := parseEndpoint(cfg.URL)
		if reason != "" {
			return nil, &ConfigError{Field: "URL", Reason: reason, Err: ErrInvalidURL}
		}
		if cfg.Client == nil && !cfg.AllowPrivateNetworks {
			if reason := literalHostReason(u.Hostname()); reason != "" {
				return nil, &ConfigError{Field: "URL", Reason: reason + "; set AllowPrivateNetworks to deliver to it", Err: ErrForbiddenDestination}
			}
		}
		w.url = u
	}
	key, reason := decodeSecret(cfg.Secret)
	if reason != "" {
		return nil, &ConfigError{Field: "Secret", Reason: reason, Err: ErrInvalidSecret}
	}
	w.key = key
	switch {
	case cfg.Timeout < 0:
		return nil, &ConfigError{Field: "Timeout", Reason: "negative", Err: ErrInvalidConfig}
	case cfg.Timeout == 0:
		w.timeout = DefaultWebhookTimeout
	}
	if w.client == nil {
		w.client = newDefaultClient(cfg.AllowPrivateNetworks)
	}
	return w, nil
}

// decodeSecret returns the HMAC key of a "whsec_<base64>" secret, or why it
// is invalid. The reason never contains the secret.
func decodeSecret(secret string) ([]byte, string) {
	if secret == "" {
		return nil, "required (deliveries are always signed)"
	}
	enc, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, `must start with "whsec_"`
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, `not "whsec_" followed by standard base64`
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Sprintf("decodes to %d bytes, want %d to %d", len(key), minSecretBytes, maxSecretBytes)
	}
	return key, ""
}

// parseEndpoint parses an absolute http or https URL with a host, or says
// why it is not one. The reason never contains the URL (it may carry
// credentials).
func parseEndpoint(raw string) (*url.URL, string) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "unparsable"
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return nil, "not absolute"
	default:
		return nil, fmt.Sprintf("scheme %q is not http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, "no host"
	}
	if u.Opaque != "" {
		return nil, "opaque URL"
	}
	u.Fragment, u.RawFragment = "", ""
	return u, ""
}

// notification is the JSON body of a delivery. Field order is the wire
// order.
type notification struct {
	Type      string            `json:"type"`
	RunID     string            `json:"run_id"`
	Status    string            `json:"status"`
	Result    []byte            `json:"result"` // standard base64; null when nil
	Error     string            `json:"error"`
	Headers   map[string]string `json:"headers"` // {} when none
	FinalStep uint32            `json:"final_step"`
	EndedAt   string            `json:"ended_at"`
	Retries   uint32            `json:"retries"`
}

// encodeNotification returns the JSON body for o.
func encodeNotification(o Outcome, endedAt time.Time) ([]byte, error) {
	headers := o.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	return json.Marshal(notification{
		Type:      "run." + o.Status.String(),
		RunID:     o.RunID,
		Status:    o.Status.String(),
		Result:    o.Result,
		Error:     o.Error,
		Headers:   headers,
		FinalStep: o.FinalStep,
		EndedAt:   endedAt.UTC().Format(time.RFC3339Nano),
		Retries:   o.Retries,
	})
}

// notificationID returns the webhook-id of o's notification: "msg_" and 32
// hex digits of a SHA-256 over the run ID, status, final step and EndedAt.
// It is the same for every delivery attempt of one notification, and
// differs for a later run that reuses the run ID (its EndedAt differs).
func notificationID(o Outcome) string {
	h := sha256.New()
	for _, part := range []string{
		idDomain,
		o.RunID,
		o.Status.String(),
		strconv.FormatUint(uint64(o.FinalStep), 10),
		formatEndedAt(o.EndedAt),
	} {
		// Length-prefixed, so that no two different tuples hash alike.
		h.Write(strconv.AppendInt(nil, int64(len(part)), 10))
		h.Write([]byte{':'})
		h.Write([]byte(part))
	}
	return idPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// formatEndedAt formats t for notificationID; "" for the zero time.
func formatEndedAt(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// sign returns the webhook-signature value for one attempt:
// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
func sign(key []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, timestamp, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// OnTermination delivers outcome: one signed POST, bounded by the
// configured Timeout. It returns nil on a 2xx response, and nil without
// sending anything when the Webhook has no fixed URL and the run has no
// "callback_url" header. Otherwise it returns a *DeliveryError that says
// whether the delivery may be retried (IsPermanent) and after how long
// (RetryAfter).
func (w *Webhook) OnTermination(ctx context.Context, outcome Outcome) error {
	if outcome.RunID == "" || !outcome.Status.Valid() {
		return &DeliveryError{Permanent: true, Err: fmt.Errorf("%w: run %q, status %v", ErrInvalidOutcome, outcome.RunID, outcome.Status)}
	}
	target := w.url
	if target == nil {
		raw, ok := outcome.Headers[CallbackURLHeader]
		if !ok || raw == "" {
			return nil // nobody asked to be told
		}
		u, reason := parseEndpoint(raw)
		if reason != "" {
			return &DeliveryError{Permanent: true, Err: fmt.Errorf("%w: %s header: %s", ErrInvalidURL, CallbackURLHeader, reason)}
		}
		target = u
	}

	now := w.now()
	endedAt := outcome.EndedAt
	if endedAt.IsZero() {
		endedAt = now
	}
	body, err := encodeNotification(outcome, endedAt)
	if err != nil { // cannot happen: every field encodes
		return &DeliveryError{Permanent: true, Err: err}
	}
	id := notificationID(outcome)
	ts := now.Unix()

	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return &DeliveryError{Permanent: true, Err: fmt.Errorf("%w: %v", ErrInvalidURL, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sign(w.key, id, ts, body))

	resp, err := w.client.Do(req)
	if err != nil {
		de := &DeliveryError{Err: err}
		if resp != nil { // a refused redirect: resp is the redirect, body closed
			de.StatusCode = resp.StatusCode
		}
		de.Permanent = errors.Is(err, ErrForbiddenDestination) || errors.Is(err, ErrRedirectRefused)
		return de
	}
	return w.classify(resp)
}

// classify turns a response into nil or a *DeliveryError, and always
// drains (within a bound) and closes its body.
func (w *Webhook) classify(resp *http.Response) error {
	defer resp.Body.Close()
	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))
		return nil
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxSnippetBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))

	de := &DeliveryError{StatusCode: code, Err: statusError(resp.Status, snippet)}
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		de.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), w.now())
	default: // other 1xx, 3xx, 4xx: the receiver will answer the same again
		de.Permanent = true
	}
	return de
}

// statusError describes a non-2xx response with a printable, bounded
// snippet of its body.
func statusError(status string, body []byte) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return fmt.Errorf("response %q", status)
	}
	truncated := len(body) > maxSnippetShown
	if truncated {
		body = body[:maxSnippetShown] // a split rune is quoted as \x escapes
	}
	s := strconv.Quote(string(body))
	if truncated {
		s += "..."
	}
	return fmt.Errorf("response %q: body %s", status, s)
}
