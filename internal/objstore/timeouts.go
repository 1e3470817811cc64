package objstore

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"
)

// Transport timeouts of cloud stores: without them a request to a server
// that stopped answering (a paused process, a black-holed connection)
// hangs until its caller's deadline, and the committer, which has none,
// would wait forever instead of retrying.
type timeouts struct {
	// connect bounds establishing a connection (TCP and TLS handshakes).
	connect time.Duration
	// response bounds the wait for a response's headers once the request
	// (with its body) is sent.
	response time.Duration
	// idle closes a pooled connection unused this long.
	idle time.Duration
}

// defaultTimeouts apply to parameters a store URL leaves out.
var defaultTimeouts = timeouts{connect: 10 * time.Second, response: 30 * time.Second, idle: 90 * time.Second}

// timeoutParams are the query parameters, accepted by every cloud scheme,
// that set the timeouts (Go durations: "5s", "1m").
var timeoutParams = []string{"connect_timeout", "response_timeout", "idle_timeout"}

// takeTimeouts parses the timeout parameters of q, removing them.
func takeTimeouts(q url.Values) (timeouts, error) {
	t := defaultTimeouts
	for _, p := range []struct {
		name string
		d    *time.Duration
	}{{"connect_timeout", &t.connect}, {"response_timeout", &t.response}, {"idle_timeout", &t.idle}} {
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

// apply sets the timeouts on an HTTP transport.
func (t timeouts) apply(tr *http.Transport) {
	tr.DialContext = (&net.Dialer{Timeout: t.connect, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = t.connect
	tr.ResponseHeaderTimeout = t.response
	tr.IdleConnTimeout = t.idle
}

// openS3 opens an s3:// bucket as gocloud's s3blob URL opener does, but
// with an HTTP client that has the store's timeouts.
func openS3(ctx context.Context, name string, q url.Values, t timeouts) (*blob.Bucket, error) {
	q = cloneValues(q)
	var opts s3blob.Options
	var s3opts []func(*s3.Options)
	if v := q.Get("ssetype"); v != "" {
		q.Del("ssetype")
		found := false
		for _, sse := range opts.EncryptionType.Values() {
			if strings.EqualFold(string(sse), v) {
				opts.EncryptionType, found = sse, true
			}
		}
		if !found {
			return nil, fmt.Errorf("%q is not a valid value for ssetype", v)
		}
	}
	if v := q.Get("kmskeyid"); v != "" {
		q.Del("kmskeyid")
		opts.KMSEncryptionID = v
	}
	for _, p := range []struct {
		name string
		set  func(o *s3.Options, v bool)
	}{
		{"accelerate", func(o *s3.Options, v bool) { o.UseAccelerate = v }},
		{"disable_https", func(o *s3.Options, v bool) { o.EndpointOptions.DisableHTTPS = v }},
		{"use_path_style", func(o *s3.Options, v bool) { o.UsePathStyle = v }},
		{"s3ForcePathStyle", func(o *s3.Options, v bool) { o.UsePathStyle = v }},
	} {
		raw := q.Get(p.name)
		if raw == "" {
			continue
		}
		q.Del(p.name)
		v, err := strconv.ParseBool(raw)
		if err != nil {
			return nil, fmt.Errorf("invalid value for %q: %w", p.name, err)
		}
		s3opts = append(s3opts, func(o *s3.Options) { p.set(o, v) })
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, err
	}
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(t.apply)
	client := s3.NewFromConfig(cfg, s3opts...)
	// As s3blob's opener: the upload manager does not take the checksum
	// setting from the client.
	opts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	return s3blob.OpenBucket(ctx, client, name, &opts)
}

func cloneValues(q url.Values) url.Values {
	out := make(url.Values, len(q))
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// openGCS opens a gs:// bucket as gocloud's default gcsblob URL opener
// does (Application Default Credentials; none with STORAGE_EMULATOR_HOST),
// but with an HTTP transport that has the store's timeouts. (URLs with
// grpc=true or zonal=true use a gRPC client, which the timeouts do not
// reach.) Signing URLs, which the default opener also sets up, is not
// needed here.
func openGCS(ctx context.Context, u *url.URL, t timeouts) (*blob.Bucket, error) {
	var creds *google.Credentials
	var err error
	universe := u.Query().Get("universe_domain")
	switch {
	case os.Getenv("STORAGE_EMULATOR_HOST") != "" || os.Getenv("STORAGE_EMULATOR_HOST_GRPC") != "":
		// As gocloud's opener; the JSON is a constant, not untrusted input.
		//lint:ignore SA1019 the deprecation concerns credentials from untrusted sources
		creds, err = google.CredentialsFromJSON(ctx, []byte(`{"type": "service_account", "project_id": "my-project-id"}`))
	case universe != "":
		creds, err = gcp.DefaultCredentialsWithParams(ctx, google.CredentialsParams{UniverseDomain: universe})
	default:
		creds, err = gcp.DefaultCredentials(ctx)
	}
	if err != nil {
		return nil, err
	}
	var opts gcsblob.Options
	if ud, err := creds.GetUniverseDomain(); err == nil && ud != "" {
		opts.ClientOptions = append(opts.ClientOptions, option.WithUniverseDomain(ud))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.apply(tr)
	client, err := gcp.NewHTTPClient(tr, creds.TokenSource)
	if err != nil {
		return nil, err
	}
	opener := &gcsblob.URLOpener{Client: client, TokenSource: gcp.CredentialsTokenSource(creds), Options: opts}
	return opener.OpenBucketURL(ctx, u)
}
