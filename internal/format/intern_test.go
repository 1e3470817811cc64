package format

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestIntern(t *testing.T) {
	a, b := intern([]byte("intern-test-queue")), intern([]byte("intern-test-queue"))
	if a != "intern-test-queue" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("two reads of a name: %q and %q, not one string", a, b)
	}
	if c := intern([]byte("intern-test-other")); c != "intern-test-other" || unsafe.StringData(c) == unsafe.StringData(a) {
		t.Fatalf("another name read as %q", c)
	}
	long := strings.Repeat("x", internLen+1)
	if l1, l2 := intern([]byte(long)), intern([]byte(long)); l1 != long || unsafe.StringData(l1) == unsafe.StringData(l2) {
		t.Fatal("a name over internLen bytes was interned")
	}
	if allocs := testing.AllocsPerRun(100, func() { intern([]byte("intern-test-queue")) }); allocs != 0 {
		t.Fatalf("a known name allocated %v times", allocs)
	}
	// Past internMax names, the table grows no more, and names still
	// read right.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range internMax {
				want := fmt.Sprintf("intern-fill-%d-%d", g, i)
				if got := intern([]byte(want)); got != want {
					t.Errorf("read %q as %q", want, got)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(*internTab.Load()); n > internMax {
		t.Fatalf("the table holds %d names, over %d", n, internMax)
	}
	if got := intern([]byte("intern-after-full")); got != "intern-after-full" {
		t.Fatalf("a name read after the table filled: %q", got)
	}
}

func TestReaderName(t *testing.T) {
	b := AppendStringMap(AppendString(nil, "q1"), map[string]string{"k": "v"})
	r := NewReader(b)
	if n := r.Name(); n != "q1" {
		t.Fatalf("Name = %q", n)
	}
	if m := r.StringMap(); len(m) != 1 || m["k"] != "v" {
		t.Fatalf("StringMap = %v", m)
	}
	if err := r.Finish(); err != nil {
		t.Fatal(err)
	}
}
