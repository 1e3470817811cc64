package testenv

import (
	"slices"
	"sync"
	"testing"
)

func TestBufferLinesAndConcurrentWrites(t *testing.T) {
	var lines []string
	b := &Buffer{OnLine: func(l string) { lines = append(lines, l) }}
	b.Write([]byte("one\ntw"))
	b.Write([]byte("o\nthree"))
	if want := []string{"one", "two"}; !slices.Equal(lines, want) {
		t.Fatalf("lines = %q, want %q", lines, want)
	}
	if got := b.String(); got != "one\ntwo\nthree" {
		t.Fatalf("String = %q", got)
	}
	var plain Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				plain.Write([]byte("x"))
				_ = plain.String()
			}
		}()
	}
	wg.Wait()
	if n := len(plain.String()); n != 800 {
		t.Fatalf("%d bytes written, want 800", n)
	}
}
