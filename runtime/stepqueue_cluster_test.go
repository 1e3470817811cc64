package runtime_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

const (
	// queueHelperEnv is the store URL that a queue helper process serves
	// (see queueHelperChild).
	queueHelperEnv   = "STEPWELL_RUNTIME_QUEUE_HELPER"
	queueHelperReady = "queue-helper: ready"
)

// queueHelperChild is a process of the cluster on url that serves the step
// queue "remote" only: each step it runs appends "|remote:<pid>" to its
// payload and sends the next step back to "workflow-steps". It runs until
// its stdin ends.
func queueHelperChild(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	q, err := queue.Open(ctx, url, append(fastQueueOpts(), clusterOpt())...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue-helper: open:", err)
		return 2
	}
	if r := q.Role(); r != queue.RoleMember {
		fmt.Fprintf(os.Stderr, "queue-helper: opened %s as %v, want a member\n", url, r)
		return 3
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Continue(fmt.Appendf(s.Payload, "|remote:%d", os.Getpid())).OnQueue("workflow-steps"), nil
	})
	rt, err := runtime.New(q, runner, nil, runtime.WithQueueName("remote"), runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue-helper: New:", err)
		return 4
	}
	return serveUntilStdinEnds(q, rt, "queue-helper", func() { fmt.Println(queueHelperReady) }, 10*time.Second, 5)
}

// TestOnQueueOtherProcess (cluster mode): a step sent with OnQueue to a
// queue that only another process serves runs there, and its next step
// comes back to this process's queue, with one notification here. Fails
// if the step runs in the wrong process, or never.
func TestOnQueueOtherProcess(t *testing.T) {
	url := fileURL(t)
	startMemberWriter(t, url)
	ctx := context.Background()
	m, err := queue.Open(ctx, url, append(fastQueueOpts(), clusterOpt())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) })

	cmd, stdin, stdout, stderr := startPipedHelper(t, queueHelperEnv+"="+url)
	exited := make(chan error, 1)
	ready := awaitLine(stdout, queueHelperReady, func() { exited <- cmd.Wait() })
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("queue helper: %v\n%s", err, stderr.String())
			}
		case <-time.After(waitTimeout):
			_ = cmd.Process.Kill()
			t.Errorf("queue helper did not exit\n%s", stderr.String())
		}
	})
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("queue helper exited before it was ready\n%s", stderr.String())
		}
	case <-time.After(writerReadyTimeout):
		t.Fatalf("queue helper not ready\n%s", stderr.String())
	}

	hook := &hookRecorder{}
	rt := newRuntime(t, m, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number == 0 {
			return steprunner.Continue(fmt.Appendf(nil, "local:%d", os.Getpid())).OnQueue("remote"), nil
		}
		return steprunner.Succeed(fmt.Appendf(s.Payload, "|local:%d", os.Getpid())), nil
	}), hook)
	startRun(t, rt)
	for i := range 3 {
		id := fmt.Sprint("far-", i)
		mustSubmit(t, rt, runtime.RunSpec{RunID: id})
		o := hook.wait(t, id)
		want := fmt.Sprintf("local:%d|remote:%d|local:%d", os.Getpid(), cmd.Process.Pid, os.Getpid())
		if o.Status != terminal.Succeeded || string(o.Result) != want || o.FinalStep != 2 {
			t.Fatalf("run %s: outcome %+v (result %q), want succeeded at step 2 with %q", id, o, o.Result, want)
		}
	}
}
