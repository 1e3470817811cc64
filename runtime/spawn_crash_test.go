package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// The Spawn crash test: a child process (this test binary) runs a parent
// that spawns spawnCrashChildren child runs of two short steps each. In
// the killed process some children's last steps (the step whose
// settlement ends the child) are long (announced on stderr, at most
// spawnCrashLongSlots at a time, so that children keep ending); the test
// SIGKILLs it once spawnCrashEndedAtKill children ended there and while a
// long step runs, checks from the steps log that the kill interrupted
// child steps in flight (the long one among them) and that the parent had
// not joined, then lets a second process finish. Every child must end
// once: Succeeded, Retries 0, the settled attempt of its last step run
// once, and every call of the terminal hook for it (at least once: a
// repeat only across the kill) the same termination (one EndedAt). The
// parent's step after the join must run once, with every result in order.

const (
	spawnCrashEnv      = "STEPWELL_RUNTIME_SPAWN_CRASH" // store dir
	spawnCrashModeEnv  = "STEPWELL_RUNTIME_SPAWN_CRASH_MODE"
	spawnCrashChildren = 1000
	// spawnCrashEndedAtKill children at least end in the killed process
	// before the kill: it lands in the middle of the fan-out.
	spawnCrashEndedAtKill = 100
	// spawnCrashLongSlots bounds the long steps running at a time in the
	// killed process (of its WithMaxConcurrentSteps(6)).
	spawnCrashLongSlots = 3
)

// spawnChildID is the run ID of the Spawn's child i (the derived one).
func spawnChildID(i int) string { return fmt.Sprintf("sp.s0.%d", i) }

// spawnHookLine is what the helpers record of a terminal hook call:
// status, result, Retries, EndedAt (ns) and the time of the call (ns).
func spawnHookLine(o terminal.Outcome) string {
	result := string(o.Result)
	if result == "" {
		result = "-"
	}
	return fmt.Sprintf("%s %s/%d/%d/%d", o.Status, result, o.Retries, o.EndedAt.UnixNano(), time.Now().UnixNano())
}

// spawnHookCheck checks the hook calls of run (spawnHookLine, after the
// run ID) against its final status: at least one, and every one the same
// termination (status, result, Retries 0, one EndedAt). It returns the
// calls' times.
func spawnHookCheck(run string, calls []string, st runtime.RunStatus) ([]time.Time, error) {
	if len(calls) == 0 {
		return nil, fmt.Errorf("run %s (%v): the hook never fired", run, st.State)
	}
	var ended string
	var at []time.Time
	for _, c := range calls {
		status, rest, _ := strings.Cut(c, " ")
		f := strings.Split(rest, "/")
		want := string(st.Result)
		if want == "" {
			want = "-"
		}
		if len(f) != 4 || status != st.State.String() || f[0] != want || f[1] != "0" {
			return nil, fmt.Errorf("run %s: the hook heard %q, the run is %v %q (Retries 0)", run, c, st.State, st.Result)
		}
		if ended != "" && f[2] != ended {
			return nil, fmt.Errorf("run %s: hook calls of two terminations (EndedAt %s and %s): %q", run, ended, f[2], calls)
		}
		ended = f[2]
		ns, _ := strconv.ParseInt(f[3], 10, 64)
		at = append(at, time.Unix(0, ns))
	}
	return at, nil
}

