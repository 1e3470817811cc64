package runtime_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Member mode: STEPWELL_RUNTIME_STORE=member (file:// stores) or
// member-s3 (memURL's stores on MinIO, fileURL's on file://) runs the
// suite with every Runtime in a cluster member. Each store a test opens
// gets a writer process of its own (this test binary, re-executed, which
// opens the store WithCluster and serves until killed), started at the
// store's first open; the test's Queue is opened WithCluster too, and must
// be a member (anything else fails the test, so the mode cannot quietly
// turn into a writer run). The writer is killed and reaped when the test
// ends; a writer that exited by itself meanwhile fails the test.

const (
	storeModeEnv = "STEPWELL_RUNTIME_STORE"
	// memberWriterEnv is the store URL a writer process serves.
	memberWriterEnv = "STEPWELL_RUNTIME_MEMBER_WRITER"
	// memberWriterFlagsEnv holds the writer's store-level options (see
	// setWriterFlags).
	memberWriterFlagsEnv = "STEPWELL_RUNTIME_MEMBER_WRITER_FLAGS"
	// memberWriterReady is the line a writer process writes to stdout once
	// it is the store's writer.
	memberWriterReady = "member-writer: ready"
)

// memberMode reports whether the suite runs with its Runtimes in members.
func memberMode() bool {
	m := os.Getenv(storeModeEnv)
	return m == "member" || m == "member-s3"
}

// writerOnly skips t in member mode: it tests what only the store's writer
// process does, so a member in front of it would test something else.
func writerOnly(t testing.TB, why string) {
	t.Helper()
	if memberMode() {
		t.Skipf("%s=%s: writer-only test: %s", storeModeEnv, os.Getenv(storeModeEnv), why)
	}
}

// clusterOpt is how every process of member mode opens a store.
func clusterOpt() queue.Option {
	return queue.WithCluster(queue.ClusterConfig{Listen: "127.0.0.1:0"})
}

// openStore opens url as a test's store with fastQueueOpts (then opts),
// without closing it at the end of the test. In member mode it starts the
// store's writer process first (once per store) and opens the store as a
// member of it.
func openStore(t testing.TB, url string, opts ...queue.Option) (*queue.Queue, error) {
	t.Helper()
	opts = append(fastQueueOpts(), opts...)
	if !memberMode() || strings.HasPrefix(url, "mem://") {
		return queue.Open(context.Background(), url, opts...)
	}
	startMemberWriter(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	q, err := queue.Open(ctx, url, append(opts, clusterOpt())...)
	if err != nil {
		return nil, err
	}
	if r := q.Role(); r != queue.RoleMember {
		q.Close(context.Background())
		t.Fatalf("member mode: opened %s as %v, want a member of the writer process", url, r)
	}
	return q, nil
}

// writerReadyTimeout bounds a writer process's start: generous, as the
// race detector's start on 2 busy cores once took 8.5s.
const writerReadyTimeout = time.Minute

// memberWriters are the running writer processes, by store URL, and the
// store-level options to start them with.
var memberWriters = struct {
	sync.Mutex
	m     map[string]*memberWriter
	flags map[string]string
}{m: map[string]*memberWriter{}, flags: map[string]string{}}

// setWriterFlags sets, for member mode, the store-level options of url's
// writer process, which a member's own options do not change (as those of
// a second Open in one process do not): flags is a comma-separated list of
// heartbeat=DURATION, writeretry=DURATION and lease=DURATION (the reaper's
// cadence is the writer's lease/4), the options a test passes to its own
// Open. Call it before the store's first open.
func setWriterFlags(url, flags string) {
	memberWriters.Lock()
	defer memberWriters.Unlock()
	memberWriters.flags[url] = flags
}

// writerFlagOpts parses setWriterFlags's flags.
func writerFlagOpts(flags string) ([]queue.Option, error) {
	var opts []queue.Option
	for _, f := range strings.Split(flags, ",") {
		if f == "" {
			continue
		}
		k, v, _ := strings.Cut(f, "=")
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("writer flag %q: %v", f, err)
		}
		switch k {
		case "heartbeat":
			opts = append(opts, queue.WithHeartbeat(d))
		case "writeretry":
			opts = append(opts, queue.WithWriteRetry(d))
		case "lease":
			opts = append(opts, queue.WithLease(d))
		default:
			return nil, fmt.Errorf("unknown writer flag %q", f)
		}
	}
	return opts, nil
}

type memberWriter struct {
	cmd    *exec.Cmd
	stderr *testenv.Buffer
	exited chan struct{} // closed when the process has been reaped
	err    error         // cmd.Wait's, once exited is closed
	killed atomic.Bool   // killed by the test (killMemberWriter): its exit is expected
}

// startMemberWriter starts the writer process of url unless it runs, and
// kills it when t ends.
func startMemberWriter(t testing.TB, url string) {
	t.Helper()
	// Stores are not shared between tests, and a test opens its stores one
	// at a time: the lock is not held while the writer starts.
	memberWriters.Lock()
	running, flags := memberWriters.m[url] != nil, memberWriters.flags[url]
	memberWriters.Unlock()
	if running {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memberWriterEnv+"="+url, memberWriterFlagsEnv+"="+flags)
	// The writer exits when its stdin ends: when this process dies
	// without cleaning up, its end of the pipe closes.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &memberWriter{cmd: cmd, stderr: &testenv.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("member mode: starting the writer process: %v", err)
	}
	ready := awaitLine(stdout, memberWriterReady, func() {
		w.err = cmd.Wait()
		close(w.exited)
	})
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-w.exited
		_ = stdin.Close()
	}
	select {
	case ok := <-ready:
		if !ok {
			kill()
			t.Fatalf("member mode: the writer process of %s exited before it was ready: %v\n%s", url, w.err, w.stderr.String())
		}
	case <-time.After(writerReadyTimeout):
		kill()
		t.Fatalf("member mode: the writer process of %s was not ready after %v\n%s", url, writerReadyTimeout, w.stderr.String())
	}
	memberWriters.Lock()
	memberWriters.m[url] = w
	memberWriters.Unlock()
	t.Logf("member mode: writer process %d serves %s (ready in %v)", cmd.Process.Pid, url, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		memberWriters.Lock()
		delete(memberWriters.m, url)
		delete(memberWriters.flags, url)
		memberWriters.Unlock()
		select {
		case <-w.exited:
			if w.killed.Load() {
				return
			}
			t.Errorf("member mode: the writer process of %s exited during the test: %v\n%s", url, w.err, w.stderr.String())
			return
		default:
		}
		kill()
		var ee *exec.ExitError
		if !errors.As(w.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("member mode: the writer process of %s ended with %v, want SIGKILL\n%s", url, w.err, w.stderr.String())
		}
		if t.Failed() {
			t.Logf("member mode: the writer process's stderr:\n%s", w.stderr.String())
		}
	})
}

