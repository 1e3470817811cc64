package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// TestStoreOutageFailsNoRun pauses a dedicated MinIO server (SIGSTOP) for
// longer than the write-retry budget and many leases, with one attempt per
// step, while a Runtime runs three-step workflows and more are submitted:
// a Submit with a 1s ctx returns ErrOutcomeUnknown within seconds; Run does
// not return; once the server is resumed the same Runtime finishes every
// run, none fails, no step job is dead and every step ran once (attempt
// 1). Before: the store closed after the write-retry budget (Run returned,
// every later call failed) and steps claimed during the pause died with
// "lease expired"; Submit waited for the store whatever its ctx.
func TestStoreOutageFailsNoRun(t *testing.T) {
	url, srv := testenv.PausableS3(t)
	url += "&connect_timeout=1s&response_timeout=1s"
	const lease, writeRetry = time.Second, 500 * time.Millisecond
	setWriterFlags(url, "lease=1s,heartbeat=200ms,writeretry=500ms") // member mode: the writer's own, as below
	q := openQueue(t, url, queue.WithLease(lease), queue.WithWriteRetry(writeRetry),
		queue.WithMaxAttempts(1), queue.WithHeartbeat(200*time.Millisecond))
	log := &stepLog{}
	rt := newRuntime(t, q, chainRunner(log, 2), nil, runtime.WithMaxConcurrentSteps(4))
	r := startRun(t, rt)
	ctx := context.Background()

	var ids []string
	for i := range 10 {
		ids = append(ids, mustSubmit(t, rt, runtime.RunSpec{RunID: fmt.Sprint("before-", i), Input: []byte("x")}).RunID)
	}
	if err := srv.Pause(); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("pausing a server is not supported on this platform")
	} else if err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	// Submits during the outage: waiting ones, and one that gives up.
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		id := fmt.Sprint("during-", i)
		ids = append(ids, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = rt.Submit(ctx, runtime.RunSpec{RunID: id, Input: []byte("y")})
		}()
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	_, err := rt.Submit(sctx, runtime.RunSpec{RunID: "gave-up", Input: []byte("z")})
	// A member may not have sent the transaction yet (its commit calls in
	// flight wait on the writer, its later transactions for them): then
	// the outcome is known, and Submit returns ctx's error alone.
	unsent := memberMode() && errors.Is(err, context.DeadlineExceeded)
	if !unsent && (!errors.Is(err, queue.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("Submit with a 1s ctx during the outage = %v, want ErrOutcomeUnknown", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Submit with a 1s ctx took %v during the outage", d)
	}
	ids = append(ids, "gave-up")
	testenv.Eventually(t, 2*time.Minute, "an outage longer than the write-retry budget and 5 leases", func() bool {
		h := q.Health()
		return !h.Healthy && h.Stalled > 5*lease && h.Stalled > 5*writeRetry && h.LastError != nil
	})
	if err := q.Err(); err != nil {
		t.Fatalf("the store closed during the outage: %v", err)
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned during the outage: %v", err)
	default:
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Submit %d across the outage: %v", i, err)
		}
	}
	// Retrying the Submit that gave up is safe: same run ID and input.
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "gave-up", Input: []byte("z")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitStatus(t, rt, id, "success", func(s runtime.RunStatus) bool {
			if s.State.Terminal() && s.State != runtime.StateSucceeded {
				t.Fatalf("run %s ended %v: %s", id, s.State, s.Error)
			}
			return s.State == runtime.StateSucceeded
		})
		steps := log.of(id)
		if len(steps) != 3 {
			t.Fatalf("run %s ran %d steps, want 3: %+v", id, len(steps), steps)
		}
		for _, s := range steps {
			if s.Attempt != 1 {
				t.Fatalf("run %s step %d ran at attempt %d", id, s.Number, s.Attempt)
			}
		}
	}
	if dead := deadJobs(t, q, "workflow-steps"); len(dead) != 0 {
		t.Fatalf("%d step jobs dead after the outage", len(dead))
	}
	if memberMode() {
		// A member's Health is the writer's as of its last events reply,
		// which comes every 5s at most.
		testenv.Eventually(t, waitTimeout, "the member's Health to be healthy again", func() bool { return q.Health().Healthy })
	}
	if h := q.Health(); !h.Healthy {
		t.Fatalf("Health after the outage = %+v", h)
	}
}

// TestNewOnStalledStoreReturnsAtOnce: with the store hung (a dedicated
// MinIO server paused with SIGSTOP), New with a runner and a hook returns
// at once and without error: it does no I/O. Before, New recorded the
// hook's notify queue, a commit that waited for the store up to a 10 s
// timeout.
func TestNewOnStalledStoreReturnsAtOnce(t *testing.T) {
	url, srv := testenv.PausableS3(t)
	url += "&connect_timeout=1s&response_timeout=1s"
	q := openQueue(t, url, queue.WithHeartbeat(200*time.Millisecond))
	if err := srv.Pause(); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("pausing a server is not supported on this platform")
	} else if err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	start := time.Now()
	if _, err := runtime.New(q, succeedRunner(nil), &hookRecorder{}); err != nil {
		t.Fatalf("New on a stalled store: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("New on a stalled store took %v", d)
	}
}
