package objstore

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Timeouts are the transport timeouts of cloud stores: without them a
// request to a server that stopped answering (a paused process, a
// black-holed connection) hangs until its caller's deadline, and the
// committer, which has none, would wait forever instead of retrying. The
// s3 and gs drivers apply them to their HTTP transports.
type Timeouts struct {
	// Connect bounds establishing a connection (TCP and TLS handshakes).
	Connect time.Duration
	// Response bounds the wait for a response's headers once the request
	// (with its body) is sent.
	Response time.Duration
	// Idle closes a pooled connection unused this long.
	Idle time.Duration
}

// defaultTimeouts apply to parameters a store URL leaves out.
var defaultTimeouts = Timeouts{Connect: 10 * time.Second, Response: 30 * time.Second, Idle: 90 * time.Second}

// timeoutParams are the query parameters, accepted by every cloud scheme,
// that set the timeouts (Go durations: "5s", "1m").
var timeoutParams = []string{"connect_timeout", "response_timeout", "idle_timeout"}

// takeTimeouts parses the timeout parameters of q, removing them.
func takeTimeouts(q url.Values) (Timeouts, error) {
	t := defaultTimeouts
	for _, p := range []struct {
		name string
		d    *time.Duration
	}{{"connect_timeout", &t.Connect}, {"response_timeout", &t.Response}, {"idle_timeout", &t.Idle}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		q.Del(p.name)
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return t, fmt.Errorf("%s=%q: want a positive duration such as 10s", p.name, v)
		}
		*p.d = d
	}
	return t, nil
}

// Apply sets the timeouts on an HTTP transport.
func (t Timeouts) Apply(tr *http.Transport) {
	tr.DialContext = (&net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = t.Connect
	tr.ResponseHeaderTimeout = t.Response
	tr.IdleConnTimeout = t.Idle
}