// killMemberWriter SIGKILLs the writer process of url (startMemberWriter)
// and waits for its exit.
func killMemberWriter(t testing.TB, url string) {
	t.Helper()
	memberWriters.Lock()
	w := memberWriters.m[url]
	memberWriters.Unlock()
	if w == nil {
		t.Fatalf("no writer process serves %s", url)
	}
	w.killed.Store(true)
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
}

// memberWriterChild is the writer process of member mode: it opens url as
// the cluster's writer and serves until killed or until its stdin ends.
func memberWriterChild(url string) int {
	flagOpts, err := writerFlagOpts(os.Getenv(memberWriterFlagsEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "member-writer:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	q, err := queue.Open(ctx, url, append(append(fastQueueOpts(), flagOpts...), clusterOpt())...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "member-writer: open:", err)
		return 2
	}
	if r := q.Role(); r != queue.RoleWriter {
		fmt.Fprintf(os.Stderr, "member-writer: opened %s as %v, want the writer\n", url, r)
		return 3
	}
	fmt.Println(memberWriterReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Fprintln(os.Stderr, "member-writer: stdin closed: closing")
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "member-writer: close:", err)
		return 4
	}
	return 0
}

// memberBase is the directory of member mode's file:// stores, removed when
// the tests end (see TestMain).
var memberBase = sync.OnceValues(func() (string, error) {
	return os.MkdirTemp("", "stepwell-runtime-member-")
})

// memberStoreDir returns a fresh directory for a file:// store.
func memberStoreDir() string {
	base, err := memberBase()
	if err != nil {
		panic("member mode: " + err.Error())
	}
	dir := filepath.Join(base, fmt.Sprint("store-", storeSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		panic("member mode: " + err.Error())
	}
	return dir
}

// removeMemberStores removes the directory of member mode's file://
// stores, if it was made.
func removeMemberStores() {
	if base, err := memberBase(); err == nil {
		_ = os.RemoveAll(base)
	}
}

// memberRuntime opens a new file:// store as a member beside a writer
// process, and runs on it a Runtime of runner with one step slot; a first
// run ("warm-up") settles what Run does at its start.
func memberRuntime(t *testing.T, runner steprunner.Runner) (*queue.Queue, *runtime.Runtime, *hookRecorder) {
	t.Helper()
	url := fileURL(t)
	startMemberWriter(t, url)
	ctx := context.Background()
	m, err := queue.Open(ctx, url, append(fastQueueOpts(), clusterOpt())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) }) // after Run stops
	if m.Role() != queue.RoleMember {
		t.Fatalf("Open beside a writer process is %v, want a member", m.Role())
	}
	hook := &hookRecorder{}
	rt := newRuntime(t, m, runner, hook, runtime.WithMaxConcurrentSteps(1))
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "warm-up"})
	hook.wait(t, "warm-up")
	return m, rt, hook
}

