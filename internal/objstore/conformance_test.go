package objstore_test

import (
	"testing"

	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/objstore/objstoretest"
)

func TestConformanceMem(t *testing.T) {
	objstoretest.RunConformanceURL(t, func(t *testing.T) string { return objstoretest.MemURL(t) })
}

func TestConformanceMemPrefix(t *testing.T) {
	objstoretest.RunConformanceURL(t, func(t *testing.T) string {
		return objstoretest.MemURL(t) + "?prefix=tenant/a/"
	})
}

func TestConformanceFile(t *testing.T) {
	objstoretest.RunConformanceURL(t, func(t *testing.T) string { return objstoretest.FileURL(t) })
}

func TestConformanceCounting(t *testing.T) {
	objstoretest.RunConformance(t, func(t *testing.T) objstore.Bucket {
		return objstore.NewCounting(objstoretest.Open(t, objstoretest.FileURL(t)))
	})
}

func TestConformanceFaultOff(t *testing.T) {
	objstoretest.RunConformance(t, func(t *testing.T) objstore.Bucket {
		return objstoretest.NewFault(objstoretest.Open(t, objstoretest.MemURL(t)), 1)
	})
}

// Two stores in one bucket under different prefixes do not see each other.
func TestMemPrefixIsolation(t *testing.T) {
	base := objstoretest.MemURL(t)
	a := objstoretest.Open(t, base+"?prefix=a/")
	b := objstoretest.Open(t, base+"?prefix=b/")
	whole := objstoretest.Open(t, base)
	if err := a.Put(t.Context(), "k", []byte("a"), true); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(t.Context(), "k", []byte("b"), true); err != nil {
		t.Fatal(err)
	}
	objs, err := whole.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []objstore.ObjectInfo{{Key: "a/k", Size: 1}, {Key: "b/k", Size: 1}}
	if len(objs) != 2 || objs[0] != want[0] || objs[1] != want[1] {
		t.Fatalf("List = %v; want %v", objs, want)
	}
	objs, err = a.List(t.Context(), "")
	if err != nil || len(objs) != 1 || objs[0].Key != "k" {
		t.Fatalf("prefixed List = %v, %v; want [k]", objs, err)
	}
}
