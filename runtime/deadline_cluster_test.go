package runtime_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// deadlineMemberEnv is the store URL a deadline member process serves (see
// deadlineMemberChild).
const deadlineMemberEnv = "STEPWELL_DEADLINE_MEMBER"

// deadlineMemberChild is a member process of a cluster whose writer is the
// test: it runs a Runtime of the step queue "b", whose steps report on
// stdout, one line each, "started <run> <step>", then, once their ctx
// ends, "cause <is ErrRunDeadline> <cause>", and return Succeed late
// ("returned"). It writes "ready" once its Run started, and stops, closes
// and exits 0 at the end of its stdin.
func deadlineMemberChild(url string) int {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, waitTimeout)
	q, err := queue.Open(octx, url, append(fastQueueOpts(), clusterOpt())...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deadline member: open:", err)
		return 2
	}
	if r := q.Role(); r != queue.RoleMember {
		fmt.Fprintf(os.Stderr, "deadline member: opened %s as %v, want a member\n", url, r)
		return 3
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		say("started %s %d", s.RunID, s.Number)
		<-ctx.Done()
		cause := context.Cause(ctx)
		say("cause %v %v", errors.Is(cause, runtime.ErrRunDeadline), cause)
		defer say("returned")
		return steprunner.Succeed([]byte("late")), nil
	})
	rt, err := runtime.New(q, runner, nil, runtime.WithQueueName("b"), runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "deadline member: New:", err)
		return 4
	}
	return serveUntilStdinEnds(q, rt, "deadline member", func() { say("ready") }, waitTimeout, 5)
}

// Cluster mode across processes: this process is the store's writer and
// runs step 0 (step queue "a", whose timers queue holds the deadline job,
// so the deadline fires here); step 1 goes OnQueue("b") to a member
// process, where it runs when the deadline passes. The deadline's
// transaction, committed by the writer, reaches the member's step: its ctx
// ends with cause ErrRunDeadline; its late Succeed changes nothing.
func TestDeadlineStepInMemberProcess(t *testing.T) {
	t.Parallel()
	url := fileURL(t)
	ctx := context.Background()
	q, err := queue.Open(ctx, url, append(fastQueueOpts(), clusterOpt())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(ctx) })
	if r := q.Role(); r != queue.RoleWriter {
		t.Fatalf("the test's Queue is %v, want the writer", r)
	}
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Continue([]byte("to b")).OnQueue("b"), nil
	}), hook, runtime.WithQueueName("a"))
	startRun(t, rt)

	cmd, stdin, stdout, stderr := startPipedHelper(t, deadlineMemberEnv+"="+url)
	lines := make(chan string, 16)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the member process: %v\n%s", err, stderr.String())
			}
		case <-time.After(testenv.Scale(waitTimeout)):
			_ = cmd.Process.Kill()
			t.Errorf("the member process did not exit at the end of its stdin\n%s", stderr.String())
		}
	})
	next := func(want string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, want) {
				t.Fatalf("the member process said %q (open: %v), want %q...\n%s", l, ok, want, stderr.String())
			}
			return l
		case <-time.After(testenv.Scale(waitTimeout)):
			t.Fatalf("the member process did not say %q\n%s", want, stderr.String())
		}
		return ""
	}
	next("ready")
	d := deadlineIn()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "x", Deadline: d})
	next("started x 1")
	if l := next("cause "); !strings.HasPrefix(l, "cause true ") {
		t.Fatalf("the member's step ctx: %q, want the cause ErrRunDeadline", l)
	}
	next("returned")
	checkDeadlineEnd(t, q, rt, hook, "x", d, 1)
}
