package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

const (
	startAtChildEnv = "STEPWELL_RUNTIME_STARTAT_CHILD" // store dir
	// startAtSubmitted starts the child's line once its Submit returned,
	// followed by the run's StartAt in unix ns.
	startAtSubmitted = "child: submitted "
	startAtStepRan   = "child: step ran"
)

// startAtChild runs a Runtime on the store in dir, submits a run due 2s
// from now, says so on stderr and runs until killed. Its step must not run
// before the kill.
func startAtChild(dir string) int {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir, fastQueueOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		fmt.Fprintln(os.Stderr, startAtStepRan)
		<-ctx.Done()
		return steprunner.Outcome{}, ctx.Err()
	})
	rt, err := runtime.New(q, runner, terminal.Noop, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child New:", err)
		return 3
	}
	go rt.Run(ctx)
	startAt := time.Now().Add(2 * time.Second)
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "scheduled", Input: []byte("in"), StartAt: startAt}); err != nil {
		fmt.Fprintln(os.Stderr, "child submit:", err)
		return 4
	}
	fmt.Fprintf(os.Stderr, "%s%d\n", startAtSubmitted, startAt.UnixNano())
	<-make(chan int) // run until killed
	return 0
}

// A scheduled run survives a SIGKILL of the process that submitted it
// while its Run was going: after the restart it is still scheduled for its
// StartAt (a duplicate Submit is a no-op, another StartAt a mismatch), and
// step 0 runs no earlier than that.
func TestStartAtSurvivesKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartAtSurvivesKill$")
	cmd.Env = append(os.Environ(), startAtChildEnv+"="+dir)
	stderr := &testenv.Buffer{}
	submitted := make(chan int64, 1)
	stderr.OnLine = func(line string) {
		if ns, ok := strings.CutPrefix(line, startAtSubmitted); ok {
			n, _ := strconv.ParseInt(ns, 10, 64)
			submitted <- n
		}
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var startNs int64
	select {
	case startNs = <-submitted:
	case <-time.After(waitTimeout):
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		t.Fatalf("the child did not submit\n%s", stderr.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if strings.Contains(stderr.String(), startAtStepRan) {
		t.Fatalf("the child ran step 0 before its StartAt\n%s", stderr.String())
	}
	startAt := time.Unix(0, startNs)

	ctx := context.Background()
	q := openQueue(t, "file://"+dir)
	var mu sync.Mutex
	var ran time.Time
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		mu.Lock()
		ran = time.Now()
		mu.Unlock()
		return steprunner.Succeed(s.Payload), nil
	}), hook)
	spec := runtime.RunSpec{RunID: "scheduled", Input: []byte("in"), StartAt: startAt}
	// Scheduled until StartAt (the reopen normally takes well under the 2s
	// the child left; on a machine so loaded that it did not, the step is
	// merely due).
	st, err := rt.Status(ctx, "scheduled")
	stillEarly := time.Now().Before(startAt)
	if err != nil || st.State != runtime.StatePending || st.CurrentStep != 0 || st.Scheduled && !st.DueAt.Equal(startAt) ||
		stillEarly && !st.Scheduled {
		t.Errorf("Status after the kill = %+v, %v; want pending at step 0, scheduled and due at %v", st, err, startAt)
	}
	if out := mustSubmit(t, rt, spec); out.NewlySubmitted {
		t.Errorf("duplicate Submit after the kill = %+v, want a no-op", out)
	}
	other := spec
	other.StartAt = startAt.Add(time.Minute)
	if _, err := rt.Submit(ctx, other); !errors.Is(err, runtime.ErrSpecMismatch) {
		t.Errorf("Submit with another StartAt after the kill: %v, want ErrSpecMismatch", err)
	}
	startRun(t, rt)
	if o := hook.wait(t, "scheduled"); o.Status != terminal.Succeeded || string(o.Result) != "in" {
		t.Errorf("outcome = %+v, want succeeded", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran.Before(startAt) {
		t.Errorf("step 0 ran %v before its StartAt", startAt.Sub(ran))
	}
}
