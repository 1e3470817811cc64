package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// The per-key concurrency crash test in cluster mode: concClusterHelpers
// helper processes (this test binary, re-executed by the cluster crash
// harness, crashCluster) run a Runtime each on one store, one of them the
// writer. Each submits (Submit is idempotent) concCrashA runs of key A (Limit
// concCrashLimit) and then concCrashB runs of key B (Limit concCrashB),
// three steps each, whose steps take a few to a hundred milliseconds and
// log their start and end (the harness's events log, with wall-clock
// times: the helpers share a host). A's runs are on a step queue that only
// the writer serves (a member serves it from when it becomes the writer).
// Once concCrashKillAt of A's runs
// ended and while the writer runs a step, the test SIGKILLs it, checks
// that the kill interrupted steps it had started and not settled, and a
// member takes over; the survivor finishes. Then: every run succeeded
// with Retries 0; the keys' state and lines are gone; and, from the
// events log, never more than Limit runs of a key were active at once,
// before, across or after the kill: a run is active from the start of
// its first step-0 execution to the end of the execution that settled
// its last step (the slot is held over a longer span, from the
// transaction that admitted it to the one that ended it, so a count over
// the limit here is a count over it in the store too).

const (
	concClusterEnv     = "STEPWELL_RUNTIME_CONC_CLUSTER" // set: the helper runs concClusterHelper
	concClusterHelpers = 2
	concCrashA         = 20
	concCrashB         = 5
	concCrashLimit     = 2
	concCrashKillAt    = 5
	concCrashQueueA    = "conc-a" // the step queue of A's runs
)

