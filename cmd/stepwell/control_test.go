package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// approvalRunner awaits the signal "approval" at step 0 (for an hour), and
// succeeds at step 1 with the signal's payload.
var approvalRunner = steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	if s.Number == 0 {
		return steprunner.AwaitSignal("approval", time.Hour), nil
	}
	return steprunner.Succeed(s.Payload), nil
})

// runUntil runs a Runtime with approvalRunner on url until cond holds for
// run id's status.
func runUntil(t *testing.T, url, id string, submit bool, cond func(runtime.RunStatus) bool) runtime.RunStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(context.Background())
	rt, err := runtime.New(q, approvalRunner, nil, runtime.WithPollInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if submit {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: id, Input: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for {
		st, err := rt.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s: %v; last status %+v", id, ctx.Err(), st)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestSignalPauseResume: "run" shows what a waiting run waits for, and
// signal, pause and resume steer it as cancel and retry do (--json, exit
// codes 1, 2 and 4).
func TestSignalPauseResume(t *testing.T) {
	dir := t.TempDir()
	f := &fixture{url: "file://" + dir, dir: dir}
	runUntil(t, f.url, "refund-7", true, func(st runtime.RunStatus) bool { return st.State == runtime.StateWaiting })

	var r runJSON
	f.okJSON(t, &r, "run", "refund-7")
	if r.State != "waiting" || r.WaitingFor != "approval" || r.WaitDeadline == nil ||
		time.Until(*r.WaitDeadline) < 50*time.Minute || r.Paused {
		t.Errorf("waiting run = %+v", r)
	}
	if out := f.ok(t, "run", "refund-7"); !regexp.MustCompile(`(?m)^waiting for: +signal "approval" \(times out at 20`).MatchString(out) {
		t.Errorf("run of a waiting run does not say what it waits for:\n%s", out)
	}

	var p pauseJSON
	f.okJSON(t, &p, "pause", "refund-7")
	if p != (pauseJSON{RunID: "refund-7", Changed: true, State: "paused"}) {
		t.Errorf("pause = %+v", p)
	}
	if out := f.ok(t, "pause", "refund-7"); out != "run refund-7 was paused already (paused)\n" {
		t.Errorf("second pause: %q", out)
	}
	if out := f.ok(t, "run", "refund-7"); !regexp.MustCompile(`(?m)^paused: +yes \(stepwell resume refund-7\)`).MatchString(out) {
		t.Errorf("run of a paused run:\n%s", out)
	}

	var s signalJSON
	f.okJSON(t, &s, "signal", "refund-7", "approval", "--payload", "by ops")
	if s != (signalJSON{RunID: "refund-7", Signal: "approval", Woke: true, State: "paused"}) {
		t.Errorf("signal of a paused waiting run = %+v", s)
	}
	payload := filepath.Join(dir, "..", "payload")
	if err := os.WriteFile(payload, []byte("late"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := f.ok(t, "signal", "refund-7", "approval", "--payload-file", payload); !strings.Contains(out, "kept in the run's mailbox") {
		t.Errorf("signal of a run that does not wait for it: %q", out)
	}

	f.okJSON(t, &p, "resume", "refund-7")
	if p != (pauseJSON{RunID: "refund-7", Changed: true, State: "pending"}) {
		t.Errorf("resume = %+v", p)
	}
	if out := f.ok(t, "resume", "refund-7"); out != "run refund-7 is not paused: nothing to resume (pending)\n" {
		t.Errorf("second resume: %q", out)
	}

	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"signal", "nope", "approval"}, exitNotFound, `run "nope" not found`},
		{[]string{"pause", "nope"}, exitNotFound, `run "nope" not found`},
		{[]string{"resume", "nope"}, exitNotFound, `run "nope" not found`},
		{[]string{"signal", "refund-7", "a/b"}, exitUsage, "invalid signal name"},
		{[]string{"signal", "refund-7"}, exitUsage, "missing argument"},
		{[]string{"signal", "refund-7", "x", "--payload", "a", "--payload-file", payload}, exitUsage, "exclude each other"},
		// An endless payload is refused at the limit, not read whole (it
		// used to grow until the process ran out of memory).
		{[]string{"signal", "refund-7", "x", "--payload-file", "/dev/zero"}, exitFailed, "payload over the limit"},
		{[]string{"signal", "refund-7", "x", "--payload-file", dir}, exitUsage, "--payload-file"},
		{[]string{"pause", "a/b"}, exitUsage, "invalid run ID"},
	} {
		if r := f.on(t, tc.args...); r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) || r.stdout != "" {
			t.Errorf("stepwell %q: exit %d, stdout %q, stderr %q; want exit %d, %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stderr)
		}
	}

	// The service runs the resumed step with the signal's payload.
	st := runUntil(t, f.url, "refund-7", false, func(st runtime.RunStatus) bool { return st.State.Terminal() })
	if st.State != runtime.StateSucceeded || string(st.Result) != "by ops" {
		t.Errorf("after resume: %+v", st)
	}
	for _, args := range [][]string{{"pause", "refund-7"}, {"resume", "refund-7"}, {"signal", "refund-7", "approval"}} {
		if r := f.on(t, append(args, "--json")...); r.code != exitFailed || !strings.Contains(r.stdout, "run has ended") {
			t.Errorf("stepwell %q of an ended run: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
}

// TestControlHelpBestEffort: the help of signal, pause and resume says
// that what they report (woke, changed) is best effort, read before the
// write. Fails if a command's help drops it.
func TestControlHelpBestEffort(t *testing.T) {
	for _, name := range []string{"signal", "pause", "resume"} {
		r := runCLI(t, nil, "help", name)
		if r.code != exitOK || !strings.Contains(r.stdout, "best effort") || !strings.Contains(r.stdout, "just before") {
			t.Errorf("stepwell help %s: exit %d, stdout %q; want it to say the report is best effort", name, r.code, r.stdout)
		}
	}
}
