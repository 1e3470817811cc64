package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// shortLeaseURL is the store of a test whose lease is too short for MinIO's
// latency: memory, or in member mode a file:// store whose writer process
// reaps at the lease's pace.
func shortLeaseURL(t *testing.T, lease time.Duration) string {
	if !memberMode() {
		return testenv.MemURL(t.Name())
	}
	url := "file://" + memberStoreDir()
	setWriterFlags(url, fmt.Sprint("lease=", lease))
	return url
}

// A step whose worker dies on its last attempt is dead-lettered by the
// queue itself (lease expiry); the run must still end Failed, with a
// notification, instead of staying pending forever.
func TestRunFailsWhenQueueDeadLettersItsStep(t *testing.T) {
	ctx := context.Background()
	q, err := openStore(t, shortLeaseURL(t, 40*time.Millisecond), queue.WithLease(40*time.Millisecond), queue.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	ended := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(_ context.Context, o terminal.Outcome) error {
		select {
		case ended <- o:
		default:
		}
		return nil
	})
	rt, err := runtime.New(q, steprunner.RunnerFunc(func(context.Context, *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Succeed(nil), nil
	}), hook, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "doomed", Input: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// A worker claims step 0 and dies: it never settles or renews.
	j, err := claimOne(ctx, q, "workflow-steps")
	if err != nil || j == nil {
		t.Fatalf("claim: %v %v", j, err)
	}
	testenv.Eventually(t, 5*time.Second, "the reaper to dead-letter the abandoned last attempt", func() bool {
		s, _ := q.Stats(ctx, "workflow-steps")
		return s.Dead == 1
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case o := <-ended:
		if o.Status != terminal.Failed || !strings.Contains(o.Error, "lease expired") {
			t.Fatalf("outcome = %+v", o)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the run never ended")
	}
	st, err := rt.Status(ctx, "doomed")
	if err != nil || st.State != runtime.StateFailed {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if ok, err := rt.Cancel(ctx, "doomed"); ok || err != nil {
		t.Fatalf("Cancel of the failed run = %v, %v", ok, err)
	}
}

// Cancel of a run whose step the queue dead-lettered (before any Run
// settled it) ends the run Cancelled instead of looping.
func TestCancelRunWithDeadStep(t *testing.T) {
	ctx := context.Background()
	q, err := openStore(t, shortLeaseURL(t, 20*time.Millisecond), queue.WithLease(20*time.Millisecond), queue.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	rt, _ := runtime.New(q, steprunner.RunnerFunc(func(context.Context, *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Succeed(nil), nil
	}), terminal.Noop)
	rt.Submit(ctx, runtime.RunSpec{RunID: "r", Input: nil})
	claimOne(ctx, q, "workflow-steps")
	testenv.Eventually(t, waitTimeout, "the reaper to dead-letter the step", func() bool {
		s, _ := q.Stats(ctx, "workflow-steps")
		return s.Dead > 0
	})
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := rt.Cancel(cctx, "r")
	if !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	if st, _ := rt.Status(ctx, "r"); st.State != runtime.StateCancelled {
		t.Fatalf("Status = %+v", st)
	}
	if _, err := rt.Status(ctx, "nope"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatal(err)
	}
}