// concClusterHelper is a helper process of TestConcurrencyCrashCluster.
// It reports on stdout as clusterHelper does (role, ready, error, closed)
// and records start and end lines in the events log; it closes and exits
// 0 at the end of stdin.
func concClusterHelper(url string) int {
	name, dir := os.Getenv(clusterNameEnv), os.Getenv(clusterDirEnv)
	p, code := openClusterProc(url, dir, clusterQueueOpts())
	if code != 0 {
		return code
	}
	say, record, q, ctx := p.say, p.record, p.q, context.Background()
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		record("start %s %s %d %d %s %d", name, s.RunID, s.Number, s.Attempt, s.Payload, time.Now().UnixNano())
		d := time.Duration(5+rand.IntN(20)) * time.Millisecond
		if s.Number == 1 {
			d = time.Duration(50+rand.IntN(100)) * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			cause := context.Cause(ctx)
			record("end %s %s %d %d %s %d", name, s.RunID, s.Number, s.Attempt, strings.ReplaceAll(cause.Error(), " ", "_"), time.Now().UnixNano())
			return steprunner.Outcome{}, cause
		}
		record("end %s %s %d %d ok %d", name, s.RunID, s.Number, s.Attempt, time.Now().UnixNano())
		if s.Number < 2 {
			return steprunner.Continue(s.Payload), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	rt, err := runtime.New(q, runner, nil, runtime.WithPollInterval(10*time.Millisecond), runtime.WithMaxConcurrentSteps(4))
	if err != nil {
		say("error New: %v", err)
		return 4
	}
	// A's runs go to a step queue of their own, served only by the
	// writer: a member starts serving it once it is the writer (after the
	// kill). So the writer runs A's steps until the kill, which must cut
	// one of them, and the next writer runs the rest: the limit is
	// checked across the kill of the process that ran A. (Were A's runs
	// on the shared queue, they would stay in whichever process started
	// the first two: steps chain in their process, and an ending run
	// hands its slot on in its own settlement.)
	rtA, err := runtime.New(q, runner, nil, runtime.WithQueueName(concCrashQueueA),
		runtime.WithPollInterval(10*time.Millisecond), runtime.WithMaxConcurrentSteps(4))
	if err != nil {
		say("error New: %v", err)
		return 4
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runErr := make(chan error, 2)
	go func() { runErr <- rt.Run(runCtx) }()
	go func() {
		// The writer for half a second: at start, a process that opened
		// as the writer may be fenced by another and join it.
		since := time.Now()
		for q.Role() != queue.RoleWriter || time.Since(since) < 500*time.Millisecond {
			if q.Role() != queue.RoleWriter {
				since = time.Now()
			}
			select {
			case <-runCtx.Done():
				runErr <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		runErr <- rtA.Run(runCtx)
	}()
	say("ready")
	{ // Every helper submits every run, in order: the first Submit of a
		// run commits it (B's step 0 starts in that helper, where a slot
		// is free).
		specs := make([]runtime.RunSpec, 0, concCrashA+concCrashB)
		for i := range concCrashA {
			spec := keyed("A", concCrashLimit, i)
			spec.Queue = concCrashQueueA
			specs = append(specs, spec)
		}
		for i := range concCrashB {
			specs = append(specs, keyed("B", concCrashB, i))
		}
		for _, spec := range specs {
			spec.MaxAttemptsPerStep = 1000
			if !p.submit(rt, spec) {
				return 6
			}
		}
	}
	return p.stopAndClose(stdinEnded(), stopRun, runErr, 2)
}

func TestConcurrencyCrashCluster(t *testing.T) {
	runCrashOnStores(t, concClusterCrash)
}

// concRunSpan is when a run was active, as its steps saw it.
type concRunSpan struct {
	run        string
	start, end time.Time
}

// maxOverlap returns the most spans of spans that overlap at one time,
// and the runs of such a time.
func maxOverlap(spans []concRunSpan) (int, []string) {
	type edge struct {
		at    time.Time
		delta int
		run   string
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1, s.run}, edge{s.end, -1, s.run})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta // an end before a start at the same time
	})
	n, best := 0, 0
	var bestRuns []string
	in := map[string]bool{}
	for _, e := range edges {
		n += e.delta
		in[e.run] = e.delta > 0
		if n > best {
			best, bestRuns = n, nil
			for r, ok := range in {
				if ok {
					bestRuns = append(bestRuns, r)
				}
			}
			slices.Sort(bestRuns)
		}
	}
	return best, bestRuns
}

func concClusterCrash(t *testing.T, store, url string) {
	began := time.Now()
	c := startCrashCluster(t, store, url, concClusterHelpers, concClusterEnv+"=1")
	// The kill: once enough of A's runs ended, while the writer runs a
	// step of one of them.
	w := c.waitForWriter("A's runs to end while the writer runs one of their steps", func(w *crashHelper) bool {
		ev := readCrashEvents(t, c.dir)
		n, running := ev.endedOK("A-", 2), len(ev.interruptedOf(w.name, "A-"))
		c.detail = fmt.Sprintf("%d of A's runs ended; writer %s runs %d of their steps", n, w.name, running)
		return n >= concCrashKillAt && n < concCrashA-concCrashLimit && running > 0
	})
	killAt := time.Now()
	c.kill(w)
	ev := readCrashEvents(t, c.dir)
	cut := ev.interruptedOf(w.name, "A-")
	if len(cut) == 0 {
		t.Fatalf("the kill of writer %s interrupted no step of A's runs\n%s", w.name, w.output())
	}
	endedAtKill := ev.endedOK("A-", 2)
	takeover := c.waitForTakeover(w)

	// This process joins as a member to watch the end.
	ctx := context.Background()
	q, rt := c.joinAsMember()
	ids := make([]string, 0, concCrashA+concCrashB)
	for i := range concCrashA {
		ids = append(ids, fmt.Sprintf("A-%02d", i))
	}
	for i := range concCrashB {
		ids = append(ids, fmt.Sprintf("B-%02d", i))
	}
	c.waitFor("every run to end", func() bool {
		for _, id := range ids {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := rt.Status(cctx, id)
			cancel()
			if err != nil || !st.State.Terminal() {
				c.detail = fmt.Sprintf("%s: %v %s, %v", id, st.State, st.WaitingFor, err)
				return false
			}
		}
		return true
	})
	finished := time.Since(killAt)
	c.closeHelpers(q)

	// The checks.
	for _, id := range ids {
		st, err := rt.Status(ctx, id)
		if err != nil || st.State != runtime.StateSucceeded || st.Retries != 0 {
			t.Fatalf("run %s: %+v, %v", id, st, err)
		}
	}
	checkKeyGone(t, q, "A")
	checkKeyGone(t, q, "B")
	for _, name := range []string{stepsQueue, stepsQueue + ".dead"} {
		if s := mustStats(t, q, name); s.Pending+s.Scheduled+s.Claimed+s.Dead != 0 {
			t.Errorf("queue %s not empty: %+v", name, s)
		}
	}
	ev = readCrashEvents(t, c.dir)
	spans := map[string]*concRunSpan{}
	settled := map[string]*crashExec{} // run -> the highest attempt of step 2
	for _, e := range ev.execs {
		s := spans[e.run]
		if s == nil {
			s = &concRunSpan{run: e.run, start: e.start}
			spans[e.run] = s
		}
		if e.start.Before(s.start) {
			s.start = e.start
		}
		if e.step == 2 && (settled[e.run] == nil || e.attempt > settled[e.run].attempt) {
			settled[e.run] = e
		}
	}
	var aSpans []concRunSpan
	var order []string // A's runs by their first start
	for id, s := range spans {
		if e := settled[id]; e == nil || e.how != "ok" {
			t.Fatalf("run %s: its last step did not end ok: %v", id, e)
		}
		s.end = settled[id].end
		if strings.HasPrefix(id, "A-") {
			aSpans = append(aSpans, *s)
			order = append(order, id)
		}
	}
	if len(aSpans) != concCrashA {
		t.Fatalf("%d of A's runs ran, want %d", len(aSpans), concCrashA)
	}
	most, runs := maxOverlap(aSpans)
	if most > concCrashLimit {
		t.Fatalf("%d of A's runs were active at once (%v), limit %d", most, runs, concCrashLimit)
	}
	sort.Slice(order, func(i, j int) bool { return spans[order[i]].start.Before(spans[order[j]].start) })
	inversions := 0
	for i := range order {
		for j := i + 1; j < len(order); j++ {
			if order[j] < order[i] {
				inversions++
			}
		}
	}
	t.Logf("%s: %d runs of A (Limit %d) and %d of B on %d helpers: %d of A's ended before the SIGKILL of writer %s, which interrupted %d of their steps; a writer %v after the kill, every run ended %v after it; at most %d of A active at once; A's first starts %d pair inversions from submit order; %d step executions; %v in all",
		store, concCrashA, concCrashLimit, concCrashB, concClusterHelpers, endedAtKill, w.name, len(cut),
		takeover.Sub(killAt).Round(time.Millisecond), finished.Round(time.Millisecond), most,
		inversions, len(ev.execs), time.Since(began).Round(time.Millisecond))
}
