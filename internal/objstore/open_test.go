package objstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

func TestOpenInvalidURL(t *testing.T) {
	for _, tc := range []struct{ url, msg string }{
		{"file://relative", "host must be empty or localhost"},
		{"file://relative/dir", "host must be empty or localhost"},
		{"file:relative", "want file://"},
		{"file://", "missing directory path"},
		{"file:///tmp/x?prefix=a/", "no query parameters"},
		{"file://user@/tmp/x", "user info"},
		{"file://user:hunter2@/tmp/x", "user info"},
		{"s3://AKID:hunter2@bucket", "user info"},
		{"s3://AKID:abc/hunter2@bucket", "user info"}, // a '/' in the secret: not a valid URL
		{"s3://AKID:hun ter2@bucket", "user info"},
		{"s3://AKID:hunter2%@bucket", "user info"},
		{"s3:AKID:hunter2@bucket", "want s3://"},
		{"bogus://x", `unknown scheme "bogus"`},
		{"s3://", "missing bucket name"},
		{"gs://", "missing bucket name"},
		{"azblob://", "missing bucket name"},
		{"s3://bucket/some/dir", "use the prefix parameter"},
		{"s3://bucket:9000", "must not contain a port"},
		{"s3://bucket?nosuch=1", `unknown query parameter "nosuch"`},
		{"gs://bucket?region=us", `unknown query parameter "region"`},
		{"s3://bucket?prefix=a", "must end with '/'"},
		{"s3://bucket?prefix=/a/", "prefix"},
		{"s3://bucket?prefix=a/../b/", "prefix"},
		{"s3://bucket?region=a&region=b", "more than once"},
		{"s3://bucket?use_path_style=maybe", "use_path_style"},
		{"%zz", "invalid URL escape"},
		{"s3://bucket?%zz", "query"},
		{"mem://", "missing store name"},
		{"mem:name", "want mem://"},
		{"mem://name/path", "use the prefix parameter"},
		{"mem://name?region=x", "unknown query parameter"},
		{"mem://name#frag", "fragment"},
		{"", "missing scheme"},
		{"/abs/path", "missing scheme"},
	} {
		b, err := objstore.Open(t.Context(), tc.url)
		if err == nil {
			b.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		if !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v; want ErrInvalidURL", tc.url, err)
		}
		var oe *objstore.OpError
		if !errors.As(err, &oe) || oe.Op != "open" {
			t.Errorf("Open(%q) error %#v is not an open *OpError", tc.url, err)
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Open(%q) = %q; want it to mention %q", tc.url, err, tc.msg)
		}
		// The URL as the caller wrote it ("mem://", not "mem:"), with
		// any password redacted.
		switch {
		case strings.Contains(tc.url, "ter2"): // every password here ends so
			if strings.Contains(err.Error(), "ter2") || strings.Contains(err.Error(), "abc") {
				t.Errorf("Open(%q) = %q: the password is in the error", tc.url, err)
			}
		case oe != nil && oe.Key != tc.url:
			t.Errorf("Open(%q) names the URL %q", tc.url, oe.Key)
		}
		if _, cerr := objstore.Canonical(tc.url); cerr == nil && !strings.Contains(tc.url, "use_path_style") {
			t.Errorf("Canonical(%q) succeeded; Open failed with %v", tc.url, err)
		}
	}
}

func TestOpenCloud(t *testing.T) {
	// Opening contacts nothing, so these work offline.
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:1")
	for _, u := range []string{
		"s3://bucket?endpoint=http://127.0.0.1:1&region=us-east-1&use_path_style=true&prefix=p/",
		"s3://bucket?region=eu-west-1&disable_https=true&s3ForcePathStyle=true",
		"gs://bucket?prefix=x/y/",
	} {
		b, err := objstore.Open(t.Context(), u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if _, ok := objstore.AsLocker(b); ok {
			t.Errorf("%s bucket is a Locker", u)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func TestCanonical(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	same := [][]string{
		{"mem://a", "mem://a/", "MEM://a"},
		{"mem://a?prefix=p/", "mem://a/?prefix=p/"},
		{"file://" + dir, "file://" + dir + "/", "file://localhost" + dir, "file://" + dir + "/x/..", "file:" + dir, "file://" + link},
		{"file://" + dir + "/new/store", "file://" + link + "/new/store", "file://" + link + "/new/./store/"},
		{"s3://b", "s3://b?region=us-east-1", "s3://b?region=eu-west-1&use_path_style=true"},
		{"s3://b?endpoint=http://m:9000&prefix=p/", "s3://b?prefix=p/&endpoint=http://m:9000&region=x"},
		{"gs://b", "gs://b?anonymous=true"},
		{"azblob://c?storage_account=x", "azblob://c?storage_account=x&protocol=https"},
	}
	seen := map[string]string{}
	for _, group := range same {
		want, err := objstore.Canonical(group[0])
		if err != nil {
			t.Fatalf("Canonical(%q): %v", group[0], err)
		}
		for _, u := range group[1:] {
			got, err := objstore.Canonical(u)
			if err != nil {
				t.Fatalf("Canonical(%q): %v", u, err)
			}
			if got != want {
				t.Errorf("Canonical(%q) = %q; want %q (as for %q)", u, got, want, group[0])
			}
		}
		if prev, dup := seen[want]; dup {
			t.Errorf("Canonical(%q) = Canonical(%q) = %q", group[0], prev, want)
		}
		seen[want] = group[0]
	}
	if got, _ := objstore.Canonical("file://" + dir); got != "file://"+real {
		t.Errorf("Canonical(file://%s) = %q; want file://%s", dir, got, real)
	}
	for _, pair := range [][2]string{
		{"mem://a", "mem://b"},
		{"mem://a", "mem://a?prefix=p/"},
		{"s3://b", "gs://b"},
		{"s3://b", "s3://b?endpoint=http://m:9000"},
		{"s3://b?prefix=p/", "s3://b?prefix=p/q/"},
		{"azblob://c?storage_account=x", "azblob://c?storage_account=y"},
	} {
		a, _ := objstore.Canonical(pair[0])
		b, _ := objstore.Canonical(pair[1])
		if a == b {
			t.Errorf("Canonical(%q) = Canonical(%q) = %q", pair[0], pair[1], a)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Canonical created a directory")
	}
}

// Two Opens of one mem name share objects, also after one is closed.
func TestMemSharedByName(t *testing.T) {
	ctx := t.Context()
	u := objstoretest.MemURL(t)
	a, err := objstore.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, "k", []byte("v"), true); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := objstore.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got, err := b.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Fatalf("Get after reopen = %q, %v; want v", got, err)
	}
	if _, ok := objstore.AsLocker(b); ok {
		t.Errorf("mem bucket is a Locker")
	}
	other, err := objstore.Open(ctx, u+"-other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Get(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("another name sees the object: %v", err)
	}
}
