package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// The Spawn crash test in cluster mode: spawnClusterHelpers helper
// processes (this test binary, re-executed by the cluster crash harness,
// crashCluster) run a Runtime each on one store (file://, and MinIO), one
// of them the writer. The first submits the parent "sp", which spawns
// spawnCrashChildren children of two short steps each (TestSpawnCrash's
// workload); some children's last steps are long (at most
// spawnClusterLongSlots at a time per helper) until the kill. The test
// SIGKILLs the writer once spawnCrashEndedAtKill children ended and while
// it runs a long child step, checks from the events log (the harness's
// format) that the kill interrupted child steps the writer had started
// and not settled, and that the parent had not joined; a member takes
// over and the survivors finish. Then, as for TestSpawnCrash: every child
// Succeeded with Retries 0, the attempt that settled its last step ran
// once and no later one started, every hook call for it is the same
// termination (a repeat only of a call made before the new writer took
// over, whose acknowledgement the failover lost); the parent's join step
// ran once, on a survivor, with every result in order; the queues are
// empty and nothing is dead.

const (
	spawnClusterEnv       = "STEPWELL_RUNTIME_SPAWN_CLUSTER" // set: the helper runs spawnClusterHelper
	spawnClusterHelpers   = 2
	spawnClusterLongSlots = 2
	// spawnClusterLong is a long step: it outlasts the wait for the kill
	// moment, and the members' still run a while after the kill.
	spawnClusterLong = 3 * time.Second
)

