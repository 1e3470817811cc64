package objstore_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

func TestCounting(t *testing.T) {
	ctx := t.Context()
	c := objstore.NewCounting(objstoretest.Open(t, objstoretest.MemURL(t)))
	if _, ok := any(c).(objstore.Locker); ok {
		t.Fatal("Counting implements Locker itself")
	}
	want := objstore.Counts{}
	check := func(what string) {
		t.Helper()
		if got := c.Counts(); got != want {
			t.Fatalf("after %s: Counts() =\n  %+v\nwant\n  %+v", what, got, want)
		}
	}
	check("nothing")

	if err := c.Put(ctx, "a", []byte("12345"), true); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "a", []byte("678"), true); !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}
	want.Puts, want.BytesWritten = 2, 8 // failed requests count too
	check("two Puts")

	if _, err := c.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	want.Gets, want.BytesRead = 2, 5
	check("two Gets")

	r, err := c.NewReader(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(r)
	r.Close()
	want.Gets, want.BytesRead = 3, 10
	check("NewReader")

	w, err := c.NewWriter(ctx, "b", false)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("abc"))
	w.Write([]byte("de"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Abort() // no request
	want.Puts, want.BytesWritten = 3, 13
	check("streamed write")

	w, err = c.NewWriter(ctx, "c", false)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("x"))
	w.Abort()
	w.Close() // misuse, makes no request
	want.BytesWritten = 14
	check("aborted write")

	before := c.Counts()
	if _, err := c.List(ctx, "nothing/"); err != nil {
		t.Fatal(err)
	}
	want.Lists = 1 // an empty listing is still a request
	check("empty List")
	for i := range 2500 {
		if err := c.Put(ctx, fmt.Sprintf("many/%04d", i), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	want.Puts += 2500
	if objs, err := c.List(ctx, "many/"); err != nil || len(objs) != 2500 {
		t.Fatalf("List = %d objects, %v", len(objs), err)
	}
	want.Lists += 3 // pages of 1000
	check("List of 2500")

	if err := c.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want.Deletes = 2
	check("Deletes")

	delta := c.Counts().Sub(before)
	wantDelta := objstore.Counts{Puts: 2500, Lists: 4, Deletes: 2}
	if delta != wantDelta {
		t.Errorf("Sub = %+v; want %+v", delta, wantDelta)
	}
	if got := delta.Requests(); got != 2506 {
		t.Errorf("Requests() = %d; want 2506", got)
	}
	if c.Unwrap() == nil {
		t.Error("Unwrap() = nil")
	}
}

func TestAsLocker(t *testing.T) {
	file := objstoretest.Open(t, objstoretest.FileURL(t))
	wrapped := objstoretest.NewFault(objstore.NewCounting(file), 1)
	l, ok := objstore.AsLocker(wrapped)
	if !ok {
		t.Fatal("AsLocker does not see the file bucket through Fault and Counting")
	}
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, ok := objstore.AsLocker(objstore.NewCounting(objstoretest.Open(t, objstoretest.MemURL(t)))); ok {
		t.Error("AsLocker found a lock on a mem bucket")
	}
	if _, ok := objstore.AsLocker(nil); ok {
		t.Error("AsLocker(nil) reported a Locker")
	}
}
