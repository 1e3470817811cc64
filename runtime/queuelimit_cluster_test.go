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
	"slices"
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
)

// The queue limit in cluster mode, with real processes (this test binary
// re-executed): helpers each run a Runtime on the step queue "llm" with 4
// slots, and submit runs of 3 steps when told to (so their step 0 is
// dispatched to their own idle slots, and later steps are chained). Each
// step records its start and end (wall-clock ns, one write(2) per line on
// an O_APPEND file shared by all processes):
//
//	start <helper> <run> <step> <ns>
//	end <helper> <run> <step> <ns>
//	submitted <helper> <run>            Submit returned nil
//
// The parent, a member of the cluster, sets MaxRunning 3 on "llm" and
// computes from the log how many steps ran at once across processes: a
// step's execution lies inside its claim, so this is a lower bound of the
// claims held at once, which the limit bounds.

const (
	qlimitHelperEnv = "STEPWELL_QLIMIT_HELPER" // the store URL, in a helper
	qlimitNameEnv   = "STEPWELL_QLIMIT_NAME"
	qlimitEventsEnv = "STEPWELL_QLIMIT_EVENTS"
	qlimitStepEnv   = "STEPWELL_QLIMIT_STEP" // how long each step runs
	qlimitQueue     = "llm"
	qlimitDeadline  = 2 * time.Minute
)

func qlimitQueueOpts() []queue.Option {
	return append(fastQueueOpts(),
		queue.WithCluster(queue.ClusterConfig{Listen: "127.0.0.1:0"}),
		queue.WithHeartbeat(clusterHeartbeat),
		queue.WithLease(clusterLease))
}

// qlimitHelper is a helper process: it serves "llm" and, for each line
// "submit PREFIX N" on stdin, submits runs PREFIX-0 .. PREFIX-(N-1). It
// stops at the end of stdin.
func qlimitHelper(url string) int {
	name := os.Getenv(qlimitNameEnv)
	stepFor, _ := time.ParseDuration(os.Getenv(qlimitStepEnv))
	events, err := os.OpenFile(os.Getenv(qlimitEventsEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "qlimit helper:", err)
		return 2
	}
	record := func(format string, args ...any) {
		if _, err := events.WriteString(fmt.Sprintf(format, args...) + "\n"); err != nil {
			fmt.Fprintln(os.Stderr, "qlimit helper: events:", err)
			os.Exit(2)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), qlimitDeadline)
	q, err := queue.Open(ctx, url, qlimitQueueOpts()...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "qlimit helper: open:", err)
		return 3
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		record("start %s %s %d %d", name, s.RunID, s.Number, time.Now().UnixNano())
		d := stepFor
		if strings.HasPrefix(s.RunID, "a2-") {
			d = qlimitKillStep // the steps the writer's kill must cut
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return steprunner.Outcome{}, context.Cause(ctx)
		}
		record("end %s %s %d %d", name, s.RunID, s.Number, time.Now().UnixNano())
		if s.Number == 2 {
			return steprunner.Succeed(nil), nil
		}
		return steprunner.Continue(nil), nil
	})
	rt, err := runtime.New(q, runner, nil, runtime.WithQueueName(qlimitQueue),
		runtime.WithMaxConcurrentSteps(4), runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "qlimit helper: New:", err)
		return 4
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	fmt.Printf("ready %v\n", q.Role())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "submit" {
			continue
		}
		n, _ := strconv.Atoi(f[2])
		for i := range n {
			id := fmt.Sprintf("%s-%d", f[1], i)
			for {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := rt.Submit(sctx, runtime.RunSpec{RunID: id, Queue: qlimitQueue})
				cancel()
				if err == nil {
					record("submitted %s %s", name, id)
					break
				}
				// A failover may interrupt it: submits are idempotent.
				fmt.Fprintln(os.Stderr, "qlimit helper: submit:", err)
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	stop()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "qlimit helper: Run:", err)
		return 5
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "qlimit helper: close:", err)
		return 6
	}
	return 0
}

type qlimitProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *testenv.Buffer
	stderr *testenv.Buffer
	exited chan struct{}
	err    error

	mu    sync.Mutex
	ready string // the role it reported when ready
}

// qlimitKillStep is how long a step of the runs a2-* takes, in any helper:
// long enough that a poll of the events log on a loaded machine finds one
// of the writer's in flight, with half of it left for the kill to land in
// (a step of a's own 150 ms left a 50 ms window, which polls missed).
const qlimitKillStep = 800 * time.Millisecond

