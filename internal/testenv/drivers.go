package testenv

// The URLs S3 and GCS hand out need the s3:// and gs:// drivers, which
// programs enable by importing queue/s3 and queue/gcs. Every test that
// takes a URL from this package gets them through this import; only tests
// import testenv, so no program links the SDKs through it.
import (
	_ "github.com/stepwell/stepwell/internal/objstore/gcsdrv"
	_ "github.com/stepwell/stepwell/internal/objstore/s3drv"
)
