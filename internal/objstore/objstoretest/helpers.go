package objstoretest

import (
	"context"
	"net/url"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/testenv"
)

// MemURL returns the URL of a new, empty mem:// store, named after the test
// (testenv.MemURL). Its objects stay in memory until the process exits.
func MemURL(t testing.TB) string {
	t.Helper()
	return testenv.MemURL(t.Name())
}

// FileURL returns the URL of a new, empty file:// store in a temporary
// directory removed when the test ends.
func FileURL(t testing.TB) string {
	t.Helper()
	return (&url.URL{Scheme: "file", Path: t.TempDir()}).String()
}

// Open opens rawURL, failing the test on error, and closes the bucket when
// the test ends.
func Open(t testing.TB, rawURL string) objstore.Bucket {
	t.Helper()
	b, err := objstore.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("objstore.Open(%q): %v", rawURL, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close(%q): %v", rawURL, err)
		}
	})
	return b
}
