package testenv_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"

	"github.com/stepwell/stepwell/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestS3(t *testing.T) {
	t.Parallel()
	u := testenv.S3(t)
	t.Logf("url: %s", u)
	if !strings.HasPrefix(u, "s3://"+testenv.Bucket+"?prefix=TestS3-") {
		t.Errorf("unexpected URL form %q", u)
	}
	exerciseCreateOnly(t, u, testenv.S3(t))
}

func TestGCS(t *testing.T) {
	t.Parallel()
	u := testenv.GCS(t)
	t.Logf("url: %s", u)
	if !strings.HasPrefix(u, "gs://"+testenv.Bucket+"?prefix=TestGCS-") {
		t.Errorf("unexpected URL form %q", u)
	}
	exerciseCreateOnly(t, u, testenv.GCS(t))
}

// exerciseCreateOnly checks what the engine relies on: create-only writes
// conflict with FailedPrecondition, atomically under concurrency, for small
// (single-request) and large (multipart / resumable) objects; and prefixes
// from different calls are disjoint.
func exerciseCreateOnly(t *testing.T, url, otherURL string) {
	ctx := context.Background()
	b := open(t, url)

	create := func(key string, data []byte) error {
		return b.WriteAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true})
	}

	t.Run("small", func(t *testing.T) {
		if err := create("wal/1", []byte("first")); err != nil {
			t.Fatalf("create: %v", err)
		}
		err := create("wal/1", []byte("second"))
		t.Logf("create-only conflict: code=%v err=%v", gcerrors.Code(err), err)
		if gcerrors.Code(err) != gcerrors.FailedPrecondition {
			t.Fatalf("second create: got %v (code %v), want FailedPrecondition", err, gcerrors.Code(err))
		}
		expect(t, b, "wal/1", []byte("first"))
	})

	t.Run("large", func(t *testing.T) {
		// Above s3blob's part size and gcsblob's chunk size (16 MiB): a
		// multipart upload on S3, a resumable upload on GCS.
		big := make([]byte, 17<<20)
		for i := range big {
			big[i] = byte(i)
		}
		if err := create("big", big); err != nil {
			t.Fatalf("create: %v", err)
		}
		err := create("big", []byte("small overwrite"))
		if gcerrors.Code(err) != gcerrors.FailedPrecondition {
			t.Fatalf("small create over big: got %v (code %v), want FailedPrecondition", err, gcerrors.Code(err))
		}
		big2 := bytes.Clone(big)
		big2[0]++
		err = create("big", big2)
		t.Logf("large create-only conflict: code=%v err=%v", gcerrors.Code(err), err)
		if gcerrors.Code(err) != gcerrors.FailedPrecondition {
			t.Fatalf("big create over big: got %v (code %v), want FailedPrecondition", err, gcerrors.Code(err))
		}
		expect(t, b, "big", big)
	})

	t.Run("race", func(t *testing.T) {
		const writers = 8
		for round := range 5 {
			key := fmt.Sprintf("race/%d", round)
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				winner []byte
				wins   int
			)
			for w := range writers {
				wg.Go(func() {
					data := fmt.Appendf(nil, "writer %d %d", w, rand.Int())
					err := create(key, data)
					switch {
					case err == nil:
						mu.Lock()
						wins++
						winner = data
						mu.Unlock()
					case gcerrors.Code(err) != gcerrors.FailedPrecondition:
						t.Errorf("writer %d: %v (code %v)", w, err, gcerrors.Code(err))
					}
				})
			}
			wg.Wait()
			if wins != 1 {
				t.Fatalf("%s: %d writers won, want exactly 1", key, wins)
			}
			expect(t, b, key, winner)
		}
	})

	t.Run("isolation", func(t *testing.T) {
		if url == otherURL {
			t.Fatalf("two calls returned the same URL %q", url)
		}
		other := open(t, otherURL)
		if err := other.WriteAll(ctx, "only-here", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		ok, err := b.Exists(ctx, "only-here")
		if err != nil || ok {
			t.Fatalf("object leaked across prefixes: exists=%v err=%v", ok, err)
		}
		_, err = b.ReadAll(ctx, "missing")
		if gcerrors.Code(err) != gcerrors.NotFound {
			t.Fatalf("read missing: got %v, want NotFound", err)
		}
	})
}

func open(t *testing.T, url string) *blob.Bucket {
	t.Helper()
	b, err := blob.OpenBucket(context.Background(), url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func expect(t *testing.T, b *blob.Bucket, key string, want []byte) {
	t.Helper()
	r, err := b.NewReader(context.Background(), key, nil)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes (%.20q...), want %d bytes (%.20q...)", key, len(got), got, len(want), want)
	}
}
