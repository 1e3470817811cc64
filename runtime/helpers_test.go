package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Test helpers shared by the runtime tests. Every store is a fresh mem://
// store unless a test needs durability across a restart (file:// in
// t.TempDir()); queue and runtime intervals are short so that the suite
// runs in seconds, and tests wait for conditions with a deadline instead of
// sleeping.

const (
	stepsQueue  = "workflow-steps"
	notifyQueue = "workflow-notify"
	// waitTimeout bounds every wait for a condition that must happen.
	waitTimeout = 15 * time.Second
	// stuckTimeout bounds waits in tests that check a run does not stay
	// stuck: long enough for many poll, lease and backoff periods.
	stuckTimeout = 3 * time.Second
)

var storeSeq atomic.Int64

// memURL returns the URL of a fresh in-memory store; or, when
// STEPWELL_RUNTIME_STORE=s3 (as .ci/run sets for a second pass), of a fresh
// prefix on the local MinIO server, so the whole suite runs on S3; or, in
// member mode (see member_test.go), of a fresh file:// store (member) or
// MinIO prefix (member-s3), which openQueue opens as a cluster member of a
// writer process of its own.
func memURL() string {
	switch mode := os.Getenv(storeModeEnv); mode {
	case "s3", "member-s3":
		u, err := testenv.S3URL("runtime")
		if err != nil {
			panic(storeModeEnv + "=" + mode + ": " + err.Error())
		}
		return u
	case "member":
		return "file://" + memberStoreDir()
	}
	return testenv.MemURL("runtime-test")
}

// fileURL returns the URL of a fresh local-disk store in a temp dir.
func fileURL(t testing.TB) string {
	return "file://" + t.TempDir()
}

// fastQueueOpts keep retries and idle claims short.
func fastQueueOpts() []queue.Option {
	return []queue.Option{
		queue.WithRetryBackoff(time.Millisecond, 5*time.Millisecond),
		queue.WithPollInterval(10 * time.Millisecond),
	}
}

// openQueue opens url with fastQueueOpts (then opts) and closes it when the
// test ends. In member mode (see member_test.go) the Queue is a cluster
// member of the store's writer process, and must still be one at the end.
func openQueue(t testing.TB, url string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := openStore(t, url, opts...)
	if err != nil {
		t.Fatalf("queue.Open(%s): %v", url, err)
	}
	t.Cleanup(func() {
		if memberMode() && !strings.HasPrefix(url, "mem://") && q.Err() == nil {
			if r := q.Role(); r != queue.RoleMember {
				t.Errorf("member mode: the test's Queue on %s is %v at the end of the test, want a member", url, r)
			}
		}
		q.Close(context.Background())
	})
	return q
}

// newRuntime builds a Runtime with a short poll interval (then opts).
func newRuntime(t testing.TB, q *queue.Queue, r steprunner.Runner, h terminal.Hook, opts ...runtime.Option) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(q, r, h, append([]runtime.Option{runtime.WithPollInterval(10 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("runtime.New: %v", err)
	}
	return rt
}

// running is a Runtime.Run in the background.
type running struct {
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startRun runs rt.Run until stop (or the end of the test).
func startRun(t testing.TB, rt *runtime.Runtime) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- rt.Run(ctx) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels Run's ctx and waits for it to return; Run must return nil.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(waitTimeout):
			r.err = errors.New("Run did not return after its ctx was cancelled")
		}
		if r.err != nil {
			r.t.Errorf("Run: %v", r.err)
		}
	})
	return r.err
}

// waitStatus polls Status until pred holds and returns that status.
func waitStatus(t testing.TB, rt *runtime.Runtime, runID string, what string, pred func(runtime.RunStatus) bool) runtime.RunStatus {
	t.Helper()
	var st runtime.RunStatus
	var lastErr error
	done := false
	defer func() {
		if !done {
			t.Logf("run %s: last status %+v, err %v", runID, st, lastErr)
		}
	}()
	testenv.Eventually(t, waitTimeout, "run "+runID+": "+what, func() bool {
		st, lastErr = rt.Status(context.Background(), runID)
		return lastErr == nil && pred(st)
	})
	done = true
	return st
}

