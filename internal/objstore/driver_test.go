package objstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"gocloud.dev/blob"
)

// TestOpenWithoutDriver: a cloud URL whose driver is not registered fails
// to open with an error wrapping ErrInvalidURL that names the package to
// import, after the URL's own checks; Canonical needs no driver. (This
// test binary links the drivers, through testenv; the test hides them.
// It is not parallel, so no other test runs meanwhile.)
func TestOpenWithoutDriver(t *testing.T) {
	hideDrivers(t)
	for url, pkg := range map[string]string{
		"s3://bucket?region=us-east-1&prefix=p/": "queue/s3",
		"gs://bucket":                            "queue/gcs",
		"azblob://container?storage_account=a":   "queue/azblob",
	} {
		b, err := Open(context.Background(), url)
		if err == nil {
			b.Close()
			t.Fatalf("Open(%s) succeeded without a driver", url)
		}
		var oe *OpError
		if !errors.Is(err, ErrInvalidURL) || !errors.As(err, &oe) || oe.Op != "open" {
			t.Errorf("Open(%s) = %#v; want an open *OpError wrapping ErrInvalidURL", url, err)
		}
		want := `import _ "github.com/stepwell/stepwell/` + pkg + `"`
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %q; want it to say %s", url, err, want)
		}
		if _, err := Canonical(url); err != nil {
			t.Errorf("Canonical(%s) without a driver: %v", url, err)
		}
	}
	// URL errors come first: they do not depend on the drivers linked.
	if _, err := Open(context.Background(), "s3://bucket?nosuch=1"); err == nil || strings.Contains(err.Error(), "import") {
		t.Errorf("Open with a bad parameter and no driver = %v; want the parameter error", err)
	}
}

// TestRegisterPanics: Register refuses a nil Opener, a scheme that is not
// a cloud scheme and a second driver for a scheme.
func TestRegisterPanics(t *testing.T) {
	hideDrivers(t)
	open := func(context.Context, OpenParams) (*blob.Bucket, error) { return nil, nil }
	for name, fn := range map[string]func(){
		"nil":     func() { Register("s3", nil) },
		"unknown": func() { Register("ftp", open) },
		"twice": func() {
			Register("gs", open)
			Register("gs", open)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register %s did not panic", name)
				}
			}()
			fn()
		}()
	}
}

// hideDrivers unregisters every driver until t ends. Tests calling it must
// not be parallel.
func hideDrivers(t *testing.T) {
	drivers.mu.Lock()
	saved := drivers.m
	drivers.m = nil
	drivers.mu.Unlock()
	t.Cleanup(func() {
		drivers.mu.Lock()
		drivers.m = saved
		drivers.mu.Unlock()
	})
}
