// Package compat_test opens the stores under the repository's testdata/,
// one written by each on-bucket format version so far (see
// testdata/README.md), with today's code, and checks every run and job
// they hold; then it runs the queued runs to their end on today's code.
// A change to the format that breaks reading an older store fails here.
package compat_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// fixtureRoot holds one directory per format version; gen holds the
// generator's source.
const fixtureRoot = "../testdata"

// wantFixtures are the fixtures that must exist: a format change adds one
// (testdata/README.md).
var wantFixtures = []string{
	"v1-wal-objects",
	"v1-wal-objects-no-owner",
	"v2-wal-segments",
	"v3-payload-in-job",
	"v4-segment-header",
	"v5-owner-mark-run-index",
	"v6-run-control",
	"v7-claim-token",
	"v8-run-memory",
	"v9-step-queue",
	"v10-child-runs",
	"v11-run-history",
	"v12-compressed-wal",
}

// largeInput is run "large"'s input, as testdata/gen/main.go writes it.
func largeInput() []byte {
	b := make([]byte, 260<<10)
	for i := range b {
		b[i] = byte(i*31 + i/251)
	}
	return b
}

// forever keeps old terminal records from the janitor while the test runs.
const forever = 50 * 365 * 24 * time.Hour

func TestFixtures(t *testing.T) {
	entries, err := os.ReadDir(fixtureRoot)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "gen" {
			found = append(found, e.Name())
		}
	}
	for _, w := range wantFixtures {
		if !slices.Contains(found, w) {
			t.Errorf("fixture testdata/%s is missing", w)
		}
	}
	for _, name := range found {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkFixture(t, filepath.Join(fixtureRoot, name))
		})
	}
}

// runWant is what Status must say of a run of the fixture.
type runWant struct {
	state     runtime.State
	step      uint32
	scheduled bool
	result    string
	err       string
}

var runWants = map[string]runWant{
	"succeeded":          {state: runtime.StateSucceeded, step: 2, result: "shipped: reserved: order succeeded; packed"},
	"failed-permanent":   {state: runtime.StateFailed, step: 0, err: "card declined"},
	"failed-outcome":     {state: runtime.StateFailed, step: 1, err: "out of stock"},
	"cancelled-by-step":  {state: runtime.StateCancelled, step: 0, err: "customer withdrew"},
	"scheduled":          {state: runtime.StatePending, step: 2, scheduled: true},
	"cancelled-external": {state: runtime.StateCancelled, step: 0},
	"pending":            {state: runtime.StatePending, step: 0},
	"large":              {state: runtime.StatePending, step: 0},
}

// queued are the runs whose step 0 is still to run, with their input.
var queued = map[string][]byte{
	"claimed": []byte("order claimed"),
	"pending": []byte("order pending"),
	"large":   largeInput(),
}

