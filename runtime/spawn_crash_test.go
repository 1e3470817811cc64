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
// that spawns spawnCrashChildren child runs of two steps each, some of
// whose steps are long (announced on stderr); the test SIGKILLs it while
// one runs, checks from the steps log that the kill interrupted child
// steps in flight, then lets a second process finish. Every child must
// end once (Succeeded, one terminal record, Retries 0) and the parent's
// step after the join run once, with every result.

const (
	spawnCrashEnv      = "STEPWELL_RUNTIME_SPAWN_CRASH" // store dir
	spawnCrashModeEnv  = "STEPWELL_RUNTIME_SPAWN_CRASH_MODE"
	spawnCrashChildren = 60
)

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
				if c.RunID == fmt.Sprintf("sp.s0.%d", i) && c.Status == terminal.Succeeded && string(c.Result) == strconv.Itoa(i)+"+1" {
					ok++
				}
			}
			logf("joins", "%s %d %d\n", mode, len(s.Children), ok)
			return steprunner.Succeed(nil), nil
		}
		logf("steps", "%s start %s %d\n", mode, s.RunID, s.Number)
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		if mode == "kill" && rand.IntN(8) == 0 {
			fmt.Fprintf(os.Stderr, "%s%s %d\n", crashLongLine, s.RunID, s.Number)
			select {
			case <-time.After(crashLongStep):
			case <-ctx.Done():
				return steprunner.Outcome{}, context.Cause(ctx)
			}
		}
		logf("steps", "%s end %s %d\n", mode, s.RunID, s.Number)
		if s.Number == 0 {
			return steprunner.Continue(append(s.Payload, "+1"...)), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	rt, err := runtime.New(q, runner, nil, runtime.WithPollInterval(10*time.Millisecond), runtime.WithMaxConcurrentSteps(6))
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
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := rt.Status(ctx, "sp")
		if err != nil {
			return 7
		}
		if st.State.Terminal() {
			break
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

func TestSpawnCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(mode string) (*exec.Cmd, *testenv.Buffer, chan string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSpawnCrash$")
		cmd.Env = append(os.Environ(), spawnCrashEnv+"="+dir, spawnCrashModeEnv+"="+mode)
		stderr, long := &testenv.Buffer{}, make(chan string, 64)
		stderr.OnLine = func(line string) {
			if step, ok := strings.CutPrefix(line, crashLongLine); ok {
				select {
				case long <- step:
				default:
				}
			}
		}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, stderr, long
	}
	cmd, stderr, long := start("kill")
	var longStep string
	select {
	case longStep = <-long:
	case <-time.After(waitTimeout + crashLongStep):
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		t.Fatalf("no long step started\n%s", stderr.String())
	}
	time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, stderr.String())
	}
	// The kill interrupted child steps in flight, the long one among them.
	open := map[string]int{}
	for _, l := range readLines(t, filepath.Join(base, "steps")) {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "kill" {
			open[f[2]+" "+f[3]] += map[string]int{"start": 1, "end": -1}[f[1]]
		}
	}
	if open[longStep] != 1 {
		t.Fatalf("the kill did not interrupt the long step %s: %v", longStep, open)
	}
	if lines := readLines(t, filepath.Join(base, "joins")); len(lines) != 0 {
		t.Fatalf("the parent joined before the kill: %v", lines)
	}

	cmd, stderr, _ = start("finish")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("final child: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("final child did not finish in 60s\n%s", stderr.String())
	}
	if lines := readLines(t, filepath.Join(base, "joins")); len(lines) != 1 || lines[0] != fmt.Sprintf("finish %d %d", spawnCrashChildren, spawnCrashChildren) {
		t.Fatalf("joins %q, want one with every child succeeded in order", lines)
	}
	q := openQueue(t, "file://"+dir)
	rt := newRuntime(t, q, nil, nil)
	ctx := context.Background()
	for i := range spawnCrashChildren {
		id := fmt.Sprintf("sp.s0.%d", i)
		st, err := rt.Status(ctx, id)
		if err != nil || st.State != runtime.StateSucceeded || st.Parent != "sp" || st.Retries != 0 || string(st.Result) != strconv.Itoa(i)+"+1" {
			t.Fatalf("child %s: %+v, %v", id, st, err)
		}
	}
	if st, err := rt.Status(ctx, "sp"); err != nil || st.State != runtime.StateSucceeded || len(st.Children) != spawnCrashChildren {
		t.Fatalf("parent: %+v, %v", st, err)
	}
	t.Logf("the kill interrupted %s; %d child step lines", longStep, len(readLines(t, filepath.Join(base, "steps"))))
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
	if s := strings.TrimSpace(string(b)); s != "" {
		return strings.Split(s, "\n")
	}
	return nil
}
