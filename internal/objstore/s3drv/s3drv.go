// Package s3drv is the s3:// driver of package objstore: importing it
// registers an Opener for s3 URLs. Programs import it through the public
// package github.com/stepwell/stepwell/queue/s3, which keeps the AWS SDK
// out of programs that do not.
package s3drv

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"

	"github.com/stepwell/stepwell/internal/objstore"
)

func init() { objstore.Register("s3", open) }

// open opens an s3:// bucket as gocloud's s3blob URL opener does, but
// with an HTTP client that has the store's timeouts, and refuses a client
// without a region (see checkRegion).
func open(ctx context.Context, p objstore.OpenParams) (*blob.Bucket, error) {
	q, name, t := p.Query, p.Bucket, p.Timeouts
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
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(t.Apply)
	// The SDK validates a GetObject's checksum when the object has a
	// full-object one; a multipart object's (a checksum of its parts'
	// checksums, "...-N") cannot be, and the SDK then prints a warning to
	// stderr on every read: thousands for a large value read in ranges.
	// Only the warning is turned off: such a read is not validated either way.
	s3opts = append(s3opts, func(o *s3.Options) { o.DisableLogOutputChecksumValidationSkipped = true })
	client := s3.NewFromConfig(cfg, s3opts...)
	// As s3blob's opener: the upload manager does not take the checksum
	// setting from the client.
	opts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	b, err := s3blob.OpenBucket(ctx, client, name, &opts)
	if err != nil {
		return nil, err
	}
	if err := checkRegion(client, name); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// checkRegion refuses an S3 client that has no region: none in the URL
// ("region"), in AWS_REGION or AWS_DEFAULT_REGION, or in the shared config
// profile. The AWS SDK would only fail at the first request, with a
// message about endpoint resolution; Open fails at once instead, before
// any request, with an error wrapping objstore.ErrInvalidURL. (MinIO and
// other S3-compatible servers need one too: it is part of every request's
// signature; "us-east-1" is the usual choice.)
func checkRegion(client *s3.Client, bucket string) error {
	if client.Options().Region != "" {
		return nil
	}
	return fmt.Errorf("no AWS region: add region=REGION to the URL "+
		"(e.g. s3://%s?region=us-east-1), or set AWS_REGION or a region in the AWS config profile", bucket)
}