// waitTerminal waits until the run is in a final state.
func waitTerminal(t testing.TB, rt *runtime.Runtime, runID string) runtime.RunStatus {
	t.Helper()
	return waitStatus(t, rt, runID, "a final state", func(s runtime.RunStatus) bool { return s.State.Terminal() })
}

// hookRecorder is a terminal.Hook that records every call.
type hookRecorder struct {
	mu    sync.Mutex
	calls []terminal.Outcome
	// fail, when set, decides the error of call number n (1-based, counted
	// per run).
	fail func(o terminal.Outcome, n int) error
}

func (h *hookRecorder) OnTermination(ctx context.Context, o terminal.Outcome) error {
	h.mu.Lock()
	n := 1
	for _, c := range h.calls {
		if c.RunID == o.RunID {
			n++
		}
	}
	h.calls = append(h.calls, o)
	fail := h.fail
	h.mu.Unlock()
	if fail != nil {
		return fail(o, n)
	}
	return nil
}

// outcomes returns the calls for runID.
func (h *hookRecorder) outcomes(runID string) []terminal.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []terminal.Outcome
	for _, c := range h.calls {
		if c.RunID == runID {
			out = append(out, c)
		}
	}
	return out
}

func (h *hookRecorder) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// wait waits for the first call for runID and returns it.
func (h *hookRecorder) wait(t testing.TB, runID string) terminal.Outcome {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "the hook to be called for "+runID, func() bool { return len(h.outcomes(runID)) > 0 })
	return h.outcomes(runID)[0]
}

// stepLog records the steps a runner saw.
type stepLog struct {
	mu    sync.Mutex
	steps []steprunner.Step
}

func (l *stepLog) add(s *steprunner.Step) {
	c := *s
	c.Payload = slices.Clone(s.Payload)
	c.Headers = maps.Clone(s.Headers)
	l.mu.Lock()
	l.steps = append(l.steps, c)
	l.mu.Unlock()
}

// of returns the steps seen for runID, in call order.
func (l *stepLog) of(runID string) []steprunner.Step {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []steprunner.Step
	for _, s := range l.steps {
		if s.RunID == runID {
			out = append(out, s)
		}
	}
	return out
}

func (l *stepLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.steps)
}

// chainRunner appends "|n" to the payload at every step and succeeds at
// step last with the payload as result.
func chainRunner(log *stepLog, last uint32) steprunner.RunnerFunc {
	return func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if log != nil {
			log.add(s)
		}
		p := fmt.Appendf(slices.Clone(s.Payload), "|%d", s.Number)
		if s.Number >= last {
			return steprunner.Succeed(p), nil
		}
		return steprunner.Continue(p), nil
	}
}

// succeedRunner succeeds at step 0 with the input as result.
func succeedRunner(log *stepLog) steprunner.RunnerFunc { return chainRunner(log, 0) }

// mustSubmit submits spec and fails the test on error.
func mustSubmit(t testing.TB, rt *runtime.Runtime, spec runtime.RunSpec) runtime.SubmitOutcome {
	t.Helper()
	out, err := rt.Submit(context.Background(), spec)
	if err != nil {
		t.Fatalf("Submit(%q): %v", spec.RunID, err)
	}
	return out
}

// mustStats returns a queue's stats.
func mustStats(t testing.TB, q *queue.Queue, name string) queue.Stats {
	t.Helper()
	s, err := q.Stats(context.Background(), name)
	if err != nil {
		t.Fatalf("Stats(%s): %v", name, err)
	}
	return s
}

// deadJobs returns the dead jobs of a queue.
func deadJobs(t testing.TB, q *queue.Queue, name string) []*queue.Job {
	t.Helper()
	page, err := q.DeadJobs(context.Background(), name, "", 0)
	if err != nil {
		t.Fatalf("DeadJobs(%s): %v", name, err)
	}
	return page.Jobs
}

// checkNoReservedHeaders fails if h has a reserved key.
func checkNoReservedHeaders(t testing.TB, what string, h map[string]string) {
	t.Helper()
	for k := range h {
		if strings.HasPrefix(k, runtime.ReservedPrefix) {
			t.Errorf("%s: reserved header %q leaked: %v", what, k, h)
		}
	}
}

