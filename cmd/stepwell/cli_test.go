package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/bench"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// holdEnv makes the test binary, re-executed as a child, hold a store open
// as its writer, not in cluster mode, until its stdin closes (see
// TestWriteCommandsWhileLocked). serveEnv and cliEnv are the other roles
// of a child (see cluster_test.go).
const holdEnv = "STEPWELL_CLI_TEST_HOLD"

func TestMain(m *testing.M) {
	if code, ok := bench.Helper(); ok { // a process of a cluster bench
		os.Exit(code)
	}
	if dir := os.Getenv(holdEnv); dir != "" {
		holdStore(dir)
		return
	}
	if url := os.Getenv(serveEnv); url != "" {
		serveStore(url)
		return
	}
	if os.Getenv(cliEnv) != "" {
		os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	testenv.Main(m) // stops the MinIO server of TestWriteCommandsJoinCluster

}

func holdStore(dir string) {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold: open:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) // until the parent closes our stdin
	if err := q.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hold: close:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// fixture is a closed file:// store holding:
//
//	order-1  succeeded: step 0 continues, step 1 succeeds with "shipped";
//	         its memory: address "12 Main St", label (3 binary bytes)
//	order-2  failed: step 0 fails once, then permanently; its job is dead
//	order-3  pending at step 0
//	order-4  stuck: its step 0 job died with its worker on the last attempt
//	email-1  a dead job of the plain queue "emails"
//
// and two delivered notifications.
type fixture struct {
	url      string
	dir      string
	stuckJob string // order-4's dead step job
}

// deadEmail puts job email-1 of queue emails, payload "hello", in the
// dead letters ("smtp: 550 mailbox unavailable").
func deadEmail(ctx context.Context, t *testing.T, q *queue.Queue, headers map[string]string) {
	t.Helper()
	if _, err := q.Enqueue(ctx, "emails", []byte("hello"), queue.EnqueueOptions{JobID: "email-1", MaxAttempts: 1, Headers: headers}); err != nil {
		t.Fatal(err)
	}
	j, err := claimOne(ctx, q, "emails")
	if err != nil || j == nil {
		t.Fatalf("claim email-1: %v, %v", err, j)
	}
	if err := q.DeadLetter(ctx, j, "smtp: 550 mailbox unavailable"); err != nil {
		t.Fatal(err)
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	f := &fixture{url: "file://" + dir, dir: dir}

	q, err := queue.Open(ctx, f.url, queue.WithRetryBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.RunID == "order-1" && s.Number == 0:
			return steprunner.Continue([]byte("reserved")).WithMemo("address", []byte("12 Main St")), nil
		case s.RunID == "order-1":
			return steprunner.Succeed([]byte("shipped")).WithMemo("label", []byte{0, 1, 2}), nil
		case s.RunID == "order-2" && s.Attempt == 1:
			return steprunner.Outcome{}, errors.New("boom: connection reset")
		case s.RunID == "order-2":
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("card declined"))
		}
		return steprunner.Outcome{}, steprunner.Permanent(fmt.Errorf("unexpected step %d of %s", s.Number, s.RunID))
	})
	ended := make(chan string, 16)
	hook := terminal.HookFunc(func(_ context.Context, o terminal.Outcome) error {
		ended <- o.RunID
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(5*time.Millisecond), runtime.WithWorkerName("fixture"))
	if err != nil {
		t.Fatal(err)
	}
	submit := func(rt *runtime.Runtime, spec runtime.RunSpec) {
		t.Helper()
		if _, err := rt.Submit(ctx, spec); err != nil {
			t.Fatalf("submit %s: %v", spec.RunID, err)
		}
	}
	submit(rt, runtime.RunSpec{RunID: "order-1", Input: []byte("order one"), Headers: map[string]string{"tenant": "acme"}})
	submit(rt, runtime.RunSpec{RunID: "order-2", Input: []byte{0x00, 0x01, 0xfe, 0xff}})

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case id := <-ended:
			seen[id] = true
		case <-ctx.Done():
			t.Fatalf("runs did not end: %v (ended: %v)", ctx.Err(), seen)
		}
	}
	// order-2's step died: the runtime also gets a notice of it (its run
	// has ended, so the notice is only acknowledged). Let it be handled
	// before stopping, so that the one notice left is order-4's below.
	testenv.Eventually(t, 60*time.Second, "order-2's dead-step notice to be handled", func() bool {
		s, err := q.Stats(ctx, "workflow-steps.dead")
		if err != nil {
			t.Fatal(err)
		}
		return s.Pending+s.Scheduled+s.Claimed == 0
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// order-4: claim its step as a worker would, and "die": the next Open
	// dead-letters it, as it was on its last attempt.
	submit(rt, runtime.RunSpec{RunID: "order-4", Input: []byte("order four"), MaxAttemptsPerStep: 1})
	job, err := claimOne(ctx, q, "workflow-steps")
	if err != nil || job == nil || job.Headers[runtime.HeaderRunID] != "order-4" {
		t.Fatalf("claim order-4's step: %v, %+v", err, job)
	}
	f.stuckJob = job.ID
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if q, err = queue.Open(ctx, f.url); err != nil {
		t.Fatal(err)
	}
	if j, err := q.GetJob(ctx, f.stuckJob); err != nil || j.State != queue.JobDead {
		t.Fatalf("order-4's step after reopen: %v, %+v", err, j)
	}
	if rt, err = runtime.New(q, runner, hook, runtime.WithWorkerName("fixture")); err != nil {
		t.Fatal(err)
	}
	submit(rt, runtime.RunSpec{RunID: "order-3", Input: []byte("order three"), Headers: map[string]string{"tenant": "globex"}})

	deadEmail(ctx, t, q, map[string]string{"to": "ops@example.com"})
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// result is what one in-process CLI invocation produced.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI in-process with the given environment.
func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, func(k string) string { return env[k] }, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// on runs the CLI on f's store (given by --store).
func (f *fixture) on(t *testing.T, args ...string) result {
	t.Helper()
	return runCLI(t, nil, append([]string{"--store", f.url}, args...)...)
}

// ok runs the CLI on f's store and fails the test unless it exits 0.
func (f *fixture) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := f.on(t, args...)
	if r.code != exitOK {
		t.Fatalf("stepwell %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// okJSON runs the CLI with --json and decodes its output into v.
func (f *fixture) okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := f.ok(t, append(args, "--json")...)
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stepwell %s --json: %v\n%s", strings.Join(args, " "), err, out)
	}
	if dec.More() {
		t.Fatalf("stepwell %s --json: more than one JSON document:\n%s", strings.Join(args, " "), out)
	}
}

var (
	ulidRE    = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	timeRE    = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z`)
	ageRE     = regexp.MustCompile(`(?m)\b(\d+h)?(\d+m)?\d+s$`)
	storageRE = regexp.MustCompile(`(?m)^(storage:.*)$`)
	digitsRE  = regexp.MustCompile(`\d+`)
	epochRE   = regexp.MustCompile(`\bepoch \d+`)
	// durRE: a history timeline's offsets and durations.
	durRE = regexp.MustCompile(`\+?\b\d+(\.\d+)?(ns|µs|ms|s)\b`)
	// timelineRE: the rows of a history timeline, whose column widths
	// follow the durations.
	timelineRE = regexp.MustCompile(`(?m)^  (#|\d+)  .*$`)
	spacesRE   = regexp.MustCompile(` {2,}`)
)

// normalize replaces what changes from run to run: generated IDs, times,
// ages, writer epochs and the request counts of loading the store.
func normalize(s string) string {
	s = ulidRE.ReplaceAllString(s, "<ULID>")
	s = timeRE.ReplaceAllString(s, "<TIME>")
	s = ageRE.ReplaceAllString(s, "<AGE>")
	s = epochRE.ReplaceAllString(s, "epoch <N>")
	s = durRE.ReplaceAllString(s, "<DUR>")
	s = timelineRE.ReplaceAllStringFunc(s, func(line string) string { return spacesRE.ReplaceAllString(line, "  ") })
	return storageRE.ReplaceAllStringFunc(s, func(line string) string {
		return digitsRE.ReplaceAllString(line, "N")
	})
}

// checkGolden compares got with testdata/NAME.golden (rewritten with -update).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update to accept):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

func TestGolden(t *testing.T) {
	f := newFixture(t)
	var dead deadJSON
	f.okJSON(t, &dead, "dead", "--queue", "workflow-steps")
	var order2Job string
	for _, d := range dead.DeadJobs {
		if d.RunID == "order-2" {
			order2Job = d.ID
		}
	}
	if order2Job == "" {
		t.Fatalf("no dead job of order-2 in %+v", dead)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stats", []string{"stats"}},
		{"stats_queue", []string{"stats", "--queue", "emails"}},
		{"queues", []string{"queues"}},
		{"runs", []string{"runs"}},
		{"runs_failed", []string{"runs", "--state", "failed"}},
		{"runs_limit", []string{"runs", "--limit", "2"}},
		{"run_succeeded", []string{"run", "order-1"}},
		{"run_failed", []string{"run", "order-2"}},
		{"run_pending", []string{"run", "order-3"}},
		{"run_stuck", []string{"run", "order-4"}},
		{"dead", []string{"dead"}},
		{"dead_emails", []string{"dead", "--queue", "emails"}},
		{"job_email", []string{"job", "email-1"}},
		{"job_dead_step", []string{"job", order2Job}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGolden(t, tc.name, normalize(f.ok(t, tc.args...)))
		})
	}
}

func TestJSON(t *testing.T) {
	f := newFixture(t)

	var stats statsJSON
	f.okJSON(t, &stats, "stats")
	counts := map[string]queueStatsJSON{}
	for _, s := range stats.Queues {
		counts[s.Queue] = s
	}
	if s := counts["workflow-steps"]; s.Pending != 1 || s.Dead != 2 || s.Claimed != 0 || s.OldestPendingAgeSeconds <= 0 {
		t.Errorf("workflow-steps stats = %+v, want 1 pending (with an age), 2 dead", s)
	}
	if s := counts["emails"]; s.Dead != 1 || s.Pending != 0 {
		t.Errorf("emails stats = %+v, want 1 dead", s)
	}
	// workflow-steps.dead holds the runtime's notices of dead step jobs:
	// internal, listed only with --all (or by name).
	if _, ok := counts["workflow-notify"]; !ok || len(stats.Queues) != 3 {
		t.Errorf("stats queues = %+v, want emails, workflow-notify, workflow-steps", stats.Queues)
	}
	f.okJSON(t, &stats, "stats", "--all")
	if len(stats.Queues) != 4 || stats.Queues[3].Queue != "workflow-steps.dead" || stats.Queues[3].Pending != 1 {
		t.Errorf("stats --all queues = %+v, want workflow-steps.dead too, with a pending notice", stats.Queues)
	}
	f.okJSON(t, &stats, "stats", "--queue", "workflow-steps.dead")
	if len(stats.Queues) != 1 || stats.Queues[0].Pending != 1 {
		t.Errorf("stats --queue workflow-steps.dead = %+v", stats.Queues)
	}
	if stats.Storage.Keys == 0 || stats.Storage.Puts != 0 || stats.Storage.Deletes != 0 {
		t.Errorf("storage = %+v: want keys, and no writes by a read-only open", stats.Storage)
	}

	var queues struct {
		Queues []string `json:"queues"`
	}
	f.okJSON(t, &queues, "queues")
	if got := strings.Join(queues.Queues, ","); got != "emails,workflow-notify,workflow-steps" {
		t.Errorf("queues = %s", got)
	}
	f.okJSON(t, &queues, "queues", "--all")
	if got := strings.Join(queues.Queues, ","); got != "emails,workflow-notify,workflow-steps,workflow-steps.dead" {
		t.Errorf("queues --all = %s", got)
	}

	var runs runsJSON
	f.okJSON(t, &runs, "runs")
	want := map[string]string{"order-1": "succeeded", "order-2": "failed", "order-3": "pending", "order-4": "pending"}
	if len(runs.Runs) != len(want) || runs.Truncated {
		t.Fatalf("runs = %+v, want 4, not truncated", runs)
	}
	for _, r := range runs.Runs {
		if r.State != want[r.RunID] || r.SubmittedAt == nil || (r.EndedAt != nil) != (r.State != "pending") {
			t.Errorf("run %+v: want state %s, submitted, ended iff finished", r, want[r.RunID])
		}
		// order-2 failed with its step job dead; order-4 is stuck on its.
		if r.StepDead != (r.RunID == "order-2" || r.RunID == "order-4") {
			t.Errorf("run %s: step_dead = %v", r.RunID, r.StepDead)
		}
	}
	f.okJSON(t, &runs, "runs", "--state", "pending", "--limit", "1")
	if len(runs.Runs) != 1 || runs.Runs[0].RunID != "order-3" || !runs.Truncated {
		t.Errorf("runs --state pending --limit 1 = %+v, want order-3, truncated", runs)
	}

	var r1 runJSON
	f.okJSON(t, &r1, "run", "order-1")
	if r1.State != "succeeded" || string(r1.Result) != "shipped" || r1.ResultText == nil || *r1.ResultText != "shipped" ||
		r1.Step != 1 || r1.Headers["tenant"] != "acme" || r1.StepJob != nil || r1.CurrentJob != "" || r1.Queue != "workflow-steps" {
		t.Errorf("run order-1 = %+v", r1)
	}
	if m := r1.Memory; len(m) != 2 || m[0].Key != "address" || m[0].ValueText == nil || *m[0].ValueText != "12 Main St" ||
		m[1].Key != "label" || m[1].Size != 3 || m[1].ValueText != nil || string(m[1].Value) != "\x00\x01\x02" ||
		r1.MemoryBytes != 7+10+5+3 {
		t.Errorf("run order-1 memory = %+v (%d bytes)", m, r1.MemoryBytes)
	}
	if h := r1.History; len(h) != 4 || r1.HistoryDropped != 0 ||
		h[0].Kind != runtime.HistorySubmitted || h[1].Kind != runtime.HistoryContinue || h[1].Preview != "reserved" ||
		h[2].Kind != runtime.HistorySucceed || h[2].ResultSize != 7 || h[2].Worker != "fixture" ||
		h[3].Kind != runtime.HistoryHookDelivered {
		t.Errorf("run order-1 history = %+v", h)
	}
	// The raw document: result is base64, absent values are null.
	raw := f.ok(t, "run", "order-1", "--json")
	for _, s := range []string{`"result": "c2hpcHBlZA=="`, `"step_job": null`, `"input_sha256": "`, `"kind": "succeed"`, `"history_dropped": 0`} {
		if !strings.Contains(raw, s) {
			t.Errorf("run order-1 --json lacks %s:\n%s", s, raw)
		}
	}

	var r2 runJSON
	f.okJSON(t, &r2, "run", "order-2")
	if r2.State != "failed" || r2.Error != "card declined" || r2.Result != nil || r2.StepJob == nil || !r2.StepDead {
		t.Fatalf("run order-2 = %+v", r2)
	}
	if h := r2.History; len(h) != 4 || h[1].Kind != runtime.HistoryError || h[1].Error != "boom: connection reset" ||
		h[1].Due.IsZero() || h[2].Kind != runtime.HistoryError || h[2].Attempt != 2 || h[2].Error != "card declined" {
		t.Errorf("run order-2 history = %+v", h)
	}
	if j := r2.StepJob; j.State != "dead" || j.Attempt != 2 || len(j.History) != 2 ||
		j.History[0].Error != "boom: connection reset" || j.History[1].Error != "card declined" ||
		j.PayloadSize != 4 || j.Payload != nil {
		t.Errorf("order-2 step job = %+v", j)
	}

	var r4 runJSON
	f.okJSON(t, &r4, "run", "order-4")
	if r4.State != "pending" || !r4.StepDead || r4.StepJob == nil || r4.StepJob.ID != f.stuckJob || r4.CurrentJob != f.stuckJob {
		t.Errorf("run order-4 = %+v", r4)
	}

	var dead deadJSON
	f.okJSON(t, &dead, "dead")
	if len(dead.DeadJobs) != 3 || dead.Truncated {
		t.Fatalf("dead = %+v, want 3", dead)
	}
	if d := dead.DeadJobs[0]; d.ID != "email-1" || d.Queue != "emails" || d.RunID != "" ||
		d.LastError != "smtp: 550 mailbox unavailable" || d.Attempts != 1 || d.LastAttemptAt == nil {
		t.Errorf("first dead job = %+v", d)
	}
	f.okJSON(t, &dead, "dead", "--limit", "1")
	if len(dead.DeadJobs) != 1 || !dead.Truncated {
		t.Errorf("dead --limit 1 = %+v", dead)
	}

	var job jobJSON
	f.okJSON(t, &job, "job", "email-1")
	if job.ID != "email-1" || job.Queue != "emails" || job.State != "dead" || string(job.Payload) != "hello" ||
		job.PayloadText == nil || *job.PayloadText != "hello" || job.PayloadSize != 5 ||
		job.Headers["to"] != "ops@example.com" || len(job.History) != 1 {
		t.Errorf("job email-1 = %+v", job)
	}
	f.okJSON(t, &job, "job", r2.StepJob.ID)
	if !bytes.Equal(job.Payload, []byte{0x00, 0x01, 0xfe, 0xff}) || job.PayloadText != nil ||
		job.Headers[runtime.HeaderRunID] != "order-2" {
		t.Errorf("job %s = %+v", r2.StepJob.ID, job)
	}
}

func TestUsageAndErrors(t *testing.T) {
	f := newFixture(t)
	env := map[string]string{storeEnv: f.url}
	missingDir := filepath.Join(t.TempDir(), "nothing-here")
	emptyDir := t.TempDir()
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stderr string // a substring of stderr
	}{
		{"no store", nil, []string{"stats"}, exitUsage, "no store"},
		{"bad scheme", nil, []string{"stats", "--store", "nope://x"}, exitUsage, "invalid store URL"},
		{"relative file URL", nil, []string{"--store", "file://relative/dir", "queues"}, exitUsage, "invalid store URL"},
		{"bad URL for a write", nil, []string{"cancel", "x", "--store", "nope://x"}, exitUsage, "invalid store URL"},
		{"missing directory", nil, []string{"stats", "--store", "file://" + missingDir}, exitNotFound, "does not exist"},
		{"missing directory for a write", nil, []string{"cancel", "x", "--store", "file://" + missingDir}, exitNotFound, "does not exist"},
		{"empty directory", nil, []string{"stats", "--store", "file://" + emptyDir}, exitNotFound, "no store at file://" + emptyDir},
		{"empty directory, runs", nil, []string{"runs", "--store", "file://" + emptyDir}, exitNotFound, "no store at"},
		{"missing run", env, []string{"run", "order-99"}, exitNotFound, `run "order-99" not found`},
		{"missing job", env, []string{"job", "nope"}, exitNotFound, `job "nope" not found`},
		{"invalid run ID", env, []string{"run", "a/b"}, exitUsage, "invalid run ID"},
		{"no command", env, nil, exitUsage, "Usage:"},
		{"unknown command", env, []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", env, []string{"stats", "--nope"}, exitUsage, "flag provided but not defined"},
		{"unknown global flag", env, []string{"--nope", "stats"}, exitUsage, "flag provided but not defined"},
		{"missing argument", env, []string{"run"}, exitUsage, "missing argument"},
		{"extra argument", env, []string{"run", "a", "b"}, exitUsage, `unexpected argument "b"`},
		{"bad state", env, []string{"runs", "--state", "done"}, exitUsage, "invalid --state"},
		{"bad limit", env, []string{"dead", "--limit", "-1"}, exitUsage, "invalid --limit"},
		{"bad limit value", env, []string{"runs", "--limit", "x"}, exitUsage, "invalid value"},
		{"help on unknown command", env, []string{"help", "nope"}, exitUsage, "unknown command"},
		{"missing run to cancel", env, []string{"cancel", "order-99"}, exitNotFound, "not found"},
		{"missing job to requeue", env, []string{"requeue", "nope"}, exitNotFound, "not found"},
		{"ID after --", env, []string{"requeue", "--", "-x"}, exitNotFound, `job "-x" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.env, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stepwell %q: exit %d, stderr %q; want exit %d, stderr containing %q",
					tc.args, r.code, r.stderr, tc.code, tc.stderr)
			}
			if r.code != exitOK && r.stdout != "" && tc.args != nil {
				t.Errorf("stepwell %q failed but wrote stdout: %q", tc.args, r.stdout)
			}
		})
	}
	if _, err := os.Stat(missingDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a command on a missing file store created %s (err %v)", missingDir, err)
	}

	// The store can come from the environment, or --store before or after
	// the command; flags may follow the argument; --store beats the env.
	for _, args := range [][]string{
		{"run", "order-1"},
		{"run", "order-1", "--json"},
		{"--json", "run", "order-1"},
		{"run", "--json", "order-1"},
	} {
		if r := runCLI(t, env, args...); r.code != exitOK || !strings.Contains(r.stdout, "order-1") {
			t.Errorf("stepwell %q with $%s: exit %d, %q %q", args, storeEnv, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, nil, "run", "order-1", "--store", f.url); r.code != exitOK {
		t.Errorf("--store after the argument: exit %d: %s", r.code, r.stderr)
	}
	if r := runCLI(t, map[string]string{storeEnv: "nope://x"}, "--store", f.url, "queues"); r.code != exitOK {
		t.Errorf("--store should take precedence over $%s: exit %d: %s", storeEnv, r.code, r.stderr)
	}

	// Help goes to stdout and exits 0.
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := runCLI(t, nil, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Exit codes:") || !strings.Contains(r.stdout, "4  not found") {
			t.Errorf("stepwell %q: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
	for _, args := range [][]string{{"cancel", "--help"}, {"help", "cancel"}} {
		r := runCLI(t, nil, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "-takeover") || !strings.Contains(r.stdout, "Exit codes:") {
			t.Errorf("stepwell %q: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
}

func TestCancelAndRequeue(t *testing.T) {
	f := newFixture(t)
	notifyPending := func() int64 {
		t.Helper()
		var stats statsJSON
		f.okJSON(t, &stats, "stats", "--queue", "workflow-notify")
		return stats.Queues[0].Pending
	}

	// A queued run ends at once, and its notification waits for the service.
	if out := f.ok(t, "cancel", "order-3"); out != "run order-3 cancelled\n" {
		t.Errorf("cancel order-3 printed %q", out)
	}
	var r3 runJSON
	f.okJSON(t, &r3, "run", "order-3")
	if r3.State != "cancelled" || r3.Error != "" || r3.StepJob != nil {
		t.Errorf("order-3 after cancel = %+v", r3)
	}
	if n := notifyPending(); n != 1 {
		t.Errorf("pending notifications after cancel = %d, want 1", n)
	}
	var c cancelJSON
	f.okJSON(t, &c, "cancel", "order-3")
	if c != (cancelJSON{RunID: "order-3", Cancelled: false, State: "cancelled"}) {
		t.Errorf("second cancel = %+v", c)
	}
	if out := f.ok(t, "cancel", "order-1"); !strings.Contains(out, "already finished (succeeded)") {
		t.Errorf("cancel of a succeeded run printed %q", out)
	}

	// A stuck run (dead step job) is refused quickly with advice; requeueing
	// its job lets it go on; then it can be cancelled, here without a
	// notification.
	r := f.on(t, "cancel", "order-4")
	if r.code != exitFailed || !strings.Contains(r.stderr, "stepwell requeue "+f.stuckJob) {
		t.Errorf("cancel of a stuck run: exit %d, stderr %q", r.code, r.stderr)
	}
	var rq requeueJSON
	f.okJSON(t, &rq, "requeue", f.stuckJob)
	if rq != (requeueJSON{JobID: f.stuckJob, Queue: "workflow-steps", RunID: "order-4", RunResumes: true}) {
		t.Errorf("requeue of the stuck step = %+v", rq)
	}
	var r4 runJSON
	f.okJSON(t, &r4, "run", "order-4")
	if r4.State != "pending" || r4.StepDead || r4.StepJob == nil || r4.StepJob.State != "pending" {
		t.Errorf("order-4 after requeue = %+v", r4)
	}
	f.okJSON(t, &c, "cancel", "order-4")
	if !c.Cancelled || c.State != "cancelled" {
		t.Errorf("cancel order-4 = %+v", c)
	}
	if n := notifyPending(); n != 2 {
		t.Errorf("pending notifications after the second cancel = %d, want 2", n)
	}

	// Requeue: a plain job goes back to pending; a job that is not dead is
	// refused; the dead step of a failed run retries the run.
	if out := f.ok(t, "requeue", "email-1"); out != "job email-1 requeued on queue emails\n" {
		t.Errorf("requeue email-1 printed %q", out)
	}
	var job jobJSON
	f.okJSON(t, &job, "job", "email-1")
	if job.State != "pending" || job.Attempt != 0 || len(job.History) != 1 {
		t.Errorf("email-1 after requeue = %+v", job)
	}
	if r := f.on(t, "requeue", "email-1"); r.code != exitFailed || !strings.Contains(r.stderr, "not dead") {
		t.Errorf("requeue of a pending job: exit %d, %q", r.code, r.stderr)
	}
	var dead deadJSON
	f.okJSON(t, &dead, "dead")
	if len(dead.DeadJobs) != 1 || dead.DeadJobs[0].RunID != "order-2" {
		t.Fatalf("dead = %+v, want order-2's step only", dead)
	}
	f.okJSON(t, &rq, "requeue", dead.DeadJobs[0].ID)
	if rq != (requeueJSON{JobID: dead.DeadJobs[0].ID, Queue: "workflow-steps", RunID: "order-2", RunResumes: true, RunRetried: true}) {
		t.Errorf("requeue of a failed run's dead step = %+v", rq)
	}
	var r2 runJSON
	f.okJSON(t, &r2, "run", "order-2")
	if r2.State != "pending" || r2.CurrentJob != dead.DeadJobs[0].ID {
		t.Errorf("order-2 after requeue of its dead step = %+v", r2)
	}
}

// TestRetry: "retry" retries a failed or cancelled run (runtime.Retry),
// refuses other runs (exit 1) and unknown ones (exit 4); a dead step job
// whose run moved on is refused by "requeue" instead of being dropped
// later.
func TestRetry(t *testing.T) {
	f := newFixture(t)
	var out retryJSON
	f.okJSON(t, &out, "retry", "order-2")
	if out != (retryJSON{RunID: "order-2", State: "pending", Step: 0, Retries: 1}) {
		t.Errorf("retry order-2 = %+v", out)
	}
	if r := f.on(t, "retry", "order-2"); r.code != exitFailed || !strings.Contains(r.stderr, "not failed or cancelled") {
		t.Errorf("second retry: exit %d, %q", r.code, r.stderr)
	}
	if r := f.on(t, "retry", "order-1"); r.code != exitFailed || !strings.Contains(r.stderr, "succeeded") {
		t.Errorf("retry of a succeeded run: exit %d, %q", r.code, r.stderr)
	}
	if r := f.on(t, "retry", "nope"); r.code != exitNotFound {
		t.Errorf("retry of an unknown run: exit %d, %q", r.code, r.stderr)
	}
	var c cancelJSON
	f.okJSON(t, &c, "cancel", "order-3")
	if got := f.ok(t, "retry", "order-3"); !strings.Contains(got, "run order-3 retried from step 0 (retry 1)") {
		t.Errorf("retry of a cancelled run printed %q", got)
	}
	var runs runsJSON
	f.okJSON(t, &runs, "runs", "--state", "failed")
	if len(runs.Runs) != 0 {
		t.Errorf("failed runs after the retry = %+v", runs)
	}
}

// TestReadWhileWriterOpen: read commands work while the store is open for
// writing in this process (the read-only open does not take the lock); write
// commands then share this process's writer.
func TestReadWhileWriterOpen(t *testing.T) {
	f := newFixture(t)
	q, err := queue.Open(t.Context(), f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(context.Background())
	if out := f.ok(t, "stats"); !strings.Contains(out, "workflow-steps") {
		t.Errorf("stats while a writer is open: %q", out)
	}
	if out := f.ok(t, "runs", "--state", "pending"); !strings.Contains(out, "order-3") {
		t.Errorf("runs while a writer is open: %q", out)
	}
	if out := f.ok(t, "cancel", "order-3"); out != "run order-3 cancelled\n" {
		t.Errorf("cancel through this process's writer: %q", out)
	}
	if err := q.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestWriteCommandsWhileLocked holds the store from a child process (this
// test binary, re-executed) that is not in cluster mode: read commands
// work, write commands exit 3 and say why (see TestWriteCommandsJoinCluster
// for a service in cluster mode).
func TestWriteCommandsWhileLocked(t *testing.T) {
	f := newFixture(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), holdEnv+"="+f.dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("holding child: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child did not open the store: %q, %v", line, err)
	}

	if out := f.ok(t, "stats"); !strings.Contains(out, "workflow-steps") {
		t.Errorf("stats while another process writes: %q", out)
	}
	// A program's Open says why once: not "store is locked by another
	// writer" once per layer.
	if _, err := queue.Open(t.Context(), f.url); !errors.Is(err, queue.ErrStoreLocked) ||
		strings.Count(err.Error(), "locked") != 1 || !strings.Contains(err.Error(), "pid of last holder") {
		t.Errorf("queue.Open while another process writes: %v", err)
	}
	for _, args := range [][]string{{"cancel", "order-3"}, {"requeue", "email-1"}, {"requeue", "email-1", "--takeover"}} {
		r := f.on(t, args...)
		if r.code != exitLocked || !strings.Contains(r.stderr, "in use by a live writer") ||
			!strings.Contains(r.stderr, "not in cluster mode") || !strings.Contains(r.stderr, "queue.WithCluster") ||
			!strings.Contains(r.stderr, "cannot be taken over") || r.stdout != "" {
			t.Errorf("stepwell %q while locked: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	// Nothing was changed.
	var r3 runJSON
	f.okJSON(t, &r3, "run", "order-3")
	if r3.State != "pending" {
		t.Errorf("order-3 after refused cancel: %s", r3.State)
	}
}

func TestLockedMessage(t *testing.T) {
	err := lockedError("s3://bucket?prefix=app/&region=eu-west-1", false)
	if exitCode(err) != exitLocked || !strings.Contains(err.Error(), "--takeover") {
		t.Errorf("bucket store: %d %v", exitCode(err), err)
	}
	if err := lockedError("gs://bucket?prefix=app/", true); strings.Contains(err.Error(), "--takeover makes") {
		t.Errorf("with --takeover already given, it should not be offered again: %v", err)
	}
	err = unreachableError("s3://bucket?prefix=app/&region=eu-west-1", "10.0.0.7:7420", 20*time.Second, false)
	if exitCode(err) != exitLocked || !strings.Contains(err.Error(), "10.0.0.7:7420") ||
		!strings.Contains(err.Error(), "--wait") || !strings.Contains(err.Error(), "--takeover") {
		t.Errorf("unreachable cluster writer: %d %v", exitCode(err), err)
	}
}

// claimOne claims the next job of the named queue by hand (nil: none).
func claimOne(ctx context.Context, q *queue.Queue, name string) (*queue.Job, error) {
	jobs, err := q.Claim(ctx, name, queue.ClaimOptions{})
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return jobs[0], nil
}
