// Package terminal is the user's side of a Stepwell run's end: the Outcome
// of a run, the Hook that is told about it, and Webhook, a Hook that POSTs
// signed notifications over HTTP.
//
// # Basics
//
// When a run's termination commits (Succeeded, Failed or Cancelled), the
// runtime enqueues a notification job in the same transaction, and a
// worker calls Hook.OnTermination with the run's Outcome. Delivery is at
// least once: the hook is called for every run whose termination committed
// and for no other run, and is called again after it returns an error or
// after a crash between a successful call and its acknowledgement. An
// error is retried with backoff (after RetryAfter, when the error carries
// one); an error for which IsPermanent is true dead-letters the
// notification instead. A run retried after it failed or was cancelled
// (runtime.Runtime.Retry) terminates again: each termination is notified,
// so one run ID may be notified more than once with different outcomes
// (told apart by Outcome.Retries and EndedAt, and by the webhook-id).
//
// Pass Noop to observe nothing: the runtime then enqueues no notification
// at all. HookFunc turns a function into a Hook.
//
// # Webhook
//
// NewWebhook returns a Hook that POSTs each Outcome to a fixed URL, or to
// the URL in each run's "callback_url" header (runs without one are not
// notified). A delivery is one HTTP request, here for a run that ended
// at 2026-01-01T00:00:00Z, sent 5 seconds later and signed with the secret
// "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw":
//
//	POST <url>
//	Content-Type: application/json
//	User-Agent: stepwell-webhook/1
//	webhook-id: msg_90f68b9822a463bd976dbd1801fc4c50
//	webhook-timestamp: 1767225605
//	webhook-signature: v1,8pIljmqkXJOxJHtrCWdNa/mI3Jxw5UjdPY1hKO73j78=
//
//	{"type":"run.succeeded","run_id":"order-1042","status":"succeeded","result":"eyJvayI6dHJ1ZX0=","error":"","headers":{"tenant":"acme"},"final_step":2,"ended_at":"2026-01-01T00:00:00Z","retries":0}
//
// The body is one compact JSON object with these fields, in this order:
//
//	type        string  "run." + status, for receivers that route on it
//	run_id      string  Outcome.RunID
//	status      string  Outcome.Status.String(): "succeeded", "failed" or "cancelled"
//	result      string  Outcome.Result in standard base64 (with padding); null when nil
//	error       string  Outcome.Error: the Fail or Cancel reason or the step's
//	                    error; "" on success and for an external cancel
//	headers     object  Outcome.Headers, string values; {} when there are none
//	final_step  number  Outcome.FinalStep, the step that settled the run
//	ended_at    string  Outcome.EndedAt, RFC 3339 in UTC, with fractional seconds
//	                    when non-zero; the attempt's time when EndedAt is zero
//	retries     number  Outcome.Retries: how many times the run was retried
//	                    (runtime.Runtime.Retry) before this termination; 0 if never
//
// Receivers should ignore fields they do not know: fields may be added.
//
// # Signatures
//
// Every delivery is signed per Standard Webhooks
// (https://www.standardwebhooks.com), so any of its verification libraries
// works. The secret, "whsec_" followed by base64 of 24 to 64 random bytes,
// is required. For each attempt:
//
//	webhook-id         stable for one notification, across all its attempts
//	webhook-timestamp  the attempt's time, in Unix seconds
//	webhook-signature  "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body))
//
// where key is the base64-decoded part of the secret after "whsec_", and
// body the exact bytes sent. A receiver should check the signature with a
// constant-time comparison, reject timestamps more than a few minutes from
// its clock, and deduplicate on webhook-id, since delivery is at least once.
//
// The webhook-id is derived, not stored: "msg_" followed by 32 hex digits
// of a SHA-256 over the run ID, status, final step and EndedAt. The runtime
// sets EndedAt once, when the termination commits, so every attempt of a
// notification carries the same ID, while a later run that reuses the run
// ID (after the terminal retention window) gets a new one.
//
// # Responses and retries
//
// A 2xx response is a delivery. Anything else is a *DeliveryError:
//
//	2xx                        delivered: nil
//	408, 429, 5xx              retryable; Retry-After (seconds or an HTTP
//	                           date, capped at 24 hours) is in RetryAfter
//	network error, timeout     retryable
//	other 1xx, 3xx and 4xx     permanent
//	refused redirect           permanent
//	forbidden destination      permanent
//	invalid callback_url       permanent
//
// At most 4 KiB of a non-2xx response body is read (a snippet of it goes
// into the error message) and at most 64 KiB more is drained, so that the
// connection can be reused; the body is always closed. Each attempt is
// bounded by WebhookConfig.Timeout (10 seconds by default).
//
// # SSRF protection
//
// A callback URL comes from whoever submits runs, so the default client
// refuses to connect to loopback, private (RFC 1918, fc00::/7), link-local
// (169.254.0.0/16, which includes cloud metadata endpoints, and fe80::/10),
// unspecified, multicast, carrier-grade NAT (100.64.0.0/10) and other
// reserved addresses, including IPv4 addresses of these kinds embedded in
// NAT64 and 6to4 addresses. The check runs on the address being dialed,
// after name resolution, so a hostname that resolves to a forbidden
// address (or is rebound to one between checks) is refused too. The
// default client uses no proxy, follows at most 3 redirects, only 307 and
// 308 ones (which repeat the POST and its body), and only to the same host
// and port (or from http to https on the same host). Set
// AllowPrivateNetworks for tests and on-premises receivers. A
// WebhookConfig.Client of one's own replaces all of this. A fixed
// WebhookConfig.URL whose host is a forbidden IP literal or "localhost"
// is refused by NewWebhook itself (ErrForbiddenDestination in a
// ConfigError) rather than at every delivery.
//
// # Caveats
//
// Notifications are not ordered across runs, and one run's notification
// may arrive more than once. The body carries the run's result and
// headers: a callback URL receives them, so only accept callback URLs from
// submitters entitled to see them. A Webhook whose URL is fixed still sends
// the "callback_url" header of a run, if any, among its headers.
package terminal
