package handoff

import (
	"context"
	"testing"
)

func TestGive(t *testing.T) {
	s := &Slot[*int]{Queue: "q"}
	ctx := With(context.Background(), s)
	one, two := 1, 2
	if Give(context.Background(), "q", &one, nil) {
		t.Fatal("Give without a slot in the context succeeded")
	}
	if Give(ctx, "other", &one, nil) {
		t.Fatal("Give of another queue's job succeeded")
	}
	if Give(ctx, "q", "a string", nil) {
		t.Fatal("Give of another job type succeeded")
	}
	if !Give(ctx, "q", &one, "rec") {
		t.Fatal("Give failed")
	}
	if Give(ctx, "q", &two, nil) {
		t.Fatal("a second Give succeeded")
	}
	if j, c, ok := s.Next(); !ok || j != &one || c != "rec" {
		t.Fatalf("Next = %v, %v, %v", j, c, ok)
	}
}

// A slot is open to a refill only while its handler settles, before a
// job was handed to it, while its worker runs; once the worker took its
// next job (Next), no Give lands there.
func TestOpenAndNext(t *testing.T) {
	stopping := false
	s := &Slot[*int]{Queue: "q", JobID: "j", Stopping: func() bool { return stopping }}
	ctx := With(context.Background(), s)
	if _, _, ok := Open[*int](ctx); ok {
		t.Fatal("Open before Settling: the handler may work on after its settlement")
	}
	Settling[*int](ctx)
	if q, id, ok := Open[*int](ctx); !ok || q != "q" || id != "j" {
		t.Fatalf("Open while settling = %q, %q, %v", q, id, ok)
	}
	stopping = true
	if _, _, ok := Open[*int](ctx); ok {
		t.Fatal("Open in a stopping worker")
	}
	stopping = false
	if _, _, ok := s.Next(); ok {
		t.Fatal("Next found a job never given")
	}
	one := 1
	if Give(ctx, "q", &one, nil) {
		t.Fatal("Give after Next succeeded: the job would never run")
	}
	if _, _, ok := Open[*int](ctx); ok {
		t.Fatal("Open after Next")
	}
}

func TestCarried(t *testing.T) {
	if c := Carried[*int](context.Background()); c != nil {
		t.Fatalf("Carried without a slot = %v", c)
	}
	ctx := With(context.Background(), &Slot[*int]{Queue: "q", Carried: 7})
	if c := Carried[*int](ctx); c != 7 {
		t.Fatalf("Carried = %v, want 7", c)
	}
	if c := Carried[string](ctx); c != nil {
		t.Fatalf("Carried of another job type = %v", c)
	}
}

func TestDispatchedCarry(t *testing.T) {
	ctx := WithDispatched(context.Background(), "a", 1)
	ctx = WithDispatched(ctx, "b", 2)
	for id, want := range map[string]any{"a": 1, "b": 2, "c": nil} {
		if got := DispatchedCarry(ctx, id); got != want {
			t.Errorf("DispatchedCarry(%q) = %v, want %v", id, got, want)
		}
	}
	if got := DispatchedCarry(context.Background(), "a"); got != nil {
		t.Errorf("DispatchedCarry without a carry = %v", got)
	}
}

func TestPrefetchOf(t *testing.T) {
	if _, ok := PrefetchOf(context.Background()); ok {
		t.Fatal("PrefetchOf without one reported one")
	}
	want := Prefetch{Header: "h", Prefix: "p/"}
	if p, ok := PrefetchOf(WithPrefetch(context.Background(), want)); !ok || p != want {
		t.Fatalf("PrefetchOf = %+v, %v", p, ok)
	}
}