// spawnClusterHelper is a helper process of TestSpawnCrashCluster. It
// reports on stdout as clusterHelper does (role, ready, long, error,
// closed) and records in the events log start, end and hook lines in its
// format (a hook's result field is spawnHookLine's after the status); the
// join step appends "<helper> <children> <ok>" to the file joins. It stops
// making long steps once the file killed exists, and closes and exits 0
// at the end of stdin.
func spawnClusterHelper(url string) int {
	name, dir := os.Getenv(clusterNameEnv), os.Getenv(clusterDirEnv)
	p, code := openClusterProc(url, dir, clusterQueueOpts())
	if code != 0 {
		return code
	}
	say, record, q, ctx := p.say, p.record, p.q, context.Background()
	// addLong counts a long step in (1: false if spawnClusterLongSlots
	// run already) or out, and reports the count, in order.
	long := 0
	addLong := func(d int) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if d > 0 && long >= spawnClusterLongSlots {
			return false
		}
		long += d
		fmt.Fprintf(os.Stdout, "long %d\n", long)
		return true
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		payload := string(s.Payload)
		if payload == "" {
			payload = "-"
		}
		record("start %s %s %d %d %s %d", name, s.RunID, s.Number, s.Attempt, payload, time.Now().UnixNano())
		end := func(how string) {
			record("end %s %s %d %d %s %d", name, s.RunID, s.Number, s.Attempt, how, time.Now().UnixNano())
		}
		switch {
		case s.RunID == "sp" && s.Number == 0:
			cs := make([]steprunner.Child, spawnCrashChildren)
			for i := range cs {
				cs[i] = steprunner.Child{Input: []byte(strconv.Itoa(i))}
			}
			end("ok")
			return steprunner.Spawn(cs), nil
		case s.RunID == "sp":
			ok := 0
			for i, c := range s.Children {
				if c.RunID == spawnChildID(i) && c.Status == terminal.Succeeded && string(c.Result) == strconv.Itoa(i)+"+1" {
					ok++
				}
			}
			f, err := os.OpenFile(filepath.Join(dir, "joins"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err == nil {
				_, err = fmt.Fprintf(f, "%s %d %d\n", name, len(s.Children), ok)
				f.Close()
			}
			if err != nil {
				say("error joins: %v", err)
				os.Exit(2)
			}
			end("ok")
			return steprunner.Succeed(nil), nil
		}
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		if s.Number == 1 && rand.IntN(8) == 0 {
			if _, err := os.Stat(filepath.Join(dir, "killed")); err != nil {
				if addLong(1) {
					select {
					case <-time.After(spawnClusterLong):
					case <-ctx.Done():
						addLong(-1)
						cause := context.Cause(ctx)
						end(strings.ReplaceAll(cause.Error(), " ", "_"))
						return steprunner.Outcome{}, cause
					}
					addLong(-1)
				}
			}
		}
		end("ok")
		if s.Number == 0 {
			return steprunner.Continue(append(s.Payload, "+1"...)), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		record("hook %s %s %s", name, o.RunID, spawnHookLine(o))
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(10*time.Millisecond), runtime.WithMaxConcurrentSteps(4))
	if err != nil {
		say("error New: %v", err)
		return 4
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(runCtx) }()
	say("ready")
	if name == os.Getenv(clusterPrefixEnv)+"h00" {
		if !p.submit(rt, runtime.RunSpec{RunID: "sp", MaxAttemptsPerStep: 1000}) {
			return 6
		}
	}
	return p.stopAndClose(stdinEnded(), stopRun, runErr, 1)
}

func TestSpawnCrashCluster(t *testing.T) {
	runCrashOnStores(t, spawnClusterCrash)
}

func spawnClusterCrash(t *testing.T, store, url string) {
	began := time.Now()
	c := startCrashCluster(t, store, url, spawnClusterHelpers, spawnClusterEnv+"=1")
	// The kill: once enough children ended, while the writer runs a long
	// child step.
	w := c.waitForWriter("children to end while the writer runs a long child step", func(w *crashHelper) bool {
		n := readCrashEvents(t, c.dir).endedOK("sp.s0.", 1)
		_, _, _, long := w.state()
		c.detail = fmt.Sprintf("%d children ended; writer %s runs %d long steps", n, w.name, long)
		return n >= spawnCrashEndedAtKill && long > 0
	})
	time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
	killAt := time.Now()
	c.kill(w)
	if err := os.WriteFile(filepath.Join(c.dir, "killed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ev := readCrashEvents(t, c.dir)
	cut := ev.interruptedOf(w.name, "sp.s0.")
	if len(cut) == 0 {
		t.Fatalf("the kill of writer %s interrupted no child step\n%s", w.name, w.output())
	}
	endedAtKill := ev.endedOK("sp.s0.", 1)
	if lines := readLines(t, filepath.Join(c.dir, "joins")); len(lines) != 0 {
		t.Fatalf("the parent joined before the kill: %v", lines)
	}
	// A member takes over.
	takeover := c.waitForTakeover(w)
	failover := takeover.Sub(killAt)

	// This process joins as a member to watch the end.
	ctx := context.Background()
	q, rt := c.joinAsMember()
	c.waitFor("the parent run to end and every notification to be delivered", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := rt.Status(cctx, "sp")
		if err != nil || !st.State.Terminal() {
			c.detail = fmt.Sprintf("sp: %v %s, %v", st.State, st.WaitingFor, err)
			return false
		}
		for _, name := range []string{stepsQueue, notifyQueue} {
			s, err := q.Stats(cctx, name)
			if err != nil || s.Pending+s.Scheduled+s.Claimed != 0 {
				c.detail = fmt.Sprintf("%s: %+v, %v", name, s, err)
				return false
			}
		}
		return true
	})
	finished := time.Since(killAt)
	c.closeHelpers(q)

	// The checks.
	ev = readCrashEvents(t, c.dir)
	joins := readLines(t, filepath.Join(c.dir, "joins"))
	if len(joins) != 1 || !strings.HasSuffix(joins[0], fmt.Sprintf(" %d %d", spawnCrashChildren, spawnCrashChildren)) {
		t.Fatalf("joins %q, want one with every child succeeded in order", joins)
	}
	type stepKey struct {
		run           string
		step, attempt int
	}
	starts := map[stepKey]int{}
	latest := map[string]int{} // run -> the highest attempt of step 1 started
	carried := 0               // child steps survivors ran across the kill, ended ok
	for _, e := range ev.execs {
		starts[stepKey{e.run, e.step, e.attempt}]++
		if e.step == 1 {
			latest[e.run] = max(latest[e.run], e.attempt)
		}
		if e.helper != w.name && e.how == "ok" && e.start.Before(killAt) && e.end.After(killAt) {
			carried++
		}
	}
	var joinRuns []*crashExec
	for _, e := range ev.execs {
		if e.run == "sp" && e.step == 1 {
			joinRuns = append(joinRuns, e)
		}
	}
	if len(joinRuns) != 1 || joinRuns[0].helper == w.name {
		t.Fatalf("the join step ran %d times, want once on a survivor: %v", len(joinRuns), joinRuns)
	}
	repeats := 0
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
			if n := starts[stepKey{id, 1, int(st.Attempt)}]; n != 1 || latest[id] != int(st.Attempt) {
				t.Fatalf("child %s: ended by attempt %d of step 1, which started %d times; attempts up to %d started (want it once, and no later one)",
					id, st.Attempt, n, latest[id])
			}
		}
		at, err := spawnHookCheck(id, ev.hooks[id], st)
		if err != nil {
			t.Fatal(err)
		}
		if len(at) > 1 && !at[0].Before(takeover) {
			t.Fatalf("run %s: the hook ran %d times, the first at %v after the takeover at %v", id, len(at), at[0], takeover)
		}
		repeats += len(at) - 1
	}
	if st, err := rt.Status(ctx, "sp"); err != nil || len(st.Children) != spawnCrashChildren {
		t.Fatalf("parent: %+v, %v", st, err)
	}
	for _, name := range []string{stepsQueue, notifyQueue, stepsQueue + ".dead"} {
		if s := mustStats(t, q, name); s.Pending+s.Scheduled+s.Claimed+s.Dead != 0 {
			t.Errorf("queue %s not empty: %+v", name, s)
		}
	}
	t.Logf("%s: %d children, %d helpers: %d ended before the SIGKILL of writer %s, which interrupted %d of its child steps; a writer %v after the kill, everything ended %v after it; %d survivor steps ran across the kill and settled; %d step executions (%d for 2 per child and 2 for the parent), %d hook calls repeated; %v in all",
		store, spawnCrashChildren, spawnClusterHelpers, endedAtKill, w.name, len(cut), failover.Round(time.Millisecond), finished.Round(time.Millisecond),
		carried, len(ev.execs), 2*spawnCrashChildren+2, repeats, time.Since(began).Round(time.Millisecond))
}