// waitIdle waits until q has no job queued, scheduled or claimed in any
// queue (dead jobs aside): the Runtimes on q have nothing left to do, but
// for what follows a settlement's commit in the same worker (an
// ErrorHandler report; stop Run to wait for that too).
func waitIdle(t testing.TB, q *queue.Queue) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "the queues to be idle (no job queued, scheduled or claimed)", func() bool {
		names, err := q.Queues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if s := mustStats(t, q, name); s.Pending+s.Scheduled+s.Claimed != 0 {
				return false
			}
		}
		return true
	})
}

// waitParkedDue waits until the due time of runID's parked step has
// passed: had the step stayed queued, it would now be claimable.
func waitParkedDue(t testing.TB, q *queue.Queue, runID string) {
	t.Helper()
	b, err := q.Get(context.Background(), runrec.ParkedKey(runID))
	if err != nil {
		t.Fatalf("the parked step of %s: %v", runID, err)
	}
	p, err := runrec.DecodeParked(b)
	if err != nil {
		t.Fatalf("the parked step of %s: %v", runID, err)
	}
	testenv.Eventually(t, waitTimeout, "the parked step's due time to pass", func() bool {
		return time.Now().UnixNano() > p.DueAt
	})
}

// whenIdle checks that something did NOT happen (a step ran again, a hook
// was called twice): it waits until q is idle (waitIdle), then fails the
// test with what unless cond holds. Whatever could break cond (a
// redelivery, a retry, a parked step let through, a second notification)
// is a job until it has run, so an idle queue proves those paths ran; a
// fixed wait proves nothing on a slow machine.
func whenIdle(t testing.TB, q *queue.Queue, what string, cond func() bool) {
	t.Helper()
	waitIdle(t, q)
	if !cond() {
		t.Fatalf("%s", what)
	}
}

// chainSetup opens a memory store and a Runtime whose runs continue to step
// last, recording steps and outcomes.
func chainSetup(t testing.TB, last uint32, opts ...runtime.Option) (*queue.Queue, *stepLog, *hookRecorder, *runtime.Runtime) {
	q := openQueue(t, memURL())
	log := &stepLog{}
	hook := &hookRecorder{}
	return q, log, hook, newRuntime(t, q, chainRunner(log, last), hook, opts...)
}

// claimOne claims the next job of the named queue by hand (nil: none).
func claimOne(ctx context.Context, q *queue.Queue, name string) (*queue.Job, error) {
	jobs, err := q.Claim(ctx, name, queue.ClaimOptions{})
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return jobs[0], nil
}

// startPipedHelper starts the test binary again as a helper process, with
// env added to its environment (which helper it runs), and returns it with
// pipes to its stdin and stdout and a buffer of its stderr.
func startPipedHelper(t testing.TB, env ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, *testenv.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testenv.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout, stderr
}

// serveUntilStdinEnds is a helper process's last part: it runs rt, calls
// ready, and when the process's stdin ends stops rt and closes q (within
// closeWithin). It returns the exit code: 0, or runCode if Run failed,
// runCode+1 if Close did, with the error on stderr after name.
func serveUntilStdinEnds(q *queue.Queue, rt *runtime.Runtime, name string, ready func(), closeWithin time.Duration, runCode int) int {
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	ready()
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, name+": Run:", err)
		return runCode
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWithin)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, name+": close:", err)
		return runCode + 1
	}
	return 0
}

// killWhenReady waits for the started child cmd to send on ready (fails
// if it exits first, "before <readyDone>", or takes over 2*waitTimeout:
// "did not <readyDo>"), then SIGKILLs it and waits for it to exit. It
// returns what ready sent.
func killWhenReady[T any](t *testing.T, cmd *exec.Cmd, stderr *testenv.Buffer, ready <-chan T, readyDone, readyDo string) T {
	t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var v T
	select {
	case v = <-ready:
	case err := <-exited:
		t.Fatalf("child exited before %s: %v\n%s", readyDone, err, stderr)
	case <-time.After(2 * waitTimeout):
		cmd.Process.Kill()
		t.Fatalf("child did not %s\n%s", readyDo, stderr)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	return v
}
