// Package gcsdrv is the gs:// driver of package objstore: importing it
// registers an Opener for gs URLs. Programs import it through the public
// package github.com/stepwell/stepwell/queue/gcs, which keeps the Google
// Cloud SDK out of programs that do not.
package gcsdrv

import (
	"context"
	"net/http"
	"net/url"
	"os"

	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"

	"github.com/stepwell/stepwell/internal/objstore"
)

func init() { objstore.Register("gs", open) }

// open opens a gs:// bucket as gocloud's default gcsblob URL opener
// does (Application Default Credentials; none with STORAGE_EMULATOR_HOST),
// but with an HTTP transport that has the store's timeouts. (URLs with
// grpc=true or zonal=true use a gRPC client, which the timeouts do not
// reach.) Signing URLs, which the default opener also sets up, is not
// needed here.
func open(ctx context.Context, p objstore.OpenParams) (*blob.Bucket, error) {
	u := &url.URL{Scheme: "gs", Host: p.Bucket, RawQuery: p.Query.Encode()}
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
	p.Timeouts.Apply(tr)
	client, err := gcp.NewHTTPClient(tr, creds.TokenSource)
	if err != nil {
		return nil, err
	}
	opener := &gcsblob.URLOpener{Client: client, TokenSource: gcp.CredentialsTokenSource(creds), Options: opts}
	return opener.OpenBucketURL(ctx, u)
}
