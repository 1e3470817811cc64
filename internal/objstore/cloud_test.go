package objstore_test

import (
	"testing"

	_ "github.com/stepwell/stepwell/internal/objstore/azdrv"
	_ "github.com/stepwell/stepwell/internal/objstore/gcsdrv"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
	_ "github.com/stepwell/stepwell/internal/objstore/s3drv"
	"github.com/stepwell/stepwell/internal/testenv"
)

// The cloud backends run the same conformance suite as mem and file, against
// real protocol servers on 127.0.0.1 (MinIO for s3://, fake-gcs-server for
// gs://) that internal/testenv starts on first use and stops in TestMain.
// Without the server binaries these tests skip, or fail if CI=true; install
// them with `bash .ci/install-tools`.

func TestMain(m *testing.M) { testenv.Main(m) }

func TestConformanceS3(t *testing.T) {
	t.Parallel()
	objstoretest.RunConformanceURL(t, func(t *testing.T) string { return testenv.S3(t) })
}

func TestConformanceGCS(t *testing.T) {
	t.Parallel()
	objstoretest.RunConformanceURL(t, func(t *testing.T) string { return testenv.GCS(t) })
}
