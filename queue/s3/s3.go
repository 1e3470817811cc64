// Package s3 enables s3:// store URLs (Amazon S3 and S3-compatible
// servers such as MinIO) in queue.Open, runtime.Open and the other
// functions that open a store by URL. Import it for its side effect:
//
//	import _ "github.com/stepwell/stepwell/queue/s3"
//
// Without it, opening an s3:// URL fails with an error wrapping
// queue.ErrInvalidURL that names this package; the AWS SDK is linked only
// into programs that import it.
//
// URLs have the form
//
//	s3://BUCKET?prefix=P/&region=R[&endpoint=URL&use_path_style=true...]
//
// with these query parameters: prefix (a key prefix ending in '/'),
// region, endpoint, use_path_style (or s3ForcePathStyle), disable_https,
// profile, anonymous, role, hostname_immutable, dualstack, fips,
// accelerate, rate_limiter_capacity, ssetype, kmskeyid,
// request_checksum_calculation, response_checksum_validation, awssdk, and
// the transport timeouts connect_timeout (default 10s), response_timeout
// (30s) and idle_timeout (90s). Credentials come from the usual AWS
// environment variables and files. A region is required, from the URL,
// AWS_REGION or AWS_DEFAULT_REGION, or the AWS config profile. For MinIO:
//
//	s3://BUCKET?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true
package s3

import _ "github.com/stepwell/stepwell/internal/objstore/s3drv" // registers s3://