func startQlimitHelper(t *testing.T, url, name, events string, step time.Duration) *qlimitProc {
	t.Helper()
	p := &qlimitProc{name: name, exited: make(chan struct{}), stderr: &testenv.Buffer{}}
	p.stdout = &testenv.Buffer{OnLine: func(line string) {
		if role, ok := strings.CutPrefix(line, "ready "); ok {
			p.mu.Lock()
			p.ready = role
			p.mu.Unlock()
		}
	}}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), qlimitHelperEnv+"="+url, qlimitNameEnv+"="+name,
		qlimitEventsEnv+"="+events, qlimitStepEnv+"="+step.String())
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	testenv.Eventually(t, writerReadyTimeout, "helper "+name+" ready", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("helper %s exited: %v\n%s", name, p.err, p.stderr.String())
		default:
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ready != ""
	})
	return p
}

// role is the role the helper reported when ready.
func (p *qlimitProc) role() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

func (p *qlimitProc) submit(t *testing.T, prefix string, n int) {
	t.Helper()
	if _, err := fmt.Fprintf(p.stdin, "submit %s %d\n", prefix, n); err != nil {
		t.Fatalf("helper %s: %v", p.name, err)
	}
}

// stopAndWait ends the helper's stdin and waits for a clean exit.
func (p *qlimitProc) stopAndWait(t *testing.T) {
	t.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("helper %s: %v\n%s", p.name, p.err, p.stderr.String())
		}
	case <-time.After(qlimitDeadline):
		t.Errorf("helper %s did not exit\n%s", p.name, p.stderr.String())
	}
}

// qlimitExec is one step execution of the events log.
type qlimitExec struct {
	helper, run string
	step        int
	start, end  int64 // ns; end 0: never ended
}

type qlimitLog struct {
	execs     []*qlimitExec
	submitted []string
}

func readQlimitLog(t *testing.T, path string) *qlimitLog {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	l := &qlimitLog{}
	open := map[string]*qlimitExec{} // helper/run/step -> its latest start without an end
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "submitted":
			l.submitted = append(l.submitted, f[2])
		case len(f) == 5 && (f[0] == "start" || f[0] == "end"):
			step, _ := strconv.Atoi(f[3])
			ns, _ := strconv.ParseInt(f[4], 10, 64)
			key := f[1] + "/" + f[2] + "/" + f[3]
			if f[0] == "start" {
				e := &qlimitExec{helper: f[1], run: f[2], step: step, start: ns}
				l.execs = append(l.execs, e)
				open[key] = e
			} else if e := open[key]; e != nil {
				e.end = ns
				delete(open, key)
			}
		}
	}
	return l
}

// peak returns the most executions that overlapped, an execution that
// never ended counting until endOf(helper) (its process's death).
func (l *qlimitLog) peak(endOf func(helper string) int64) (int, int64) {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, e := range l.execs {
		end := e.end
		if end == 0 {
			end = endOf(e.helper)
		}
		edges = append(edges, edge{e.start, 1}, edge{end, -1})
	}
	// Ends first on a tie: a step's claim is granted only after the
	// settlement that freed its place committed, after that step's end.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(min(max(a.at-b.at, -1), 1))
		}
		return a.delta - b.delta
	})
	cur, peak, at := 0, 0, int64(0)
	for _, e := range edges {
		cur += e.delta
		if cur > peak {
			peak, at = cur, e.at
		}
	}
	return peak, at
}

