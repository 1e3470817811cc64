package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// flakyStep1 continues at step 0 and, at step 1, returns what fail1 says
// while it returns a non-zero Outcome or an error, then succeeds with the
// payload.
func flakyStep1(log *stepLog, fail1 func(s *steprunner.Step) (steprunner.Outcome, error)) steprunner.RunnerFunc {
	return func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		if s.Number == 0 {
			return steprunner.Continue([]byte("p1")), nil
		}
		if out, err := fail1(s); err != nil || !out.IsZero() {
			return out, err
		}
		return steprunner.Succeed(append([]byte("done:"), s.Payload...)), nil
	}
}

// TestRetryDeadStep: a run whose step 1 failed permanently (dead-lettered)
// is retried at step 1 with its payload, in the same job (requeued from the
// dead letters with a fresh budget), and the hook hears both terminations,
// the second with Retries 1 and a new EndedAt. Fails without Retry, or if
// the dead letter stays behind.
func TestRetryDeadStep(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	var log stepLog
	var broken atomic.Bool
	broken.Store(true)
	rt := newRuntime(t, q, flakyStep1(&log, func(*steprunner.Step) (steprunner.Outcome, error) {
		if broken.Load() {
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("card declined"))
		}
		return steprunner.Outcome{}, nil
	}), hook)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "r", Input: []byte("in"), Headers: map[string]string{"h": "v"}})
	first := hook.wait(t, "r")
	if first.Status != terminal.Failed || first.Retries != 0 || first.FinalStep != 1 {
		t.Fatalf("first outcome = %+v", first)
	}
	if s := mustStats(t, q, stepsQueue); s.Dead != 1 {
		t.Fatalf("stats = %+v, want the dead step", s)
	}
	st, err := rt.Status(context.Background(), "r")
	if err != nil || st.State != runtime.StateFailed || st.Attempt != 1 || st.LastError != "card declined" || st.EndedAt.IsZero() {
		t.Fatalf("Status of the failed run = %+v, %v", st, err)
	}

	broken.Store(false)
	if err := rt.Retry(context.Background(), "r"); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	testenv.Eventually(t, waitTimeout, "the second termination", func() bool { return len(hook.outcomes("r")) == 2 })
	second := hook.outcomes("r")[1]
	if second.Status != terminal.Succeeded || string(second.Result) != "done:p1" || second.Retries != 1 ||
		!second.EndedAt.After(first.EndedAt) || second.Headers["h"] != "v" {
		t.Fatalf("second outcome = %+v (first %+v)", second, first)
	}
	steps := log.of("r")
	if len(steps) != 3 || steps[2].Number != 1 || string(steps[2].Payload) != "p1" ||
		steps[2].JobID != steps[1].JobID || steps[2].Attempt != 1 {
		t.Fatalf("steps = %+v; want step 1 again, same job and payload, attempt 1", steps)
	}
	if s := mustStats(t, q, stepsQueue); s.Dead != 0 {
		t.Errorf("stats after retry = %+v, want no dead letter", s)
	}
	st, err = rt.Status(context.Background(), "r")
	if err != nil || st.State != runtime.StateSucceeded || st.Retries != 1 {
		t.Errorf("Status = %+v, %v", st, err)
	}
}

// TestRetriedRunWebhookBodyCarriesRetries: a run that failed and was
// retried is delivered twice by the signed webhook, the bodies carrying
// "retries" 0 and then 1 (terminal.Outcome.Retries), with different
// webhook-ids. Fails if the webhook body lacks the retry count.
func TestRetriedRunWebhookBodyCarriesRetries(t *testing.T) {
	t.Parallel()
	type delivery struct {
		id   string
		body map[string]json.RawMessage
	}
	var mu sync.Mutex
	var got []delivery
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]json.RawMessage
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("body %s: %v", b, err)
		}
		mu.Lock()
		got = append(got, delivery{r.Header.Get("webhook-id"), body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	hook, err := terminal.NewWebhook(terminal.WebhookConfig{URL: srv.URL,
		Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", AllowPrivateNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	fail.Store(true)
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, flakyStep1(&stepLog{}, func(*steprunner.Step) (steprunner.Outcome, error) {
		if fail.Load() {
			return steprunner.Fail("out of stock"), nil
		}
		return steprunner.Outcome{}, nil
	}), hook)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "wh"})
	deliveries := func() []delivery {
		mu.Lock()
		defer mu.Unlock()
		return append([]delivery(nil), got...)
	}
	testenv.Eventually(t, waitTimeout, "the first delivery", func() bool { return len(deliveries()) == 1 })
	fail.Store(false)
	if err := rt.Retry(context.Background(), "wh"); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	testenv.Eventually(t, waitTimeout, "the second delivery", func() bool { return len(deliveries()) == 2 })
	ds := deliveries()
	for i, want := range []struct{ status, retries string }{{`"failed"`, `0`}, {`"succeeded"`, `1`}} {
		if b := ds[i].body; string(b["status"]) != want.status || string(b["retries"]) != want.retries {
			t.Errorf("delivery %d: status %s, retries %s; want %s, %s", i, b["status"], b["retries"], want.status, want.retries)
		}
	}
	if ds[0].id == ds[1].id {
		t.Errorf("both terminations have webhook-id %s", ds[0].id)
	}
}

