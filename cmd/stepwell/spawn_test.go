package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// TestRunChildren: "stepwell run" shows a parent waiting for its children
// (children: N of M ended, their IDs) and a child's parent.
func TestRunChildren(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	f := &fixture{url: "file://" + t.TempDir()}
	q, err := queue.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.RunID == "fan":
			return steprunner.Spawn(make([]steprunner.Child, 5)), nil
		case s.RunID == "fan.s0.0":
			return steprunner.Succeed(nil), nil
		}
		return steprunner.AwaitSignal("go", 0), nil
	})
	rt, err := runtime.New(q, runner, terminal.Noop, runtime.WithPollInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "fan"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the parent to wait for 4 children", func() bool {
		st, err := rt.Status(ctx, "fan")
		return err == nil && st.WaitingFor == "children: 1 of 5 ended"
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out := f.ok(t, "run", "fan")
	for _, want := range []string{"children:  5 (fan.s0.0, fan.s0.1, fan.s0.2, ... 2 more)", "waiting for:  children: 1 of 5 ended"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("stepwell run fan: want %q in\n%s", want, out)
		}
	}
	var r runJSON
	f.okJSON(t, &r, "run", "fan.s0.3")
	if r.Parent != "fan" || len(r.Children) != 0 || r.State != "waiting" {
		t.Errorf("run fan.s0.3 --json: parent %q, children %v, state %s", r.Parent, r.Children, r.State)
	}
	f.okJSON(t, &r, "run", "fan")
	if len(r.Children) != 5 || r.Children[4] != "fan.s0.4" || r.WaitingFor != "children: 1 of 5 ended" {
		t.Errorf("run fan --json: children %v, waiting for %q", r.Children, r.WaitingFor)
	}
}
