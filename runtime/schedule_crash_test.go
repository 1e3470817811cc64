package runtime_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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

// The schedule tests with real processes (this test binary, re-executed
// as a schedule child): a schedule ticking every second survives a
// SIGKILL of its process (TestScheduleCrash), and ticks once per tick
// with two processes of a cluster firing its ticks (TestScheduleCluster).
//
// Every child and the test itself append to one events file, one write(2)
// per line (O_APPEND):
//
//	<child> start <run> <attempt>   a tick's run's step began
//	<child> end <run> <attempt>     it returned (and succeeds its run)

const (
	scheduleChildEnv   = "STEPWELL_SCHEDULE_CHILD"   // the store URL
	scheduleEventsEnv  = "STEPWELL_SCHEDULE_EVENTS"  // the events file
	scheduleNameEnv    = "STEPWELL_SCHEDULE_NAME"    // the child's name
	scheduleSetEnv     = "STEPWELL_SCHEDULE_SET"     // "1": set the schedule first
	scheduleClusterEnv = "STEPWELL_SCHEDULE_CLUSTER" // "1": open the store in cluster mode
	scheduleStepEnv    = "STEPWELL_SCHEDULE_STEP"    // how long a step runs (a duration)
	scheduleReady      = "schedule-child: ready"
	// scheduleLease is the queue lease in the crash test: the killed
	// child's claims (its steps, a tick it was settling) are claimable
	// again once it has passed.
	scheduleLease = time.Second
	// scheduleDeadline bounds the waits for what must happen, generous
	// for a loaded machine.
	scheduleDeadline = 2 * time.Minute
)

// crashSchedule is the schedule of the process tests: every second, runs
// may overlap (so every tick has a run, and a step is running most of the
// time in the crash test).
var crashSchedule = runtime.Schedule{Name: "crash", Every: time.Second, AllowOverlap: true,
	Spec: runtime.RunSpec{Input: []byte("tick"), MaxAttemptsPerStep: 100}}

// scheduleRunner is the runner of the schedule tests: each step records
// its start and end in the events file, and runs for about step.
func scheduleRunner(name string, step time.Duration, record func(format string, args ...any)) steprunner.Runner {
	return steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		record("%s start %s %d", name, s.RunID, s.Attempt)
		d := step
		if d > 0 {
			d += time.Duration(rand.Int64N(int64(step) / 4))
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return steprunner.Outcome{}, context.Cause(ctx)
		}
		record("%s end %s %d", name, s.RunID, s.Attempt)
		return steprunner.Succeed(nil), nil
	})
}

// eventRecorder appends lines to the events file at path.
func eventRecorder(path string) (func(format string, args ...any), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return func(format string, args ...any) {
		if _, err := f.WriteString(fmt.Sprintf(format, args...) + "\n"); err != nil {
			panic(err)
		}
	}, nil
}

// scheduleChild is a schedule child: it opens the store (as a cluster
// member with scheduleClusterEnv), sets crashSchedule with scheduleSetEnv,
// runs a Runtime with scheduleRunner, says scheduleReady on stdout and
// runs until killed or until its stdin ends (then it stops and closes).
func scheduleChild(url string) int {
	name := os.Getenv(scheduleNameEnv)
	record, err := eventRecorder(os.Getenv(scheduleEventsEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedule-child:", err)
		return 2
	}
	step, _ := time.ParseDuration(os.Getenv(scheduleStepEnv))
	opts := append(fastQueueOpts(), queue.WithLease(scheduleLease))
	if os.Getenv(scheduleClusterEnv) == "1" {
		opts = append(opts, clusterOpt())
	}
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, scheduleDeadline)
	q, err := queue.Open(octx, url, opts...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedule-child: open:", err)
		return 3
	}
	rt, err := runtime.New(q, scheduleRunner(name, step, record), nil, runtime.WithPollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedule-child: New:", err)
		return 4
	}
	if os.Getenv(scheduleSetEnv) == "1" {
		if err := rt.SetSchedule(ctx, crashSchedule); err != nil {
			fmt.Fprintln(os.Stderr, "schedule-child: SetSchedule:", err)
			return 5
		}
	}
	return serveUntilStdinEnds(q, rt, "schedule-child", func() { fmt.Println(scheduleReady) }, scheduleDeadline, 6)
}

// scheduleProc is a running schedule child.
type scheduleProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *testenv.Buffer
	exited chan error
}

// startScheduleChild starts a schedule child on url and waits until it is
// ready; it is killed at the end of the test if still running.
func startScheduleChild(t *testing.T, url, events, name string, env ...string) *scheduleProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), scheduleChildEnv+"="+url, scheduleEventsEnv+"="+events, scheduleNameEnv+"="+name), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &scheduleProc{cmd: cmd, stdin: stdin, stderr: &testenv.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := awaitLine(stdout, scheduleReady, func() { p.exited <- cmd.Wait() })
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = stdin.Close()
	})
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("schedule child %s exited before it was ready\n%s", name, p.stderr.String())
		}
	case <-time.After(writerReadyTimeout):
		t.Fatalf("schedule child %s not ready\n%s", name, p.stderr.String())
	}
	return p
}

