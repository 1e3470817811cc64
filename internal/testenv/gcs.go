package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// GCS returns the URL of a fresh, empty store on a local fake-gcs-server:
//
//	gs://stepwell-test?prefix=<unique>/
//
// The endpoint is not in the URL: gocloud's gcsblob takes it from
// STORAGE_EMULATOR_HOST, which GCS sets for the whole process before
// returning. Without a fake-gcs-server binary the test is skipped (failed if
// CI=true).
func GCS(t testing.TB) string {
	t.Helper()
	_, err := fakeGCS()
	need(t, "GCS (fake-gcs-server)", err)
	return fmt.Sprintf("gs://%s?prefix=%s", Bucket, uniquePrefix(t))
}

// GCSEndpoint returns the emulator's host:port (the value of
// STORAGE_EMULATOR_HOST), starting it if needed.
func GCSEndpoint(t testing.TB) string {
	t.Helper()
	s, err := fakeGCS()
	need(t, "GCS (fake-gcs-server)", err)
	return s.addr
}

var fakeGCS = sync.OnceValues(startFakeGCS)

func startFakeGCS() (*server, error) {
	bin, err := findBinary("fake-gcs-server", "fake-gcs-server")
	if err != nil {
		return nil, err
	}
	s, err := startServer(serverSpec{
		name: "fake-gcs-server",
		bin:  bin,
		args: func(addr, dir string) []string {
			host, port, _ := net.SplitHostPort(addr)
			return []string{
				"-scheme", "http",
				"-host", host,
				"-port", port,
				"-public-host", addr,
				"-external-url", "http://" + addr, // resumable-upload Location headers
				"-backend", "filesystem",
				"-filesystem-root", filepath.Join(dir, "data"),
				"-data", filepath.Join(dir, "seed"), // nothing to preload
				"-log-level", "warn",
			}
		},
		readyPath: "/storage/v1/b",
	})
	if err != nil {
		return nil, err
	}
	if err := os.Setenv("STORAGE_EMULATOR_HOST", s.addr); err != nil {
		return nil, err
	}
	if err := createGCSBucket(s.addr); err != nil {
		return nil, fmt.Errorf("fake-gcs-server: create bucket %s: %w", Bucket, err)
	}
	return s, nil
}

// createGCSBucket creates Bucket through the emulator's JSON API.
func createGCSBucket(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"name": Bucket})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"http://"+addr+"/storage/v1/b?project=stepwell-test", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated, http.StatusConflict:
		return nil
	}
	return fmt.Errorf("%s: %s", resp.Status, msg)
}