// TestQueueLimitCluster: MaxRunning 3 on "llm", served by two member
// processes with 4 slots each (8 could run): never more than 3 steps run
// at once across processes, and every run completes. Then the writer
// process is SIGKILLed while one of its steps runs (its claim stays in
// the store until it expires) and a new member joins: the next writer
// (whichever process takes over) still admits no more than 3, and every
// acknowledged run completes. Fails without the limit, or with a writer
// that forgets it or the claims it adopted at the takeover.
func TestQueueLimitCluster(t *testing.T) {
	dir := t.TempDir()
	url := "file://" + filepath.Join(dir, "store")
	events := filepath.Join(dir, "events")
	// The writer: a helper, so that it can be SIGKILLed.
	a := startQlimitHelper(t, url, "a", events, 150*time.Millisecond)
	if a.role() != queue.RoleWriter.String() {
		t.Fatalf("helper a opened the store as %s, want the writer", a.ready)
	}
	b := startQlimitHelper(t, url, "b", events, 50*time.Millisecond)
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, qlimitDeadline)
	q, err := queue.Open(octx, url, qlimitQueueOpts()...)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(context.Background()) })
	if q.Role() != queue.RoleMember || b.role() != queue.RoleMember.String() {
		t.Fatalf("roles: parent %v, b %s", q.Role(), b.role())
	}
	rt := newRuntime(t, q, nil, nil)
	limit := runtime.QueueLimit{MaxRunning: 3}
	if err := rt.SetQueueLimit(ctx, qlimitQueue, limit); err != nil {
		t.Fatal(err)
	}

	// waitSubmitted waits until n runs whose IDs start with one of
	// prefixes were acknowledged, and returns the log.
	waitSubmitted := func(n int, prefixes ...string) *qlimitLog {
		t.Helper()
		var l *qlimitLog
		testenv.Eventually(t, qlimitDeadline, fmt.Sprintf("%d runs of %v submitted", n, prefixes), func() bool {
			l = readQlimitLog(t, events)
			got := 0
			for _, id := range l.submitted {
				for _, p := range prefixes {
					if strings.HasPrefix(id, p+"-") {
						got++
					}
				}
			}
			return got >= n
		})
		return l
	}
	// waitRuns waits for every acknowledged run to succeed, and returns
	// the log then.
	waitRuns := func(l *qlimitLog) *qlimitLog {
		t.Helper()
		for _, id := range l.submitted {
			wctx, cancel := context.WithTimeout(ctx, qlimitDeadline)
			st, err := rt.Wait(wctx, id)
			cancel()
			if err != nil || st.State != runtime.StateSucceeded {
				t.Fatalf("run %s: %v, %v", id, st.State, err)
			}
		}
		return readQlimitLog(t, events)
	}

	// Phase 1: two members (the writer is a helper too), 20 runs.
	a.submit(t, "a1", 10)
	b.submit(t, "b1", 10)
	l := waitRuns(waitSubmitted(20, "a1", "b1"))
	never := func(string) int64 { t.Fatal("a step never ended before any kill"); return 0 }
	p1, at := l.peak(never)
	t.Logf("phase 1: %d step executions, at most %d at once (at %v)", len(l.execs), p1, time.Unix(0, at).Format(time.StampMicro))
	if p1 > limit.MaxRunning {
		t.Fatalf("%d steps ran at once across processes under MaxRunning %d", p1, limit.MaxRunning)
	}

	// Phase 2: kill the writer while one of its steps runs.
	a.submit(t, "a2", 10)
	b.submit(t, "b2", 10)
	testenv.Eventually(t, qlimitDeadline, "a step of the writer in flight", func() bool {
		for _, e := range readQlimitLog(t, events).execs {
			if e.helper == "a" && e.end == 0 && time.Since(time.Unix(0, e.start)) < qlimitKillStep/2 {
				return true
			}
		}
		return false
	})
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	killedAt := time.Now().UnixNano()
	var ee *exec.ExitError
	if !errors.As(a.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper a did not die by SIGKILL: %v", a.err)
	}
	interrupted := 0
	for _, e := range readQlimitLog(t, events).execs {
		if e.helper == "a" && e.end == 0 {
			interrupted++
		}
	}
	if interrupted == 0 {
		t.Fatal("the kill interrupted no step of the writer")
	}
	c := startQlimitHelper(t, url, "c", events, 50*time.Millisecond)
	c.submit(t, "c2", 10)
	// a's acknowledged submits, and all of b's and c's.
	l = waitRuns(waitSubmitted(20, "b2", "c2"))
	p2, at := l.peak(func(h string) int64 { return killedAt })
	t.Logf("with a writer SIGKILL (%d of its steps interrupted): %d step executions, at most %d at once (at %v)",
		interrupted, len(l.execs), p2, time.Unix(0, at).Format(time.StampMicro))
	if p2 > limit.MaxRunning {
		t.Fatalf("%d steps ran at once across processes under MaxRunning %d (writer killed)", p2, limit.MaxRunning)
	}
	if m, err := rt.QueueLimits(ctx); err != nil || m[qlimitQueue] != limit {
		t.Fatalf("QueueLimits after the failover = %v, %v", m, err)
	}
	b.stopAndWait(t)
	c.stopAndWait(t)
}