// TestRetryFailAndCancel: runs that ended by Fail, by their own Cancel, and
// by an external Cancel of their queued step (no dead job holds the
// payload) retry from their last step with its payload. Fails if the
// terminal record does not keep the payload.
func TestRetryFailAndCancel(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	var log stepLog
	var fixed atomic.Bool
	rt := newRuntime(t, q, flakyStep1(&log, func(s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case fixed.Load():
			return steprunner.Outcome{}, nil
		case s.RunID == "fail":
			return steprunner.Fail("no stock"), nil
		case s.RunID == "self-cancel":
			return steprunner.Cancel("changed mind"), nil
		}
		return steprunner.Outcome{}, nil
	}), hook)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "fail", Input: []byte("a")})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "self-cancel", Input: []byte("b")})
	for _, id := range []string{"fail", "self-cancel"} {
		hook.wait(t, id)
	}
	// A client Runtime (no runner) submits a run and cancels it before any
	// step ran: step 0's payload is the input.
	client := newRuntime(t, q, nil, nil)
	if err := client.Run(context.Background()); !errors.Is(err, runtime.ErrNoRunner) {
		t.Fatalf("client Run = %v", err)
	}
	// The input goes to a queue nobody serves, so that Cancel finds it
	// queued.
	parked := newRuntime(t, q, nil, nil, runtime.WithQueueName("parked"))
	mustSubmit(t, parked, runtime.RunSpec{RunID: "ext-cancel", Input: []byte("c")})
	mustCancel(t, parked, "ext-cancel", true)

	fixed.Store(true)
	for _, id := range []string{"fail", "self-cancel"} {
		if err := client.Retry(context.Background(), id); err != nil {
			t.Fatalf("Retry(%s): %v", id, err)
		}
		testenv.Eventually(t, waitTimeout, id+" to end again", func() bool { return len(hook.outcomes(id)) == 2 })
		if o := hook.outcomes(id)[1]; o.Status != terminal.Succeeded || string(o.Result) != "done:p1" || o.Retries != 1 {
			t.Errorf("%s: second outcome %+v", id, o)
		}
	}
	// Retried from a Runtime of another step queue: the step goes back to
	// the queue it was on.
	if err := client.Retry(context.Background(), "ext-cancel"); err != nil {
		t.Fatalf("Retry(ext-cancel): %v", err)
	}
	st, err := client.Status(context.Background(), "ext-cancel")
	if err != nil || st.State != runtime.StatePending || st.CurrentStep != 0 || st.Retries != 1 {
		t.Fatalf("Status(ext-cancel) = %+v, %v", st, err)
	}
	j, err := claimOne(context.Background(), q, "parked")
	if err != nil || j == nil || string(j.Payload) != "c" || j.Headers[runtime.HeaderRunID] != "ext-cancel" {
		t.Fatalf("retried step job = %+v, %v; want step 0 with the input", j, err)
	}
}

