package engine

import (
	"context"
	"maps"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
)

// TestPutInlineGetKeyDeleteKey: the key-building forms do what Put, Get
// and Delete do with the key and value built apart, and survive a reopen.
func TestPutInlineGetKeyDeleteKey(t *testing.T) {
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	ctx := context.Background()
	if err := e.Update(ctx, func(tx *Tx) error {
		tx.PutInline("kv/", []byte("a"), []byte("one"))
		tx.PutInline("kv/", []byte("b"), nil)
		tx.PutInline("kv/", []byte("c"), []byte("three"))
		if v, ok := tx.GetKey("kv/", []byte("a")); !ok || string(v) != string(Inline([]byte("one"))) {
			t.Errorf("GetKey(kv/a) = %q, %v", v, ok)
		}
		if _, ok := tx.GetKey("kv/", []byte("x")); ok {
			t.Error("GetKey(kv/x) found a missing key")
		}
		if !tx.DeleteKey("kv/", []byte("c")) || tx.DeleteKey("kv/", []byte("c")) {
			t.Error("DeleteKey(kv/c): want true, then false")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkStateAndReopen(t, e, reopen, map[string]string{"kv/a": "one", "kv/b": ""})
}

// TestPutInGetInDeleteIn: the string forms do what Put, Get and Delete
// do with the key built apart; PutIn copies the value (the caller may
// reuse it), and the state survives a reopen.
func TestPutInGetInDeleteIn(t *testing.T) {
	b, reopen := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	ctx := context.Background()
	if err := e.Update(ctx, func(tx *Tx) error {
		val := Inline([]byte("one"))
		tx.PutIn("j/", "a", val)
		val[1] = 'X' // reused by the caller: the tree keeps its copy
		tx.PutIn("j/", "b", Inline(nil))
		tx.PutIn("j/", "c", Inline([]byte("three")))
		if v, ok := tx.GetIn("j/", "a"); !ok || string(v) != string(Inline([]byte("one"))) {
			t.Errorf("GetIn(j/a) = %q, %v", v, ok)
		}
		if _, ok := tx.GetIn("j/", "x"); ok {
			t.Error("GetIn(j/x) found a missing key")
		}
		if !tx.DeleteIn("j/", "c") || tx.DeleteIn("j/", "c") {
			t.Error("DeleteIn(j/c): want true, then false")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkStateAndReopen(t, e, reopen, map[string]string{"j/a": "one", "j/b": ""})
}

// checkStateAndReopen checks that e's state is want, closes e, and checks
// that a reopen of its bucket finds the same state.
func checkStateAndReopen(t *testing.T, e *Engine, reopen func() objstore.Bucket, want map[string]string) {
	t.Helper()
	if got := dump(t, e); !maps.Equal(got, want) {
		t.Fatalf("state %v, want %v", got, want)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, Options{Bucket: reopen()})
	defer e.Close(context.Background())
	if got := dump(t, e); !maps.Equal(got, want) {
		t.Fatalf("reopened: state %v, want %v", got, want)
	}
}
