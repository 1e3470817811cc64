package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
)

// TestHasStore: what counts as a store's own objects.
func TestHasStore(t *testing.T) {
	for i, tc := range []struct {
		keys []string
		want bool
	}{
		{nil, false},
		{[]string{"notes.txt", "sub/wal/00000000000000000001", "sub/owner"}, false},
		{[]string{"wal/README", "wal/0000000000000000001", "wal/00000000000000000001.txt", "snap/firefox/x"}, false},
		{[]string{"owner"}, false}, // not an owner object
		{[]string{"wal/00000000000000000001"}, true},
		{[]string{"wal/00000000000000000001.log"}, true},
		{[]string{"wal/18446744073709551615"}, true},
		{[]string{"snap/00000000000000000042"}, true},
		{[]string{"blob/x", "snap/00000000000000000042"}, true},
	} {
		b, err := objstore.Open(t.Context(), fmt.Sprintf("mem://%s?prefix=case%d/", t.Name(), i))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range tc.keys {
			if err := b.Put(t.Context(), k, []byte("x"), false); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := HasStore(context.Background(), b); got != tc.want || err != nil {
			t.Errorf("HasStore with %q = %v, %v; want %v", tc.keys, got, err, tc.want)
		}
		b.Close()
	}
}