// TestRetryErrors: unknown runs are ErrRunNotFound; active and succeeded
// runs, and a failed run whose step payload is gone, ErrRunNotRetryable.
func TestRetryErrors(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), nil)
	ctx := context.Background()
	if err := rt.Retry(ctx, "nope"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Errorf("Retry(unknown) = %v, want ErrRunNotFound", err)
	}
	if err := rt.Retry(ctx, " x"); !errors.Is(err, runtime.ErrInvalidRunID) {
		t.Errorf("Retry(invalid) = %v, want ErrInvalidRunID", err)
	}
	mustSubmit(t, rt, runtime.RunSpec{RunID: "pending"})
	if err := rt.Retry(ctx, "pending"); !errors.Is(err, runtime.ErrRunNotRetryable) || !strings.Contains(err.Error(), "pending") {
		t.Errorf("Retry(pending) = %v, want ErrRunNotRetryable", err)
	}
	r := startRun(t, rt)
	waitTerminal(t, rt, "pending")
	if err := rt.Retry(ctx, "pending"); !errors.Is(err, runtime.ErrRunNotRetryable) || !strings.Contains(err.Error(), "succeeded") {
		t.Errorf("Retry(succeeded) = %v, want ErrRunNotRetryable", err)
	}
	// Run's janitor would expire the record below (it ended in 1970): a
	// slow store let its first pass come after the record was written.
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// A run that failed before terminal records kept payloads, whose dead
	// job is gone: written by hand as such a store holds it.
	rec := &kvrecord.Run{RunID: "old", SubmittedAt: 1, State: kvrecord.StateTerminal,
		Status: uint8(terminal.Failed), EndedAt: 2}
	txn := new(queue.Txn).Put(kvrecord.RunKey("old"), runrec.EncodeRun(rec)).
		Put(kvrecord.TerminalKey(2, "old"), runrec.EncodeTerminal(&kvrecord.Terminal{
			RunID: "old", Status: uint8(terminal.Failed), Error: "x", FinalStep: 3, EndedAt: 2, DeadJob: "gone"}))
	if _, err := q.Commit(ctx, txn); err != nil {
		t.Fatal(err)
	}
	err := rt.Retry(ctx, "old")
	if !errors.Is(err, runtime.ErrRunNotRetryable) || !strings.Contains(err.Error(), "no longer kept") {
		t.Errorf("Retry(payload gone) = %v, want ErrRunNotRetryable saying so", err)
	}
}

// TestRetryConcurrent: of concurrent Retry calls on one failed run exactly
// one wins; the run is retried once.
func TestRetryConcurrent(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Fail("nope"), nil
	}), hook)
	r := startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "c", Input: []byte("in")})
	hook.wait(t, "c")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var won, lost atomic.Int32
	for range 8 {
		wg.Go(func() {
			err := rt.Retry(context.Background(), "c")
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, runtime.ErrRunNotRetryable):
				lost.Add(1)
			default:
				t.Errorf("Retry: %v", err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || lost.Load() != 7 {
		t.Errorf("won %d, lost %d; want 1 and 7", won.Load(), lost.Load())
	}
	st, err := rt.Status(context.Background(), "c")
	if err != nil || st.Retries != 1 || st.State != runtime.StatePending {
		t.Errorf("Status = %+v, %v", st, err)
	}
	if s := mustStats(t, q, stepsQueue); s.Pending != 1 {
		t.Errorf("stats = %+v, want one pending step", s)
	}
}

// TestRequeuedStepOfEndedRunIsRefused: a dead step of a failed run
// requeued by hand (queue.RequeueDead) is not run and not dropped
// silently: it goes back to the dead letters with a reason that says to
// retry the run. Fails if the runtime acknowledges it without a word.
func TestRequeuedStepOfEndedRunIsRefused(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	var calls atomic.Int32
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		calls.Add(1)
		return steprunner.Outcome{}, steprunner.Permanent(errors.New("boom"))
	}), hook)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "ended", Input: []byte("in")})
	hook.wait(t, "ended")
	page, err := q.DeadJobs(context.Background(), stepsQueue, "", 10)
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("dead jobs = %+v, %v", page, err)
	}
	id := page.Jobs[0].ID
	if err := q.RequeueDead(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the requeued step to be dead again", func() bool {
		j, err := q.GetJob(context.Background(), id)
		return err == nil && j.State == queue.JobDead && len(j.History) == 2
	})
	j, _ := q.GetJob(context.Background(), id)
	if reason := j.History[1].Error; !strings.Contains(reason, "stepwell retry ended") {
		t.Errorf("dead-letter reason = %q, want advice to retry the run", reason)
	}
	if calls.Load() != 1 {
		t.Errorf("runner called %d times, want 1: the refused step must not run", calls.Load())
	}
	if st, _ := rt.Status(context.Background(), "ended"); st.State != runtime.StateFailed {
		t.Errorf("Status = %+v, want still failed", st)
	}
}
