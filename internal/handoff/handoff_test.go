package handoff

import (
	"context"
	"testing"
)

func TestGive(t *testing.T) {
	s := &Slot[*int]{Queue: "q"}
	ctx := With(context.Background(), s)
	one, two := 1, 2
	if Give(context.Background(), "q", &one) {
		t.Fatal("Give without a slot in the context succeeded")
	}
	if Give(ctx, "other", &one) {
		t.Fatal("Give of another queue's job succeeded")
	}
	if Give(ctx, "q", "a string") {
		t.Fatal("Give of another job type succeeded")
	}
	if !Give(ctx, "q", &one) {
		t.Fatal("Give failed")
	}
	if Give(ctx, "q", &two) {
		t.Fatal("a second Give succeeded")
	}
	if j, ok := s.Next(); !ok || j != &one {
		t.Fatalf("Next = %v, %v", j, ok)
	}
}