func spawnCrashChild(dir, mode string) int {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir, crashQueueOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 3
	}
	var mu sync.Mutex
	logf := func(name, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(filepath.Join(dir, "..", name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintf(f, format, args...)
			f.Close()
		}
	}
	var long atomic.Int32
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case s.RunID == "sp" && s.Number == 0:
			cs := make([]steprunner.Child, spawnCrashChildren)
			for i := range cs {
				cs[i] = steprunner.Child{Input: []byte(strconv.Itoa(i))}
			}
			return steprunner.Spawn(cs), nil
		case s.RunID == "sp":
			ok := 0
			for i, c := range s.Children {
				if c.RunID == spawnChildID(i) && c.Status == terminal.Succeeded && string(c.Result) == strconv.Itoa(i)+"+1" {
					ok++
				}
			}
			logf("joins", "%s %d %d\n", mode, len(s.Children), ok)
			return steprunner.Succeed(nil), nil
		}
		logf("steps", "%s start %s %d %d\n", mode, s.RunID, s.Number, s.Attempt)
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		if mode == "kill" && s.Number == 1 && rand.IntN(8) == 0 {
			if long.Add(1) <= spawnCrashLongSlots {
				fmt.Fprintf(os.Stderr, "%s%s %d\n", crashLongLine, s.RunID, s.Number)
				select {
				case <-time.After(crashLongStep):
				case <-ctx.Done():
					long.Add(-1)
					return steprunner.Outcome{}, context.Cause(ctx)
				}
			}
			long.Add(-1)
		}
		logf("steps", "%s end %s %d %d\n", mode, s.RunID, s.Number, s.Attempt)
		if s.Number == 0 {
			return steprunner.Continue(append(s.Payload, "+1"...)), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		logf("hooked", "%s %s %s\n", mode, o.RunID, spawnHookLine(o))
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond), runtime.WithMaxConcurrentSteps(6))
	if err != nil {
		return 5
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(runCtx) }()
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "sp", MaxAttemptsPerStep: 1000}); err != nil {
		fmt.Fprintln(os.Stderr, "child submit:", err)
		return 6
	}
	if mode == "kill" {
		return <-make(chan int) // run until killed
	}
	// Until the parent ended and every notification was delivered.
	for deadline := time.Now().Add(testenv.Scale(60 * time.Second)); ; time.Sleep(10 * time.Millisecond) {
		st, err := rt.Status(ctx, "sp")
		if err != nil {
			return 7
		}
		if st.State.Terminal() {
			if n, err := q.Stats(ctx, notifyQueue); err == nil && n.Pending+n.Scheduled+n.Claimed == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "child: parent %+v after 60s\n", st)
			return 8
		}
	}
	stop()
	if err := <-runErr; err != nil {
		return 9
	}
	if err := q.Close(ctx); err != nil {
		return 10
	}
	return 0
}

// spawnSteps is the steps log of TestSpawnCrash, parsed.
type spawnSteps struct {
	open     map[string]int // "<mode> <run> <step>" -> starts less ends
	ended    map[string]int // children whose last step ended, by mode
	attempts map[string]int // "<run> <step> <attempt>" -> starts
	starts   int
}

func readSpawnSteps(t *testing.T, path string) *spawnSteps {
	t.Helper()
	s := &spawnSteps{open: map[string]int{}, ended: map[string]int{}, attempts: map[string]int{}}
	for _, l := range readLines(t, path) {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("steps log line %q", l)
		}
		k := f[0] + " " + f[2] + " " + f[3]
		switch f[1] {
		case "start":
			s.open[k]++
			s.attempts[f[2]+" "+f[3]+" "+f[4]]++
			s.starts++
		case "end":
			s.open[k]--
			if f[3] == "1" {
				s.ended[f[0]]++
			}
		}
	}
	return s
}

func TestSpawnCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	began := time.Now()
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(mode string) (*exec.Cmd, *testenv.Buffer, *sync.Map) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSpawnCrash$")
		cmd.Env = append(os.Environ(), spawnCrashEnv+"="+dir, spawnCrashModeEnv+"="+mode)
		stderr, long := &testenv.Buffer{}, &sync.Map{} // long: step -> when announced
		stderr.OnLine = func(line string) {
			if step, ok := strings.CutPrefix(line, crashLongLine); ok {
				long.Store(step, time.Now())
			}
		}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, stderr, long
	}
	cmd, stderr, long := start("kill")
	// Kill once enough children ended, while a long step announced lately
	// (it runs crashLongStep) still runs.
	testenv.Eventually(t, waitTimeout, "children to end in the killed process while a long step runs", func() bool {
		ended := readSpawnSteps(t, filepath.Join(base, "steps")).ended["kill"]
		recent := false
		long.Range(func(_, at any) bool {
			recent = recent || time.Since(at.(time.Time)) < crashLongStep*3/4
			return !recent
		})
		return ended >= spawnCrashEndedAtKill && recent
	})
	time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, stderr.String())
	}
	// The kill interrupted child steps in flight, a long one among them.
	steps := readSpawnSteps(t, filepath.Join(base, "steps"))
	var cut, longCut []string
	for k, n := range steps.open {
		if run, ok := strings.CutPrefix(k, "kill "); ok && n > 0 {
			cut = append(cut, run)
			if _, ok := long.Load(run); ok {
				longCut = append(longCut, run)
			}
		}
	}
	if len(longCut) == 0 {
		t.Fatalf("the kill interrupted no long step: open %v", cut)
	}
	if lines := readLines(t, filepath.Join(base, "joins")); len(lines) != 0 {
		t.Fatalf("the parent joined before the kill: %v", lines)
	}
	endedAtKill := steps.ended["kill"]

	cmd, stderr, _ = start("finish")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("final child: %v\n%s", err, stderr.String())
		}
	case <-time.After(testenv.Scale(60 * time.Second)):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("final child did not finish in 60s\n%s", stderr.String())
	}
	if lines := readLines(t, filepath.Join(base, "joins")); len(lines) != 1 || lines[0] != fmt.Sprintf("finish %d %d", spawnCrashChildren, spawnCrashChildren) {
		t.Fatalf("joins %q, want one with every child succeeded in order", lines)
	}
	hooks := map[string]map[string][]string{} // run -> mode -> calls
	for _, l := range readLines(t, filepath.Join(base, "hooked")) {
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 {
			t.Fatalf("hook line %q", l)
		}
		if hooks[f[1]] == nil {
			hooks[f[1]] = map[string][]string{}
		}
		hooks[f[1]][f[0]] = append(hooks[f[1]][f[0]], f[2])
	}
	steps = readSpawnSteps(t, filepath.Join(base, "steps"))
	q := openQueue(t, "file://"+dir)
	rt := newRuntime(t, q, nil, nil)
	ctx := context.Background()
	redelivered := 0
	for i := range spawnCrashChildren + 1 {
		id, want := spawnChildID(i), strconv.Itoa(i)+"+1"
		if i == spawnCrashChildren {
			id, want = "sp", ""
		}
		st, err := rt.Status(ctx, id)
		if err != nil || st.State != runtime.StateSucceeded || st.Retries != 0 || string(st.Result) != want {
			t.Fatalf("run %s: %+v, %v", id, st, err)
		}
		if id != "sp" {
			if st.Parent != "sp" {
				t.Fatalf("child %s: parent %q", id, st.Parent)
			}
			// Its end committed once: the attempt whose settlement ended
			// it ran once (any later one would have been claimed after it).
			if n := steps.attempts[fmt.Sprintf("%s 1 %d", id, st.Attempt)]; n != 1 || steps.attempts[fmt.Sprintf("%s 1 %d", id, st.Attempt+1)] != 0 {
				t.Fatalf("child %s: ended by attempt %d of step 1, which started %d times (want once, and no later attempt)", id, st.Attempt, n)
			}
		}
		var all []string
		for mode, calls := range hooks[id] {
			if len(calls) > 1 {
				t.Fatalf("run %s: the hook ran %d times in the %s process: %q", id, len(calls), mode, calls)
			}
			all = append(all, calls...)
		}
		if _, err := spawnHookCheck(id, all, st); err != nil {
			t.Fatal(err)
		}
		redelivered += len(all) - 1 // once in each process: the kill lost the first call's ack
	}
	if st, err := rt.Status(ctx, "sp"); err != nil || len(st.Children) != spawnCrashChildren {
		t.Fatalf("parent: %+v, %v", st, err)
	}
	t.Logf("%d children: %d ended before the kill, which interrupted %d child steps (%d long); %d child step executions (%d for 2 per child), %d hook calls redelivered across the kill; %v",
		spawnCrashChildren, endedAtKill, len(cut), len(longCut), steps.starts, 2*spawnCrashChildren, redelivered, time.Since(began).Round(time.Millisecond))
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	// A last line without its newline is being written as we read (each
	// line is one write, which a reader may see in part): it is read
	// whole next time.
	s := string(b)
	if i := strings.LastIndexByte(s, '\n'); i < len(s)-1 {
		s = s[:i+1]
	}
	if s = strings.TrimSpace(s); s != "" {
		return strings.Split(s, "\n")
	}
	return nil
}
