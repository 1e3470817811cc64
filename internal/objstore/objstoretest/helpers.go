package objstoretest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
)

var memSeq atomic.Int64

// MemURL returns the URL of a new, empty mem:// store, named after the test.
// Its objects stay in memory until the process exits.
func MemURL(t testing.TB) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '-'
	}, t.Name())
	return fmt.Sprintf("mem://%s-%d", name, memSeq.Add(1))
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
