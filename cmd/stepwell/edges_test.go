package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// TestStepDeadWhileCancelling: a run whose step job died while a cancel was
// pending (state cancelling) shows step_dead, in "run" and "runs", with
// the stuck note; it used to be computed for pending runs only.
func TestStepDeadWhileCancelling(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	url := "file://" + dir
	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	never := steprunner.RunnerFunc(func(context.Context, *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Outcome{}, nil
	})
	rt, err := runtime.New(q, never, terminal.Noop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "c-1", Input: []byte("x"), MaxAttemptsPerStep: 1}); err != nil {
		t.Fatal(err)
	}
	job, err := claimOne(ctx, q, "workflow-steps")
	if err != nil || job == nil {
		t.Fatalf("claim: %v, %v", err, job)
	}
	if ok, err := rt.Cancel(ctx, "c-1"); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The next open dead-letters the claimed job: its worker is gone and it
	// was on its last attempt.
	if q, err = queue.Open(ctx, url); err != nil {
		t.Fatal(err)
	}
	if j, err := q.GetJob(ctx, job.ID); err != nil || j.State != queue.JobDead {
		t.Fatalf("step job after reopen: %v, %+v", err, j)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}

	f := &fixture{url: url, dir: dir}
	var r runJSON
	f.okJSON(t, &r, "run", "c-1")
	if r.State != "cancelling" || !r.StepDead || r.StepJob == nil || r.StepJob.State != "dead" {
		t.Errorf("run c-1 = %+v, want cancelling with step_dead", r)
	}
	if out := f.ok(t, "run", "c-1"); !strings.Contains(out, "cancelling (step dead)") || !strings.Contains(out, "stepwell requeue "+job.ID) {
		t.Errorf("run c-1 text lacks the dead step and its advice:\n%s", out)
	}
	var runs runsJSON
	f.okJSON(t, &runs, "runs")
	if len(runs.Runs) != 1 || !runs.Runs[0].StepDead || runs.Runs[0].State != "cancelling" {
		t.Errorf("runs = %+v, want c-1 cancelling with step_dead", runs)
	}
}

// TestJSONErrors: with --json every failure prints one documented JSON
// object on stdout, {"error": ..., "code": EXIT_CODE}, and nothing on
// stderr, wherever --json stands.
func TestJSONErrors(t *testing.T) {
	f := newFixture(t)
	env := map[string]string{storeEnv: f.url}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		msg  string
	}{
		{"no store", nil, []string{"--json", "stats"}, exitUsage, "no store"},
		{"bad URL", nil, []string{"stats", "--store", "nope://x", "--json"}, exitUsage, "invalid store URL"},
		{"missing run", env, []string{"run", "order-99", "--json"}, exitNotFound, `run "order-99" not found`},
		{"missing job", env, []string{"--json", "job", "nope"}, exitNotFound, `job "nope" not found`},
		{"no command", env, []string{"--json"}, exitUsage, "no command"},
		{"unknown command", env, []string{"--json", "frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", env, []string{"stats", "--nope", "--json"}, exitUsage, "flag provided but not defined: -nope"},
		{"unknown global flag", env, []string{"--json", "--nope", "stats"}, exitUsage, "flag provided but not defined: -nope"},
		{"missing argument", env, []string{"run", "--json"}, exitUsage, "missing argument"},
		{"bad state", env, []string{"runs", "--state", "done", "--json"}, exitUsage, "invalid --state"},
		{"help on unknown command", env, []string{"--json", "help", "nope"}, exitUsage, "unknown command"},
		{"job not dead", env, []string{"--json", "requeue", "nope"}, exitNotFound, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.env, tc.args...)
			if r.code != tc.code || r.stderr != "" {
				t.Errorf("stepwell %q: exit %d, stderr %q; want exit %d, nothing on stderr", tc.args, r.code, r.stderr, tc.code)
			}
			var got map[string]any
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			if err := dec.Decode(&got); err != nil || dec.More() {
				t.Fatalf("stepwell %q: stdout is not one JSON document (%v):\n%s", tc.args, err, r.stdout)
			}
			msg, _ := got["error"].(string)
			if len(got) != 2 || got["code"] != float64(tc.code) || !strings.Contains(msg, tc.msg) {
				t.Errorf("stepwell %q: %s; want {\"error\": \"...%s...\", \"code\": %d}", tc.args, r.stdout, tc.msg, tc.code)
			}
		})
	}
	// Text mode is unchanged: the message on stderr, stdout empty.
	if r := runCLI(t, env, "run", "order-99"); r.code != exitNotFound || r.stdout != "" ||
		!strings.HasPrefix(r.stderr, `stepwell run: run "order-99" not found`) {
		t.Errorf("text error: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestHelpListsEveryCommand: the usage text names every command, bench
// included, and "stepwell help CMD" and "stepwell CMD --help" print that
// command's usage.
func TestHelpListsEveryCommand(t *testing.T) {
	usage := runCLI(t, nil, "--help")
	if usage.code != exitOK {
		t.Fatalf("--help: exit %d", usage.code)
	}
	for _, cmd := range commands() {
		if !strings.Contains(usage.stdout, "\n  "+cmd.name+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd.name, usage.stdout)
		}
		for _, args := range [][]string{{"help", cmd.name}, {cmd.name, "--help"}, {"--json", "help", cmd.name}} {
			r := runCLI(t, nil, args...)
			if r.code != exitOK || !strings.HasPrefix(r.stdout, "usage: stepwell "+cmd.name+" ") || r.stderr != "" {
				t.Errorf("stepwell %q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
			}
		}
	}
}
