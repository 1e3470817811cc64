package runtime_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/stepwell/stepwell/internal/testenv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// The crash test runs a child process (this test binary, re-executed) that
// runs a Runtime on a file:// store with crashRuns runs of crashSteps steps,
// SIGKILLs it at random moments over several rounds, restarting it each
// time, then lets a last child run everything to completion. Each step
// proves the chain: step n checks that its payload is exactly the bytes
// 0..n-1 and appends n, so a skipped, repeated-after-commit or reordered
// step fails its run. The parent then checks from the store that every run
// Succeeded with result 0..K-1 and that the hook heard about every run.

const (
	crashChildEnv  = "STEPWELL_RUNTIME_CRASH_CHILD" // store dir
	crashModeEnv   = "STEPWELL_RUNTIME_CRASH_MODE"  // "kill" or "finish"
	crashRoundsEnv = "STEPWELL_RUNTIME_CRASH_ROUNDS"
	crashRuns      = 32
	crashSteps     = 12
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(crashChildEnv) != "":
		os.Exit(crashChild(os.Getenv(crashChildEnv), os.Getenv(crashModeEnv)))
	case os.Getenv(tinyRetentionChildEnv) != "":
		os.Exit(tinyRetentionChild())
	}
	testenv.Main(m)
}

// crashOpenedLine is what a child writes to stderr once it opened the store.
const crashOpenedLine = "child: store opened"

// lockedBuffer collects a child's stderr and calls onLine for every
// complete line.
type lockedBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	part   []byte
	onLine func(string)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	b.part = append(b.part, p...)
	for {
		i := bytes.IndexByte(b.part, '\n')
		if i < 0 {
			break
		}
		if b.onLine != nil {
			b.onLine(string(b.part[:i]))
		}
		b.part = b.part[i+1:]
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func crashRunID(i int) string { return fmt.Sprintf("crash-%02d", i) }

// crashQueueOpts make the child snapshot often, so kills land in those
// paths too.
func crashQueueOpts() []queue.Option {
	return append(fastQueueOpts(), queue.WithSnapshotThreshold(32<<10, 8))
}

// chainPayload is the payload step n expects: the bytes 0..n-1.
func chainPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

// crashChild runs the workload. In "kill" mode it runs until killed; in
// "finish" mode it exits 0 once every run has ended and every notification
// was delivered. Exit codes above 1 name what went wrong.
func crashChild(dir, mode string) int {
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir, crashQueueOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 3
	}
	fmt.Fprintln(os.Stderr, crashOpenedLine)
	hooked, err := os.OpenFile(filepath.Join(dir, "..", "hooked"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child side file:", err)
		return 4
	}
	var hmu sync.Mutex
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		hmu.Lock()
		defer hmu.Unlock()
		_, err := fmt.Fprintf(hooked, "%s %s %x\n", o.RunID, o.Status, o.Result)
		return err
	})
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		n := int(s.Number)
		if want := chainPayload(n); !bytes.Equal(s.Payload, want) {
			return steprunner.Fail(fmt.Sprintf("chain broken at step %d: got %v, want %v", n, s.Payload, want)), nil
		}
		// Some work, so kills land inside steps as well as between them.
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		next := append(bytes.Clone(s.Payload), byte(n))
		if n == crashSteps-1 {
			return steprunner.Succeed(next), nil
		}
		return steprunner.Continue(next), nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond), runtime.WithMaxConcurrentSteps(6))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child New:", err)
		return 5
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(runCtx) }()
	// Every child submits every run: after the first, these are duplicates
	// (idempotency across crashes), never mismatches.
	for i := range crashRuns {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: crashRunID(i), Input: chainPayload(0),
			// Kills cost attempts (a claim counts one): keep the limit high
			// enough that no step runs out of attempts because of them.
			MaxAttemptsPerStep: 1000}); err != nil {
			fmt.Fprintln(os.Stderr, "child submit:", err)
			return 6
		}
	}
	if mode != "finish" {
		return <-make(chan int) // run until killed
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		done := 0
		for i := range crashRuns {
			st, err := rt.Status(ctx, crashRunID(i))
			if err != nil {
				fmt.Fprintln(os.Stderr, "child status:", err)
				return 7
			}
			if st.State.Terminal() {
				done++
			}
		}
		s, err := q.Stats(ctx, "workflow-notify")
		if err != nil {
			fmt.Fprintln(os.Stderr, "child stats:", err)
			return 7
		}
		if done == crashRuns && s.Pending+s.Scheduled+s.Claimed == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "child: %d of %d runs ended, notifications %+v after 40s\n", done, crashRuns, s)
			return 8
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-runErr; err != nil {
		fmt.Fprintln(os.Stderr, "child Run:", err)
		return 9
	}
	if err := q.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child close:", err)
		return 10
	}
	return 0
}

func TestCrashResumesRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel()
	rounds := 10
	if s := os.Getenv(crashRoundsEnv); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	seed := time.Now().UnixNano()
	t.Logf("crash test: %d rounds, seed %d (%d runs of %d steps)", rounds, seed, crashRuns, crashSteps)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// child starts a child; opened is closed once it has opened the store.
	child := func(mode string) (cmd *exec.Cmd, stderr *lockedBuffer, opened chan struct{}) {
		cmd = exec.Command(os.Args[0], "-test.run=^TestCrashResumesRuns$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashModeEnv+"="+mode)
		stderr = &lockedBuffer{}
		opened = make(chan struct{})
		stderr.onLine = func(line string) {
			if line == crashOpenedLine {
				close(opened)
			}
		}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, stderr, opened
	}
	start := time.Now()
	var progress [][2]int
	for round := range rounds {
		cmd, stderr, opened := child("kill")
		// Mostly kill while the child works; sometimes while it opens.
		if rng.IntN(5) > 0 {
			select {
			case <-opened:
			case <-time.After(waitTimeout):
				t.Fatalf("round %d: child did not open the store\n%s", round, stderr.String())
			}
		}
		time.Sleep(time.Duration(5+rng.IntN(250)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL: %v\n%s", round, err, stderr.String())
		}
		progress = append(progress, crashProgress(t, dir))
	}
	killed := time.Since(start)
	t.Logf("progress after each kill (steps settled, runs ended): %v", progress)
	if last := progress[len(progress)-1]; last == [2]int{} {
		t.Errorf("the killed children made no progress at all: the kills tested nothing")
	}

	cmd, stderr, _ := child("finish")
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
	t.Logf("%d kill rounds in %v, final run in %v", rounds, killed.Round(time.Millisecond), (time.Since(start) - killed).Round(time.Millisecond))

	// Check the store as a new process would.
	ctx := context.Background()
	q := openQueue(t, "file://"+dir)
	rt := newRuntime(t, q, succeedRunner(nil), terminal.Noop)
	want := chainPayload(crashSteps)
	for i := range crashRuns {
		st, err := rt.Status(ctx, crashRunID(i))
		if err != nil {
			t.Errorf("run %s: %v", crashRunID(i), err)
			continue
		}
		if st.State != runtime.StateSucceeded || !bytes.Equal(st.Result, want) || st.CurrentStep != crashSteps-1 {
			t.Errorf("run %s: %v at step %d, result %v, error %q; want succeeded at step %d with %v",
				crashRunID(i), st.State, st.CurrentStep, st.Result, st.Error, crashSteps-1, want)
		}
	}
	for _, name := range []string{stepsQueue, notifyQueue} {
		if s := mustStats(t, q, name); s.Pending+s.Scheduled+s.Claimed+s.Dead != 0 {
			t.Errorf("queue %s not empty: %+v", name, s)
		}
	}
	// The hook heard about every run (at least once), always as succeeded
	// with the full chain.
	f, err := os.Open(filepath.Join(base, "hooked"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	heard := map[string]int{}
	sc := bufio.NewScanner(f)
	wantLine := fmt.Sprintf("succeeded %x", want)
	for sc.Scan() {
		var id, rest1, rest2 string
		if n, _ := fmt.Sscanf(sc.Text(), "%s %s %s", &id, &rest1, &rest2); n != 3 || rest1+" "+rest2 != wantLine {
			t.Errorf("hook line %q, want %q after the run ID", sc.Text(), wantLine)
			continue
		}
		heard[id]++
	}
	dups := 0
	for i := range crashRuns {
		switch n := heard[crashRunID(i)]; {
		case n == 0:
			t.Errorf("the hook never heard about run %s", crashRunID(i))
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("hook: %d runs heard, %d repeated deliveries (at least once is the contract)", len(heard), dups)
}

// crashProgress reads the store as a read-only reader and returns how many
// steps have settled (sum of current steps, plus one per ended run) and how
// many runs have ended.
func crashProgress(t *testing.T, dir string) [2]int {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, "file://"+dir, queue.WithReadOnly())
	if errors.Is(err, os.ErrNotExist) {
		return [2]int{}
	}
	if err != nil {
		t.Logf("read-only open: %v", err)
		return [2]int{}
	}
	defer q.Close(ctx)
	rt, err := runtime.New(q, succeedRunner(nil), terminal.Noop)
	if err != nil {
		t.Fatal(err)
	}
	var steps, ended int
	for i := range crashRuns {
		st, err := rt.Status(ctx, crashRunID(i))
		if err != nil {
			continue // not submitted yet
		}
		steps += int(st.CurrentStep)
		if st.State.Terminal() {
			steps++
			ended++
		}
	}
	return [2]int{steps, ended}
}