func checkFixture(t *testing.T, src string) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	copyDir(t, src, dir) // opening writes: never open the fixture itself
	url := "file://" + dir

	// A read-only open sees the store exactly as written.
	ro, err := queue.Open(ctx, url, queue.WithReadOnly())
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	checkRuns(ctx, t, ro, "read-only")
	if err := ro.Close(ctx); err != nil {
		t.Fatal(err)
	}

	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer q.Close(context.Background())
	checkRuns(ctx, t, q, "writer")
	if t.Failed() {
		return // running the queued runs would only time out
	}

	// Today's code takes the queued runs to their end, and delivers the
	// notification an old version left queued.
	var mu sync.Mutex
	got := map[string][]byte{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		got[s.RunID] = s.Payload
		mu.Unlock()
		return steprunner.Succeed([]byte(fmt.Sprintf("done %d", len(s.Payload)))), nil
	})
	ended := make(chan terminal.Outcome, 16)
	hook := terminal.HookFunc(func(_ context.Context, o terminal.Outcome) error {
		ended <- o
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(5*time.Millisecond), runtime.WithTerminalRetention(forever))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	outcomes := map[string]terminal.Outcome{}
	for len(outcomes) < len(queued)+1 {
		select {
		case o := <-ended:
			outcomes[o.RunID] = o
		case <-ctx.Done():
			stop()
			t.Fatalf("runs did not end on today's code: %v (ended: %v)", ctx.Err(), outcomes)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, input := range queued {
		if !bytes.Equal(got[id], input) {
			t.Errorf("run %s: step 0 got a payload of %d bytes, want its input (%d bytes)", id, len(got[id]), len(input))
		}
		st, err := rt.Status(ctx, id)
		want := fmt.Sprintf("done %d", len(input))
		if err != nil || st.State != runtime.StateSucceeded || string(st.Result) != want {
			t.Errorf("run %s after Run: %+v, %v; want succeeded with %q", id, st, err, want)
		}
	}
	if o := outcomes["cancelled-external"]; o.Status != terminal.Cancelled {
		t.Errorf("notification of cancelled-external = %+v, want Cancelled", o)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Reopened after today's code wrote to it.
	q2, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer q2.Close(context.Background())
	rt2, err := runtime.New(q2, runner, terminal.Noop, runtime.WithTerminalRetention(forever))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"succeeded", "large"} {
		if st, err := rt2.Status(ctx, id); err != nil || st.State != runtime.StateSucceeded {
			t.Errorf("run %s after reopen: %+v, %v", id, st, err)
		}
	}
	// A run of the fixture that today's code finished has a history: its
	// submission (from the record, whatever wrote it) and the attempt
	// today's code settled.
	h, err := rt2.History(ctx, "large")
	if err != nil || len(h) < 2 || h[0].Kind != runtime.HistorySubmitted || !slices.ContainsFunc(h, func(e runtime.HistoryEntry) bool {
		return e.Kind == runtime.HistorySucceed
	}) {
		t.Errorf("history of run large after today's Run: %+v, %v", h, err)
	}
}

// checkRuns checks every run and job of the fixture as it was written.
func checkRuns(ctx context.Context, t *testing.T, q *queue.Queue, how string) {
	t.Helper()
	rt, err := runtime.New(q, steprunner.RunnerFunc(func(context.Context, *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Outcome{}, errors.New("not run here")
	}), terminal.Noop, runtime.WithTerminalRetention(forever))
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range runWants {
		st, err := rt.Status(ctx, id)
		if err != nil {
			t.Errorf("%s: run %s: %v", how, id, err)
			continue
		}
		if st.State != w.state || st.CurrentStep != w.step || st.Scheduled != w.scheduled ||
			string(st.Result) != w.result || st.Error != w.err || st.MemoKeys != 0 || st.MemoBytes != 0 {
			t.Errorf("%s: run %s = %+v (state %s), want %+v (state %s)", how, id, st, st.State, w, w.state)
		}
		// Records without a parent and children report none.
		if st.Parent != "" || st.Children != nil {
			t.Errorf("%s: run %s: Parent %q, Children %v, want none", how, id, st.Parent, st.Children)
		}
		// Records without a step queue report their step job's.
		if !w.state.Terminal() && st.Queue != "workflow-steps" {
			t.Errorf("%s: run %s: Queue %q, want workflow-steps", how, id, st.Queue)
		}
	}
	if st, err := rt.Status(ctx, "succeeded"); err == nil && st.Headers["tenant"] != "acme" {
		t.Errorf("%s: run succeeded: headers %v, want tenant=acme", how, st.Headers)
	}
	// The claimed step was never settled: its worker is gone; whatever the
	// lease's state, the run has not ended and is still at step 0.
	if st, err := rt.Status(ctx, "claimed"); err != nil || st.State.Terminal() || st.CurrentStep != 0 {
		t.Errorf("%s: run claimed = %+v, %v", how, st, err)
	}
	for id, input := range queued {
		job := stepJob(ctx, t, q, id)
		if job == nil {
			continue
		}
		if !bytes.Equal(job.Payload, input) || job.Headers[runtime.HeaderRunID] != id {
			t.Errorf("%s: run %s: step job payload %d bytes, headers %v; want its input (%d bytes)", how, id, len(job.Payload), job.Headers, len(input))
		}
	}

	// Dead letters: the step of failed-permanent, and a plain job.
	page, err := q.DeadJobs(ctx, "workflow-steps", "", 100)
	if err != nil {
		t.Fatalf("%s: dead steps: %v", how, err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].Headers[runtime.HeaderRunID] != "failed-permanent" ||
		string(page.Jobs[0].Payload) != "order failed permanent" || lastError(page.Jobs[0]) != "card declined" {
		t.Errorf("%s: dead steps = %s", how, describe(page.Jobs))
	}
	page, err = q.DeadJobs(ctx, "emails", "", 100)
	if err != nil {
		t.Fatalf("%s: dead emails: %v", how, err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].ID != "email-dead" || string(page.Jobs[0].Payload) != "bounce" ||
		page.Jobs[0].Headers["to"] != "ops@example.com" || lastError(page.Jobs[0]) != "smtp: 550 mailbox unavailable" {
		t.Errorf("%s: dead emails = %s", how, describe(page.Jobs))
	}
	if j, err := q.GetJob(ctx, "email-pending"); err != nil || j.State != queue.JobPending || string(j.Payload) != "hello" {
		t.Errorf("%s: job email-pending = %+v, %v", how, j, err)
	}
}

// stepJob returns the current step job of a run.
func stepJob(ctx context.Context, t *testing.T, q *queue.Queue, id string) *queue.Job {
	t.Helper()
	b, err := q.Get(ctx, kvrecord.RunKey(id))
	if err != nil {
		t.Errorf("run record %s: %v", id, err)
		return nil
	}
	rec, err := kvrecord.DecodeRun(b)
	if err != nil {
		t.Errorf("run record %s: %v", id, err)
		return nil
	}
	job, err := q.GetJob(ctx, rec.CurrentJob)
	if err != nil {
		t.Errorf("run %s: step job %q: %v", id, rec.CurrentJob, err)
		return nil
	}
	return job
}

func lastError(j *queue.Job) string {
	if len(j.History) == 0 {
		return ""
	}
	return j.History[len(j.History)-1].Error
}

func describe(jobs []*queue.Job) string {
	var b bytes.Buffer
	for _, j := range jobs {
		fmt.Fprintf(&b, "\n  %s queue=%s state=%v payload=%q headers=%v history=%v", j.ID, j.Queue, j.State, j.Payload, j.Headers, j.History)
	}
	return b.String()
}

// copyDir copies the fixture src into dst, which exists.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