// close ends the child's stdin and waits for its clean exit.
func (p *scheduleProc) close(t *testing.T) {
	t.Helper()
	_ = p.stdin.Close()
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("schedule child: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(scheduleDeadline):
		t.Fatalf("schedule child did not exit\n%s", p.stderr.String())
	}
}

// scheduleEvents is what the events file says: the steps each child
// started and ended, by run ("<child> <attempt>" each).
type scheduleEvents struct {
	starts, ends map[string][]string
}

func readScheduleEvents(t testing.TB, path string) scheduleEvents {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	ev := scheduleEvents{starts: map[string][]string{}, ends: map[string][]string{}}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue // the end of the file, or a line being written
		}
		switch f[1] {
		case "start":
			ev.starts[f[2]] = append(ev.starts[f[2]], f[0]+" "+f[3])
		case "end":
			ev.ends[f[2]] = append(ev.ends[f[2]], f[0]+" "+f[3])
		}
	}
	return ev
}

// inFlight returns the runs whose step child started and did not end
// (an attempt without its end).
func (ev scheduleEvents) inFlight(child string) []string {
	var out []string
	for run, starts := range ev.starts {
		for _, s := range starts {
			if strings.HasPrefix(s, child+" ") && !containsString(ev.ends[run], s) {
				out = append(out, run)
			}
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// endedBy counts the runs with a step that child ended, and those of them
// whose tick is at or after from.
func (ev scheduleEvents) endedBy(t testing.TB, child string, from time.Time) (all, since int) {
	for run, ends := range ev.ends {
		for _, e := range ends {
			if strings.HasPrefix(e, child+" ") {
				all++
				if !tickOf(t, run).Before(from) {
					since++
				}
				break
			}
		}
	}
	return all, since
}

// checkTickGaps checks that a schedule ticking every period lost no tick
// beyond the catch-up: between two consecutive runs' ticks a and b, the
// ticks in between may be missing only if the next tick after a fired
// late, once they had passed: then b's run was submitted at or after
// a+2*period. It returns the number of such gaps.
func checkTickGaps(t testing.TB, runs []runtime.RunStatus, period time.Duration) int {
	t.Helper()
	ticks := checkTickRuns(t, runs, period)
	gaps := 0
	for i := 1; i < len(ticks); i++ {
		a, b := ticks[i-1], ticks[i]
		switch {
		case b.Sub(a) == period:
		case runs[i].SubmittedAt.Before(a.Add(2 * period)):
			t.Errorf("ticks between %s and %s are lost: the run after them was submitted at %v, on time",
				runs[i-1].RunID, runs[i].RunID, runs[i].SubmittedAt.UTC().Format(time.RFC3339Nano))
		default:
			gaps++
			t.Logf("caught up: %s, then %s (submitted at %v)", runs[i-1].RunID, runs[i].RunID,
				runs[i].SubmittedAt.UTC().Format(time.RFC3339Nano))
		}
	}
	return gaps
}

// A schedule every second; its process is SIGKILLed while a tick's run's
// step runs, stays down for 2.5s, and a new process opens the store
// (without setting the schedule again). Checked from the store and the
// events: every run is its tick's (the ID is the tick, a multiple of 1s,
// submitted within that second); no tick is doubled (one run per tick,
// and the run whose step the kill cut ran again and ended once); ticks
// are lost only at a catch-up (the downtime's, where one run stands for
// the latest tick that passed); the new process goes on ticking.
func TestScheduleCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "file://" + filepath.Join(dir, "store")
	events := filepath.Join(dir, "events")
	first := startScheduleChild(t, url, events, "c1", scheduleSetEnv+"=1", scheduleStepEnv+"=600ms")
	var killed []string
	testenv.Eventually(t, scheduleDeadline, "2 runs to end in the first process, then a step to run", func() bool {
		ev := readScheduleEvents(t, events)
		if n, _ := ev.endedBy(t, "c1", time.Time{}); n < 2 {
			return false
		}
		if len(ev.inFlight("c1")) == 0 {
			return false
		}
		_ = first.cmd.Process.Signal(syscall.SIGKILL)
		<-first.exited
		killed = readScheduleEvents(t, events).inFlight("c1")
		return true
	})
	killAt := time.Now()
	if len(killed) == 0 {
		t.Fatal("the kill interrupted no step")
	}
	t.Logf("the kill cut the steps of %v", killed)
	time.Sleep(2500 * time.Millisecond) // downtime: ticks pass with no process
	restartAt := time.Now()
	second := startScheduleChild(t, url, events, "c2", scheduleStepEnv+"=600ms")
	testenv.Eventually(t, scheduleDeadline, "3 ticks after the restart and the cut steps to end in the second process", func() bool {
		ev := readScheduleEvents(t, events)
		if _, n := ev.endedBy(t, "c2", restartAt); n < 3 {
			return false
		}
		for _, run := range killed {
			if !strings.Contains(strings.Join(ev.ends[run], ","), "c2 ") {
				return false
			}
		}
		return true
	})
	second.close(t)

	q := openQueue(t, url)
	rt := newRuntime(t, q, nil, nil)
	runs := scheduleRuns(t, rt, "crash")
	if gaps := checkTickGaps(t, runs, time.Second); gaps == 0 {
		t.Errorf("no catch-up across a downtime of 2.5s (killed at %v)", killAt.UTC().Format(time.RFC3339Nano))
	}
	ev := readScheduleEvents(t, events)
	for _, r := range runs {
		if len(ev.starts[r.RunID]) == 0 && r.State.Terminal() {
			t.Errorf("run %s ended without a step", r.RunID)
		}
	}
	for run, ends := range ev.ends {
		if !strings.HasPrefix(run, "crash@") {
			t.Errorf("a step of run %s", run)
		}
		if len(ends) > 1 && !containsString(killed, run) {
			// A step that ended and whose settlement the kill cut runs
			// again: at least once. Only then.
			t.Logf("run %s: its step ended %d times (%v)", run, len(ends), ends)
		}
	}
	st := mustSchedule(t, rt, "crash")
	if last := runs[len(runs)-1]; st.LastRunID != last.RunID || !st.NextAt.After(st.LastAt) || st.Skipped != 0 {
		t.Errorf("ListSchedules = %+v, want the last run %s", st, last.RunID)
	}
	t.Logf("%d runs from %s to %s; killed at %v, restarted at %v", len(runs), runs[0].RunID, runs[len(runs)-1].RunID,
		killAt.UTC().Format("15:04:05.000"), restartAt.UTC().Format("15:04:05.000"))
}

// Two processes of a cluster (members of a writer process) run the step
// queue of a schedule every second: its ticks are fired by whichever
// claims them, and still each tick submits one run. Then the writer
// process is SIGKILLed: a member takes over and the ticks go on, one run
// per tick, ticks lost only where a late tick caught up.
func TestScheduleCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "file://" + filepath.Join(dir, "store")
	events := filepath.Join(dir, "events")
	startMemberWriter(t, url)
	other := startScheduleChild(t, url, events, "m2", scheduleClusterEnv+"=1", scheduleStepEnv+"=20ms")

	ctx := context.Background()
	q, err := queue.Open(ctx, url, append(fastQueueOpts(), clusterOpt())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(ctx) })
	if r := q.Role(); r != queue.RoleMember {
		t.Fatalf("opened as %v, want a member", r)
	}
	record, err := eventRecorder(events)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	rt := newRuntime(t, q, scheduleRunner("m1", 20*time.Millisecond, func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		record(format, args...)
	}), nil)
	startRun(t, rt)
	if err := rt.SetSchedule(ctx, crashSchedule); err != nil {
		t.Fatal(err)
	}
	succeeded := func(from time.Time) int {
		n := 0
		for _, r := range scheduleRuns(t, rt, "crash") {
			if r.State == runtime.StateSucceeded && !tickOf(t, r.RunID).Before(from) {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, scheduleDeadline, "4 ticks to run", func() bool { return succeeded(time.Time{}) >= 4 })
	// The writer process dies: a member takes over, and the ticks go on.
	killMemberWriter(t, url)
	killAt := time.Now()
	testenv.Eventually(t, scheduleDeadline, "4 ticks to run after the writer's death", func() bool {
		return succeeded(killAt) >= 4
	})
	if err := rt.DeleteSchedule(ctx, "crash"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, scheduleDeadline, "every run to end", func() bool {
		for _, r := range scheduleRuns(t, rt, "crash") {
			if !r.State.Terminal() {
				return false
			}
		}
		return true
	})
	other.close(t)
	runs := scheduleRuns(t, rt, "crash")
	checkTickGaps(t, runs, time.Second)
	ev := readScheduleEvents(t, events)
	by := map[string]int{}
	for _, r := range runs {
		if r.State != runtime.StateSucceeded {
			t.Errorf("run %s: %v", r.RunID, r.State)
		}
		switch ends := ev.ends[r.RunID]; {
		case len(ends) == 0:
			t.Errorf("run %s: its step never ended (started %v)", r.RunID, ev.starts[r.RunID])
		case len(ends) > 1:
			// At least once: a settlement cut by the failover.
			t.Logf("run %s: its step ended %d times: %v", r.RunID, len(ends), ends)
			fallthrough
		default:
			by[strings.Fields(ends[0])[0]]++
		}
	}
	if len(ev.ends) != len(runs) {
		t.Errorf("%d runs ran steps, %d runs in the store", len(ev.ends), len(runs))
	}
	t.Logf("%d runs, %s to %s; their steps ran in %v", len(runs), runs[0].RunID, runs[len(runs)-1].RunID, by)
}
