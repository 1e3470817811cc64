package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// deadStepsQueue gets the queue's notices of dead step jobs.
const deadStepsQueue = stepsQueue + ".dead"

// killStep claims the current step job of a run (only one is queued) and
// dead-letters it, as a worker that died on its last attempt leaves it:
// the run is still active and a dead-letter notice waits in
// deadStepsQueue. It returns the dead job.
func killStep(t *testing.T, q *queue.Queue) *queue.Job {
	t.Helper()
	ctx := context.Background()
	j, err := claimOne(ctx, q, stepsQueue)
	if err != nil || j == nil {
		t.Fatalf("Claim = %v, %v", j, err)
	}
	if err := q.DeadLetter(ctx, j, "worker gone"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	if s := mustStats(t, q, deadStepsQueue); s.Pending != 1 {
		t.Fatalf("dead-step notices = %+v, want one pending", s)
	}
	return j
}

// TestStaleDeadNoticeAfterRetry: a run whose step died is cancelled (the
// Cancel settles it, its dead-letter notice still queued) and retried,
// which requeues the dead job. The stale notice must then be acknowledged
// while the requeued step runs, not retried in a loop: before the fix,
// handleDeadStep spun on a failing compare (the job is no longer dead),
// burning a CPU and holding the dead-step worker until the step settled.
func TestStaleDeadNoticeAfterRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	client := newRuntime(t, q, nil, nil)
	mustSubmit(t, client, runtime.RunSpec{RunID: "r", Input: []byte("in")})
	dead := killStep(t, q)
	if ok, err := client.Cancel(ctx, "r"); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	if err := client.Retry(ctx, "r"); err != nil {
		t.Fatalf("Retry: %v", err)
	}

	started := make(chan struct{})
	release := make(chan struct{})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return steprunner.Outcome{}, ctx.Err()
		}
		return steprunner.Succeed(s.Payload), nil
	}), hook)
	startRun(t, rt)
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatal("the retried step never started")
	}
	testenv.Eventually(t, waitTimeout, "the stale dead-step notice acknowledged while the step runs", func() bool {
		s := mustStats(t, q, deadStepsQueue)
		return s.Pending == 0 && s.Scheduled == 0 && s.Claimed == 0
	})
	if st, err := rt.Status(ctx, "r"); err != nil || st.State != runtime.StateRunning || st.Retries != 1 {
		t.Fatalf("Status while the retried step runs = %+v, %v", st, err)
	}
	close(release)
	// Both terminations are notified: the Cancel's (handed over, as no
	// Runtime with a hook had Run yet) and the retried run's.
	testenv.Eventually(t, waitTimeout, "two notifications", func() bool { return len(hook.outcomes("r")) == 2 })
	byRetries := map[uint32]terminal.Outcome{}
	for _, o := range hook.outcomes("r") {
		byRetries[o.Retries] = o
	}
	if o := byRetries[0]; o.Status != terminal.Cancelled {
		t.Errorf("outcome of the cancel = %+v", o)
	}
	if o := byRetries[1]; o.Status != terminal.Succeeded || string(o.Result) != "in" {
		t.Errorf("outcome of the retried run = %+v", o)
	}
	if j, err := q.GetJob(ctx, dead.ID); err == nil && j.State == queue.JobDead {
		t.Errorf("the retried step's job is dead again: %+v", j)
	}
}

// TestDiedStepKeepsPayloadForRetry: a run failed by a step that died
// without the runtime (handleDeadStep) keeps the step's payload and
// attempt in its terminal record, as every other failure does, so that
// Retry still works once the dead job is gone (dead retention, a purge).
// Before the fix the record kept neither: Status said attempt 0 and the
// run was not retryable without its dead job.
func TestDiedStepKeepsPayloadForRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	client := newRuntime(t, q, nil, nil)
	mustSubmit(t, client, runtime.RunSpec{RunID: "r", Input: []byte("step zero input")})
	dead := killStep(t, q)
	rt := newRuntime(t, q, succeedRunner(&stepLog{}), nil)
	startRun(t, rt)
	st := waitTerminal(t, rt, "r")
	if st.State != runtime.StateFailed || st.Attempt != dead.Attempt {
		t.Fatalf("Status = %+v, want failed at attempt %d", st, dead.Attempt)
	}
	page, err := q.Scan(ctx, []byte(kvrecord.TerminalPrefix), queue.ScanOptions{})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("terminal records = %+v, %v", page.Items, err)
	}
	tr, err := kvrecord.DecodeTerminal(page.Items[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if string(tr.Payload) != "step zero input" || tr.DeadJob != dead.ID || tr.Queue != stepsQueue {
		t.Fatalf("terminal record = %+v; want the dead step's payload, job and queue kept", tr)
	}
}

// TestDeletedDeadStepStillFailsRun: when the dead job of an active run's
// step is deleted (dead retention) before a Runtime handles its notice,
// the run still ends Failed. Before the fix, handleDeadStep required the
// job to be dead and retried that compare forever.
func TestDeletedDeadStepStillFailsRun(t *testing.T) {
	writerOnly(t, "dead retention is applied by the writer's reaper, with the options of the writer's own Open (store-level, as for a second handle in one process)")
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL(), queue.WithQueueConfig(stepsQueue, queue.QueueConfig{DeadRetention: time.Millisecond}))
	client := newRuntime(t, q, nil, nil)
	mustSubmit(t, client, runtime.RunSpec{RunID: "r", Input: []byte("in")})
	dead := killStep(t, q)
	testenv.Eventually(t, waitTimeout, "the reaper to delete the dead job", func() bool {
		_, err := q.GetJob(ctx, dead.ID)
		return errors.Is(err, queue.ErrJobNotFound)
	})
	hook := &hookRecorder{}
	rt := newRuntime(t, q, succeedRunner(&stepLog{}), hook)
	startRun(t, rt)
	o := hook.wait(t, "r")
	if o.Status != terminal.Failed || o.FinalStep != 0 {
		t.Fatalf("outcome = %+v", o)
	}
	if err := rt.Retry(ctx, "r"); !errors.Is(err, runtime.ErrRunNotRetryable) {
		t.Fatalf("Retry without the payload = %v, want ErrRunNotRetryable", err)
	}
}
