package objstore

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// checkS3Region refuses an S3 bucket whose client has no region: none in
// the URL ("region"), in AWS_REGION or AWS_DEFAULT_REGION, or in the shared
// config profile. The AWS SDK would only fail at the first request, with a
// message about endpoint resolution; Open fails at once instead, before
// any request, with an error wrapping ErrInvalidURL. (MinIO and other
// S3-compatible servers need one too: it is part of every request's
// signature; "us-east-1" is the usual choice.)
func checkS3Region(b Bucket, loc *location) error {
	g, ok := b.(*gocloudBucket)
	var client *s3.Client
	if !ok || !g.b.As(&client) || client.Options().Region != "" {
		return nil
	}
	return opErr("open", loc.display, fmt.Errorf("%w: no AWS region: add region=REGION to the URL "+
		"(e.g. s3://%s?region=us-east-1), or set AWS_REGION or a region in the AWS config profile", ErrInvalidURL, loc.name))
}
