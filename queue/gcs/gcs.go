// Package gcs enables gs:// store URLs (Google Cloud Storage) in
// queue.Open, runtime.Open and the other functions that open a store by
// URL. Import it for its side effect:
//
//	import _ "github.com/stepwell/stepwell/queue/gcs"
//
// Without it, opening a gs:// URL fails with an error wrapping
// queue.ErrInvalidURL that names this package; the Google Cloud SDK is
// linked only into programs that import it.
//
// URLs have the form
//
//	gs://BUCKET?prefix=P/
//
// with these query parameters: prefix (a key prefix ending in '/'),
// anonymous, access_id, private_key_path, universe_domain, grpc, zonal,
// and the transport timeouts connect_timeout (default 10s),
// response_timeout (30s) and idle_timeout (90s), which gRPC clients
// (grpc=true, zonal=true) do not use. Credentials are Application Default
// Credentials; with STORAGE_EMULATOR_HOST set, the emulator is used
// without credentials.
package gcs

import _ "github.com/stepwell/stepwell/internal/objstore/gcsdrv" // registers gs://