// A step chained to its slot by its predecessor's settlement starts with
// the run record that settlement wrote: in a member, each step of a run
// costs one call to the writer (its settlement), not two (a read of the
// run record, then the settlement).
func TestChainedStepsCostOneCallEach(t *testing.T) {
	const steps = 30
	m, rt, hook := memberRuntime(t, chainRunner(nil, steps-1))
	before := m.StorageStats().ClusterCalls
	mustSubmit(t, rt, runtime.RunSpec{RunID: "long", Input: []byte("p")})
	if o := hook.wait(t, "long"); o.Status != terminal.Succeeded {
		t.Fatalf("outcome %+v", o)
	}
	// Besides the settlements: the submit, the ack of the notification,
	// and the long-polls that ended meanwhile.
	calls := m.StorageStats().ClusterCalls - before
	t.Logf("%d calls for %d steps", calls, steps)
	if calls > steps+steps/3 {
		t.Fatalf("%d calls to the writer for a run of %d steps, want about one per step", calls, steps)
	}
}

// A run submitted in a member whose step slot is idle starts there,
// dispatched by its submit with the run record the submit wrote, and its
// notification starts in an idle hook slot: a one-step run costs three
// calls to the writer (its submit, its settlement, the notification's
// ack), without a claim or a read.
func TestDispatchedRunCostsThreeCalls(t *testing.T) {
	m, rt, hook := memberRuntime(t, succeedRunner(nil))
	const runs = 20
	before := m.StorageStats().ClusterCalls
	for i := range runs {
		id := fmt.Sprint("run-", i)
		mustSubmit(t, rt, runtime.RunSpec{RunID: id})
		hook.wait(t, id)
	}
	calls := m.StorageStats().ClusterCalls - before
	t.Logf("%d calls for %d one-step runs", calls, runs)
	// Slack for the long-polls (claims, events) that ended meanwhile, and
	// for submits that found the step or hook loop between two claim
	// calls (not parked: no dispatch, and a claim call more), which a
	// loaded machine makes likelier: 67 calls once in 150 runs beside two
	// spinning processes. Without dispatch a run costs 4 or 5 calls.
	if calls > 3*runs+runs/2 {
		t.Fatalf("%d calls to the writer for %d one-step runs, want 3 each", calls, runs)
	}
}

// A step a member claims (here: due later, so not dispatched by its
// submit) comes with its run record, read by the writer with the claim: a
// one-step run costs four calls (its submit, the claim, its settlement,
// the notification's ack), without a read of its own.
func TestClaimedStepComesWithItsRecord(t *testing.T) {
	m, rt, hook := memberRuntime(t, succeedRunner(nil))
	const runs = 20
	before := m.StorageStats().ClusterCalls
	start := time.Now().Add(300 * time.Millisecond)
	for i := range runs {
		mustSubmit(t, rt, runtime.RunSpec{RunID: fmt.Sprint("run-", i), StartAt: start})
	}
	for i := range runs {
		if o := hook.wait(t, fmt.Sprint("run-", i)); o.Status != terminal.Succeeded {
			t.Fatalf("outcome %+v", o)
		}
	}
	calls := m.StorageStats().ClusterCalls - before
	t.Logf("%d calls for %d one-step runs", calls, runs)
	// Slack for the long-polls (claims, events) that ended meanwhile.
	if calls > 4*runs+runs/4 {
		t.Fatalf("%d calls to the writer for %d one-step runs, want 4 each", calls, runs)
	}
}

// awaitLine reads r, a helper process's stdout, until the line want, and
// reports on the returned channel whether it came (false: r ended first);
// then it drains r and calls exited, which waits for the process.
func awaitLine(r io.Reader, want string, exited func()) <-chan bool {
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		ok := false
		for sc.Scan() {
			if sc.Text() == want {
				ok = true
				break
			}
		}
		ready <- ok
		_, _ = io.Copy(io.Discard, r)
		exited()
	}()
	return ready
}
