package runtime_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/stepwell/stepwell/terminal"
)

// The crash test runs a child process (this test binary, re-executed) that
// runs a Runtime on a file:// store, and SIGKILLs it over several rounds,
// restarting it each time, then lets a last child run everything to
// completion. Every child submits crashRuns new runs of crashSteps steps
// (and again those of the rounds before it, which must be duplicates), so
// no child is ever idle. Some steps of a killed child are long (they run
// for seconds and announce themselves on stderr); the parent kills a child
// a random moment after it announced one, so every kill interrupts a step
// in flight, and the steps log (start and end of every step, per round)
// proves it after the kill. Each step proves the chain: step n checks that
// its payload is exactly the bytes 0..n-1 and appends n, so a skipped,
// repeated-after-commit or reordered step fails its run. The parent then
// checks from the store that every run Succeeded with result 0..K-1 and
// that the hook heard about every run, and reports how many steps ran
// again per kill.

const (
	crashChildEnv  = "STEPWELL_RUNTIME_CRASH_CHILD" // store dir
	crashModeEnv   = "STEPWELL_RUNTIME_CRASH_MODE"  // "kill" or "finish"
	crashRoundEnv  = "STEPWELL_RUNTIME_CRASH_ROUND" // the child's round: it submits rounds 0..round
	crashRoundsEnv = "STEPWELL_RUNTIME_CRASH_ROUNDS"
	crashRuns      = 16 // new runs per round
	crashSteps     = 12
	// crashLongLine starts the stderr line a killed child writes when a
	// long step starts; such a step runs for crashLongStep (or until the
	// kill).
	crashLongLine = "child: long step "
	crashLongStep = 10 * time.Second
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(crashChildEnv) != "":
		os.Exit(crashChild(os.Getenv(crashChildEnv), os.Getenv(crashModeEnv)))
	case os.Getenv(spawnCrashEnv) != "":
		os.Exit(spawnCrashChild(os.Getenv(spawnCrashEnv), os.Getenv(spawnCrashModeEnv)))
	case os.Getenv(historyCrashEnv) != "":
		os.Exit(historyCrashChild(os.Getenv(historyCrashEnv)))
	case os.Getenv(tinyRetentionChildEnv) != "":
		os.Exit(tinyRetentionChild())
	case os.Getenv(controlChildEnv) != "":
		os.Exit(controlChild(os.Getenv(controlChildEnv)))
	case os.Getenv(startAtChildEnv) != "":
		os.Exit(startAtChild(os.Getenv(startAtChildEnv)))
	case os.Getenv(spawnClusterEnv) != "":
		os.Exit(spawnClusterHelper(os.Getenv(clusterHelperEnv)))
	case os.Getenv(clusterHelperEnv) != "":
		os.Exit(clusterHelper(os.Getenv(clusterHelperEnv)))
	case os.Getenv(memberWriterEnv) != "":
		os.Exit(memberWriterChild(os.Getenv(memberWriterEnv)))
	case os.Getenv(queueHelperEnv) != "":
		os.Exit(queueHelperChild(os.Getenv(queueHelperEnv)))
	}
	if memberMode() {
		code := m.Run()
		testenv.Stop()
		removeMemberStores()
		os.Exit(code)
	}
	testenv.Main(m)
}

// crashOpenedLine is what a child writes to stderr once it opened the store.
const crashOpenedLine = "child: store opened"

