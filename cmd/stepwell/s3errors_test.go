package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
)

// seedStore makes a store at url holding one job on queue "emails".
func seedStore(t *testing.T, url string) {
	t.Helper()
	ctx := t.Context()
	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, "emails", []byte("hi"), queue.EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReadFailsFastOnS3: a read command on an S3 store it cannot read
// fails within seconds with the store's own error (not after a program's
// default 60s write-retry window), and a prefix that holds no store is
// exit 4, not an empty listing.
func TestReadFailsFastOnS3(t *testing.T) {
	url := testenv.S3(t)
	ctx := t.Context()
	seedStore(t, url)
	if r := runCLI(t, nil, "--store", url, "queues"); r.code != exitOK || r.stdout != "emails\n" {
		t.Fatalf("queues: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}

	// A prefix with a typo, a bucket that does not exist.
	for _, typo := range []string{
		strings.Replace(url, "prefix=", "prefix=typo-", 1),
		strings.Replace(url, "s3://"+testenv.Bucket, "s3://no-such-bucket", 1),
	} {
		for _, cmd := range []string{"stats", "queues", "runs", "dead"} {
			r := runCLI(t, nil, "--store", typo, cmd)
			if r.code != exitNotFound || !strings.Contains(r.stderr, "no store at s3://") || r.stdout != "" {
				t.Errorf("%s on %s: exit %d, stdout %q, stderr %q", cmd, typo, r.code, r.stdout, r.stderr)
			}
		}
	}

	// A closed port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	start := time.Now()
	endpoint := strings.TrimPrefix(testenv.S3Endpoint(t), "http://")
	r := runCLI(t, nil, "--store", strings.Replace(url, endpoint, closed, 1), "stats")
	if d := time.Since(start); d > 20*time.Second || r.code != exitFailed || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("stats on a closed port: %v, exit %d, stderr %q", d, r.code, r.stderr)
	}

	// Wrong credentials.
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-"+testenv.S3SecretKey)
	start = time.Now()
	r = runCLI(t, nil, "--store", url, "stats")
	if d := time.Since(start); d > 20*time.Second || r.code != exitFailed || !strings.Contains(r.stderr, "SignatureDoesNotMatch") {
		t.Errorf("stats with a wrong secret key: %v, exit %d, stderr %q", d, r.code, r.stderr)
	}
	// A write command too.
	start = time.Now()
	r = runCLI(t, nil, "--store", url, "cancel", "order-1")
	if d := time.Since(start); d > 20*time.Second || r.code != exitFailed || !strings.Contains(r.stderr, "SignatureDoesNotMatch") {
		t.Errorf("cancel with a wrong secret key: %v, exit %d, stderr %q", d, r.code, r.stderr)
	}
	// A program's Open too.
	start = time.Now()
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := queue.Open(octx, url, queue.WithReadOnly()); err == nil || time.Since(start) > 20*time.Second ||
		!strings.Contains(err.Error(), "SignatureDoesNotMatch") {
		t.Errorf("read-only Open with a wrong secret key: %v after %v", err, time.Since(start))
	}
}

// TestNoStoreThere: a read of a URL where no store is, of every kind, is
// exit 4 "no store at", where it printed an empty listing and exit 0.
func TestNoStoreThere(t *testing.T) {
	gs := testenv.GCS(t)
	seedStore(t, gs)
	if r := runCLI(t, nil, "--store", gs, "queues"); r.code != exitOK || r.stdout != "emails\n" {
		t.Fatalf("queues on gs://: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	for _, url := range []string{
		"mem://nothing-here",
		"file://" + t.TempDir(),
		strings.Replace(gs, "prefix=", "prefix=typo-", 1),
		strings.Replace(gs, "gs://"+testenv.Bucket, "gs://no-such-bucket", 1),
	} {
		for _, cmd := range []string{"stats", "queues"} {
			r := runCLI(t, nil, "--store", url, cmd, "--json")
			if r.code != exitNotFound || !strings.Contains(r.stdout, `"error": "no store at `) {
				t.Errorf("%s on %s: exit %d, stdout %q, stderr %q", cmd, url, r.code, r.stdout, r.stderr)
			}
		}
	}
}
