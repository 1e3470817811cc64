package queuex

import "testing"

type state uint8

func TestStateSet(t *testing.T) {
	if got := StateSet[state](); got != 0 {
		t.Errorf("StateSet() = %b, want 0", got)
	}
	if got, want := StateSet(state(1), state(2), state(5)), States(1<<1|1<<2|1<<5); got != want {
		t.Errorf("StateSet(1, 2, 5) = %b, want %b", got, want)
	}
}

// TestGet: Get returns what Register registered for the same types, and
// panics for others (a caller naming the wrong types fails at init).
func TestGet(t *testing.T) {
	defer func(prev any) { registered = prev }(registered)
	a := &API[int, int, int, int, int, int]{}
	Register(a)
	if Get[int, int, int, int, int, int]() != a {
		t.Fatal("Get did not return the registered API")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Get with other types did not panic")
		}
	}()
	Get[string, int, int, int, int, int]()
}
