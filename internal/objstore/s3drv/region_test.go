package s3drv_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	_ "github.com/stepwell/stepwell/internal/objstore/s3drv"
)

// TestOpenS3WithoutRegion: an s3:// URL with no region from the URL, the
// environment or the AWS config fails at Open, wrapping ErrInvalidURL and
// saying how to give one, before any request; a region from any of those
// places is enough.
func TestOpenS3WithoutRegion(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	withRegion := filepath.Join(dir, "with-region")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(withRegion, []byte("[default]\nregion = eu-west-1\n\n[profile other]\nregion = eu-north-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	isolate := func(t *testing.T, configFile string) {
		for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"} {
			t.Setenv(k, "")
		}
		t.Setenv("AWS_CONFIG_FILE", configFile)
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	}
	base := "s3://bucket?use_path_style=true&endpoint=" + srv.URL

	t.Run("none", func(t *testing.T) {
		isolate(t, empty)
		for _, u := range []string{"s3://bucket", "s3://bucket?prefix=app/", base} {
			b, err := objstore.Open(context.Background(), u)
			if b != nil || !errors.Is(err, objstore.ErrInvalidURL) {
				t.Fatalf("Open(%s) = %v, %v; want ErrInvalidURL", u, b, err)
			}
			var oe *objstore.OpError
			if !errors.As(err, &oe) || oe.Op != "open" {
				t.Errorf("Open(%s): %#v is not an open OpError", u, err)
			}
			for _, want := range []string{"region", "AWS_REGION", "region=us-east-1"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open(%s): message %q lacks %q", u, err, want)
				}
			}
		}
		if n := requests.Load(); n != 0 {
			t.Errorf("%d requests before the region was refused", n)
		}
	})

	ok := map[string]struct {
		url, configFile string
		env             map[string]string
	}{
		"url":                {url: base + "&region=us-east-1", configFile: empty},
		"AWS_REGION":         {url: base, configFile: empty, env: map[string]string{"AWS_REGION": "us-west-2"}},
		"AWS_DEFAULT_REGION": {url: base, configFile: empty, env: map[string]string{"AWS_DEFAULT_REGION": "us-west-2"}},
		"config":             {url: base, configFile: withRegion},
		"profile":            {url: base + "&profile=other", configFile: withRegion},
	}
	for name, tt := range ok {
		t.Run(name, func(t *testing.T) {
			isolate(t, tt.configFile)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			b, err := objstore.Open(context.Background(), tt.url)
			if err != nil {
				t.Fatalf("Open(%s): %v", tt.url, err)
			}
			b.Close()
		})
	}
}

// TestTimeoutParams: s3 URLs take the timeout parameters, as positive
// durations.
func TestTimeoutParams(t *testing.T) {
	for _, u := range []string{"s3://b?idle_timeout=soon", "s3://b?response_timeout=0s"} {
		if b, err := objstore.Open(context.Background(), u); !errors.Is(err, objstore.ErrInvalidURL) {
			if b != nil {
				b.Close()
			}
			t.Errorf("Open(%s) = %v, want ErrInvalidURL", u, err)
		}
	}
	b, err := objstore.Open(context.Background(), "s3://b?region=us-east-1&endpoint=http://127.0.0.1:1&use_path_style=true&response_timeout=1s")
	if err != nil {
		t.Fatalf("Open with a timeout parameter: %v", err)
	}
	b.Close()
}
