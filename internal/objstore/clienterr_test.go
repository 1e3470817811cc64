package objstore

import (
	"fmt"
	"testing"
)

// httpErr is a response error as the AWS SDK's: an HTTP status and an
// API error code.
type httpErr struct {
	status int
	code   string
}

func (e *httpErr) Error() string       { return fmt.Sprintf("HTTP %d %s", e.status, e.code) }
func (e *httpErr) HTTPStatusCode() int { return e.status }
func (e *httpErr) ErrorCode() string   { return e.code }

// TestClientErrorsAreFinal: a request the server refuses (wrong
// credentials: 403 SignatureDoesNotMatch) is not retried, as gocloud's
// Unknown code alone would have it; throttling, timeouts, conflicts and
// server errors are.
func TestClientErrorsAreFinal(t *testing.T) {
	for _, tc := range []struct {
		err       *httpErr
		retryable bool
	}{
		{&httpErr{403, "SignatureDoesNotMatch"}, false},
		{&httpErr{403, "InvalidAccessKeyId"}, false},
		{&httpErr{403, "AccessDenied"}, false},
		{&httpErr{400, "InvalidArgument"}, false},
		{&httpErr{400, "RequestTimeout"}, true},
		{&httpErr{403, "RequestTimeTooSkewed"}, true},
		{&httpErr{400, "ExpiredToken"}, true},
		{&httpErr{408, ""}, true},
		{&httpErr{409, "ConditionalRequestConflict"}, true},
		{&httpErr{429, ""}, true},
		{&httpErr{503, "SlowDown"}, true},
		{&httpErr{500, "InternalError"}, true},
	} {
		err := mapGocloudErr("get", "owner", fmt.Errorf("blob: %w", tc.err), false)
		if got := IsRetryable(err); got != tc.retryable {
			t.Errorf("%v: IsRetryable = %v, want %v", tc.err, got, tc.retryable)
		}
	}
}
