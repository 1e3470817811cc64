package steprunner_test

import (
	"testing"

	"github.com/stepwell/stepwell/internal/stepmemo"
	"github.com/stepwell/stepwell/steprunner"
)

// TestRuntimeAccess: the runtime reads an Outcome's memory writes and
// next queue through internal/stepmemo (steprunner exports neither), and
// the writes it gets are its own: changing them does not change the
// Outcome. Fails if steprunner's init does not set the functions, or
// hands out the Outcome's own slice.
func TestRuntimeAccess(t *testing.T) {
	o := steprunner.Continue(nil).WithMemo("a", []byte("1")).WithMemo("b", nil).OnQueue("gpu")
	ws := stepmemo.Writes(o)
	if len(ws) != 2 || ws[0].Key != "a" || string(ws[0].Value) != "1" || ws[1].Key != "b" || ws[1].Value != nil {
		t.Fatalf("Writes = %+v, want a=1 then b deleted", ws)
	}
	ws[0] = stepmemo.Write{Key: "changed"}
	if again := stepmemo.Writes(o); again[0].Key != "a" {
		t.Errorf("changing Writes' result changed the Outcome: %+v", again)
	}
	if q, ok := stepmemo.NextQueue(o); q != "gpu" || !ok {
		t.Errorf("NextQueue = %q, %v, want gpu, true", q, ok)
	}
	if q, ok := stepmemo.NextQueue(steprunner.Succeed(nil).OnQueue("gpu")); ok {
		t.Errorf("NextQueue of Succeed = %q, true, want false", q)
	}
	if ws := stepmemo.Writes(steprunner.Succeed(nil)); ws != nil {
		t.Errorf("Writes of an Outcome without memory = %+v, want nil", ws)
	}
}