func crashRunID(round, i int) string { return fmt.Sprintf("crash-%03d-%02d", round, i) }

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
	round, err := strconv.Atoi(os.Getenv(crashRoundEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child round:", err)
		return 2
	}
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
	// The steps log: "<round> start|end <run> <step>", one write(2) per
	// line (O_APPEND), so a line is on disk as soon as it is written.
	stepsLog, err := os.OpenFile(filepath.Join(dir, "..", "steps"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child steps log:", err)
		return 4
	}
	logStep := func(what string, s *steprunner.Step) {
		fmt.Fprintf(stepsLog, "%d %s %s %d\n", round, what, s.RunID, s.Number)
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
		logStep("start", s)
		// Some work, so kills land inside steps as well as between them.
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		if mode != "finish" && rand.IntN(10) == 0 {
			fmt.Fprintf(os.Stderr, "%s%s %d\n", crashLongLine, s.RunID, n)
			select {
			case <-time.After(crashLongStep):
			case <-ctx.Done():
				return steprunner.Outcome{}, context.Cause(ctx)
			}
		}
		logStep("end", s)
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
	// Every child submits its round's runs and those of every round before
	// it: those are duplicates (idempotency across crashes), never
	// mismatches.
	for r := round; r >= 0; r-- {
		for i := range crashRuns {
			if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: crashRunID(r, i), Input: chainPayload(0),
				// Kills cost attempts (a claim counts one): keep the limit high
				// enough that no step runs out of attempts because of them.
				MaxAttemptsPerStep: 1000}); err != nil {
				fmt.Fprintln(os.Stderr, "child submit:", err)
				return 6
			}
		}
	}
	if mode != "finish" {
		return <-make(chan int) // run until killed
	}
	deadline := time.Now().Add(60 * time.Second)
	total := (round + 1) * crashRuns
	for {
		done := 0
		for r := range round + 1 {
			for i := range crashRuns {
				st, err := rt.Status(ctx, crashRunID(r, i))
				if err != nil {
					fmt.Fprintln(os.Stderr, "child status:", err)
					return 7
				}
				if st.State.Terminal() {
					done++
				}
			}
		}
		s, err := q.Stats(ctx, "workflow-notify")
		if err != nil {
			fmt.Fprintln(os.Stderr, "child stats:", err)
			return 7
		}
		if done == total && s.Pending+s.Scheduled+s.Claimed == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "child: %d of %d runs ended, notifications %+v after 60s\n", done, total, s)
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
	// child starts a child; long receives a line when a long step starts.
	child := func(mode string, round int) (cmd *exec.Cmd, stderr *testenv.Buffer, long chan string) {
		cmd = exec.Command(os.Args[0], "-test.run=^TestCrashResumesRuns$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashModeEnv+"="+mode, fmt.Sprint(crashRoundEnv, "=", round))
		stderr = &testenv.Buffer{}
		long = make(chan string, 64)
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
	start := time.Now()
	var progress [][2]int
	for round := range rounds {
		cmd, stderr, long := child("kill", round)
		// Kill a random moment after a long step started: it is still
		// running, and other steps, commits and snapshots go on around it.
		var longStep string
		select {
		case longStep = <-long:
		case <-time.After(waitTimeout + crashLongStep):
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			t.Fatalf("round %d: no long step started\n%s", round, stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL: %v\n%s", round, err, stderr.String())
		}
		// The kill interrupted work in flight: steps the child started and
		// never ended, the long one among them.
		if cut := crashInterrupted(t, base, round); len(cut) == 0 || !slices.Contains(cut, longStep) {
			t.Fatalf("round %d: the kill interrupted steps %v, want at least the long step %s", round, cut, longStep)
		}
		progress = append(progress, crashProgress(t, dir, rounds))
	}
	killed := time.Since(start)
	t.Logf("progress after each kill (steps settled, runs ended): %v", progress)
	if progress[len(progress)-1][0] <= progress[0][0] {
		t.Errorf("the killed children settled no step after the first round: progress %v", progress)
	}

	cmd, stderr, _ := child("finish", rounds-1)
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
	var ids []string
	for r := range rounds {
		for i := range crashRuns {
			ids = append(ids, crashRunID(r, i))
		}
	}
	for _, id := range ids {
		st, err := rt.Status(ctx, id)
		if err != nil {
			t.Errorf("run %s: %v", id, err)
			continue
		}
		if st.State != runtime.StateSucceeded || !bytes.Equal(st.Result, want) || st.CurrentStep != crashSteps-1 {
			t.Errorf("run %s: %v at step %d, result %v, error %q; want succeeded at step %d with %v",
				id, st.State, st.CurrentStep, st.Result, st.Error, crashSteps-1, want)
		}
	}
	// Steps that ran to their end more than once: each was settled by no
	// run of it but the last (the chain check above would fail otherwise),
	// so these are the steps a kill made run again.
	ends := map[string]int{}
	for _, l := range crashStepsLog(t, base) {
		if l.what == "end" {
			ends[l.step]++
		}
	}
	again := 0
	for _, n := range ends {
		again += n - 1
	}
	t.Logf("%d steps ran to their end again after a kill: %.1f per kill", again, float64(again)/float64(rounds))
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
	for _, id := range ids {
		switch n := heard[id]; {
		case n == 0:
			t.Errorf("the hook never heard about run %s", id)
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("hook: %d runs heard, %d repeated deliveries (at least once is the contract)", len(heard), dups)
}

// crashProgress reads the store as a read-only reader and returns how many
// steps have settled (sum of current steps, plus one per ended run) and how
// many runs have ended.
func crashProgress(t *testing.T, dir string, rounds int) [2]int {
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
	for r := range rounds {
		for i := range crashRuns {
			st, err := rt.Status(ctx, crashRunID(r, i))
			if err != nil {
				continue // not submitted yet
			}
			steps += int(st.CurrentStep)
			if st.State.Terminal() {
				steps++
				ended++
			}
		}
	}
	return [2]int{steps, ended}
}

// crashStepLine is one line of the children's steps log.
type crashStepLine struct {
	round int
	what  string // "start" or "end"
	step  string // "<run> <step>"
}

func crashStepsLog(t *testing.T, base string) []crashStepLine {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(base, "steps"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []crashStepLine
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("steps log line %q", l)
		}
		round, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("steps log line %q", l)
		}
		lines = append(lines, crashStepLine{round, f[1], f[2] + " " + f[3]})
	}
	return lines
}

// crashInterrupted returns the steps the child of round started and did
// not end ("<run> <step>"): those its kill interrupted.
func crashInterrupted(t *testing.T, base string, round int) []string {
	t.Helper()
	open := map[string]int{}
	for _, l := range crashStepsLog(t, base) {
		if l.round != round {
			continue
		}
		if l.what == "start" {
			open[l.step]++
		} else {
			open[l.step]--
		}
	}
	var cut []string
	for step, n := range open {
		if n > 0 {
			cut = append(cut, step)
		}
	}
	slices.Sort(cut)
	return cut
}
