package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// The strand test runs three helper processes at a time (this test binary,
// re-executed: see TestMain) on one store in cluster mode, each working a
// queue of long jobs ("steps") with four slots, and SIGKILLs the writer
// again and again, every half a lease or so, each time while it runs
// steps, starting a replacement each time. A step the killed writer was
// running must run again within about a lease of its claim (or of the
// kill, if its holder had renewed it past a lease; or once a writer is up
// after that, if none was), however many kills follow: before, each new
// writer adopted its claim with a lease from its own open, and the step
// waited until the kills stopped.
//
// The helpers write one line per event, one write(2) each, to an O_APPEND
// file they share:
//
//	start <helper> <job> <attempt> <unixnano>   the handler began
//	end <helper> <job> <attempt> <unixnano>     it returned
//
// and report on stdout "state <role> <running>" as either changes.

const (
	strandHelperEnv = "STEPWELL_STRAND_HELPER" // the store URL, in a helper
	strandLogEnv    = "STEPWELL_STRAND_LOG"    // the events log
	strandNameEnv   = "STEPWELL_STRAND_NAME"   // the helper's name
	// strandKillsEnv overrides the number of kills (default strandKills).
	strandKillsEnv = "STEPWELL_STRAND_KILLS"
	strandKills    = 15
	strandLease    = 3 * time.Second
	strandHB       = 200 * time.Millisecond
	strandSlots    = 4
	strandJobs     = 1500 // more than the helpers run before the end
	// strandSlack, plus two of the longest failover seen, bounds how much
	// later than it was due (see below) an interrupted step may run
	// again: the grace of the claims no one confirms, a reaper tick, a
	// free slot, a writer killed just after it requeued the step, and what
	// a busy machine adds. Generous: before the fix, the steps of the first kills
	// waited for the last one (15-25s on file://, more on MinIO).
	strandSlack    = 3 * strandLease
	strandDeadline = 2 * time.Minute
)

func strandOpts() []Option {
	return []Option{
		WithCluster(ClusterConfig{Listen: "127.0.0.1:0"}),
		WithHeartbeat(strandHB),
		WithLease(strandLease),
		WithRetryBackoff(time.Millisecond, 5*time.Millisecond),
		WithPollInterval(10 * time.Millisecond),
		WithMaxAttempts(1000),
	}
}

// strandHelper is a helper process: it works the queue "q" until killed.
// A job's payload is how long its step takes, in milliseconds.
func strandHelper(url string) int {
	ctx := context.Background()
	name := os.Getenv(strandNameEnv)
	events, err := os.OpenFile(os.Getenv(strandLogEnv), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	logEvent := func(what string, j *Job) {
		// One write(2) per line: lines of processes do not interleave.
		_, _ = events.WriteString(fmt.Sprintf("%s %s %s %d %d\n", what, name, j.ID, j.Attempt, time.Now().UnixNano()))
	}
	q, err := Open(ctx, url, strandOpts()...)
	if err != nil {
		fmt.Println("error open:", err)
		return 2
	}
	var running atomic.Int64
	go func() {
		last := ""
		for {
			s := fmt.Sprintf("state %s %d", q.Role(), running.Load())
			if s != last {
				fmt.Println(s)
				last = s
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err = q.Work(ctx, "q", func(ctx context.Context, j *Job) error {
		running.Add(1)
		defer running.Add(-1)
		logEvent("start", j)
		ms, _ := strconv.Atoi(string(j.Payload))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		logEvent("end", j)
		return nil
	}, WorkOptions{Concurrency: strandSlots})
	fmt.Println("error work:", err)
	return 2
}

// strandProc is a helper process, as the parent sees it.
type strandProc struct {
	name    string
	cmd     *exec.Cmd
	stdout  *testenv.Buffer
	stderr  *testenv.Buffer
	exited  chan struct{}
	mu      sync.Mutex
	role    string
	running int
	killed  time.Time
	roles   []roleAt // each change of role, when the parent read it
}

type roleAt struct {
	role string
	at   time.Time
}

// tenure is a span in which a helper was the writer, as the parent saw
// it: from its report to its kill, or to its report that it is a member
// again (deposed: another helper fenced it, the cluster having judged it
// dead: its heartbeat stopped and it did not answer).
type tenure struct {
	helper   string
	from, to time.Time
	deposed  bool
}

// tenures lists the writer tenures of procs.
func tenures(procs []*strandProc) []tenure {
	var out []tenure
	for _, p := range procs {
		p.mu.Lock()
		var open *tenure
		for _, r := range p.roles {
			switch {
			case r.role == RoleWriter.String() && open == nil:
				open = &tenure{helper: p.name, from: r.at}
			case r.role != RoleWriter.String() && open != nil:
				open.to, open.deposed = r.at, true
				out = append(out, *open)
				open = nil
			}
		}
		if open != nil {
			open.to = p.killed
			if open.to.IsZero() {
				open.to = time.Now().Add(time.Hour) // alive at the end
			}
			out = append(out, *open)
		}
		p.mu.Unlock()
	}
	return out
}

// strandDue is when a step whose lease ended at leaseEnd, and which ran
// again at rerun, was due to run again: at leaseEnd if a writer was up
// then, else when the next one came up. If the writer up then was
// deposed before the step ran again, the step is due when the next
// writer came up: a writer stalled on its store (it stops beating, and
// is fenced once it does not answer either) requeues nothing, and the
// cluster judged it dead. So is it if that writer was killed before it
// could requeue the step (strandRequeued): it had adopted the claim at
// its takeover, and kept it a grace from then for its holder to confirm.
func strandDue(ts []tenure, leaseEnd, rerun time.Time) time.Time {
	due := leaseEnd
	for {
		var cur *tenure
		var next time.Time // the first writer up after due
		for i := range ts {
			t := &ts[i]
			if !t.from.After(due) && due.Before(t.to) && (cur == nil || cur.deposed) {
				cur = t
			}
			if t.from.After(due) && (next.IsZero() || t.from.Before(next)) {
				next = t.from
			}
		}
		// cur took care of the step if it was up when the step ran again,
		// or, not deposed, lived until it could requeue it.
		tookCare := cur != nil && (!cur.to.Before(rerun) || !cur.deposed && !cur.to.Before(strandRequeued(cur, due)))
		if tookCare || next.IsZero() {
			return due
		}
		due = next
	}
}

// strandRequeueIn is how long after an adopted claim expired the writer
// has requeued it, durably, at the latest: a tick of the reaper (it runs
// that often while adopted claims wait) and a commit on a busy store.
const strandRequeueIn = adoptedReapEvery + 400*time.Millisecond

// strandRequeued is when writer w, up at due, has requeued a claim it
// adopted whose lease ended by then: at the end of the grace it gave the
// claim's holder from its takeover (adoptGrace, here a second), or at due
// if later, plus strandRequeueIn. A writer killed before that passes the
// step on to the next one.
func strandRequeued(w *tenure, due time.Time) time.Time {
	expired := w.from.Add(adoptGraceFor(strandLease, strandHB))
	if due.After(expired) {
		expired = due
	}
	return expired.Add(strandRequeueIn)
}

func (p *strandProc) state() (role string, running int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.role, p.running
}

// strandExec is one step execution read from the events log.
type strandExec struct {
	helper     string
	job        string
	attempt    int
	start, end time.Time // end zero: it never ended
}

func readStrandLog(t *testing.T, path string) []*strandExec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]*strandExec{}
	var out []*strandExec
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		attempt, _ := strconv.Atoi(f[3])
		ns, _ := strconv.ParseInt(f[4], 10, 64)
		key := f[1] + " " + f[2] + " " + f[3]
		switch f[0] {
		case "start":
			e := &strandExec{helper: f[1], job: f[2], attempt: attempt, start: time.Unix(0, ns)}
			byKey[key] = e
			out = append(out, e)
		case "end":
			if e := byKey[key]; e != nil {
				e.end = time.Unix(0, ns)
			}
		}
	}
	return out
}

// rerun returns the first execution of e's job with a later attempt.
func rerun(all []*strandExec, e *strandExec) *strandExec {
	var first *strandExec
	for _, o := range all {
		if o.job == e.job && o.attempt > e.attempt && (first == nil || o.start.Before(first.start)) {
			first = o
		}
	}
	return first
}

func TestStrandedStepsRerunWithinLease(t *testing.T) {
	if testing.Short() {
		t.Skip("process kill test skipped in -short mode")
	}
	kills := strandKills
	if s := os.Getenv(strandKillsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", strandKillsEnv, s)
		}
		kills = n
	}
	for _, store := range []string{"file", "s3"} {
		t.Run(store, func(t *testing.T) {
			url := "file://" + t.TempDir()
			if store == "s3" {
				url = testenv.S3(t) // skips without MinIO (fails under CI=true)
			}
			strandRun(t, url, kills)
		})
	}
}

func strandRun(t *testing.T, url string, kills int) {
	ctx := context.Background()
	logPath := filepath.Join(t.TempDir(), "events")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The jobs, enqueued before any helper runs: 1 to 2.5s each.
	q, err := Open(ctx, url, WithMaxAttempts(1000)) // a job's limit is set when it is enqueued
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, strandJobs)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < strandJobs; i += 16 {
				ms := 1000 + rand.IntN(1500)
				if _, err := q.Enqueue(ctx, "q", []byte(strconv.Itoa(ms)), EnqueueOptions{JobID: fmt.Sprintf("s%04d", i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}

	var procs []*strandProc
	start := func() {
		p := &strandProc{name: fmt.Sprintf("h%02d", len(procs)), exited: make(chan struct{})}
		p.stdout = &testenv.Buffer{OnLine: func(line string) {
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == "state" {
				n, _ := strconv.Atoi(f[2])
				p.mu.Lock()
				if f[1] != p.role {
					p.roles = append(p.roles, roleAt{role: f[1], at: time.Now()})
				}
				p.role, p.running = f[1], n
				p.mu.Unlock()
			}
		}}
		p.stderr = &testenv.Buffer{}
		p.cmd = exec.Command(os.Args[0], "-test.run=^TestStrandedStepsRerunWithinLease$")
		p.cmd.Env = append(os.Environ(), strandHelperEnv+"="+url, strandLogEnv+"="+logPath, strandNameEnv+"="+p.name)
		p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = p.cmd.Wait()
			close(p.exited)
		}()
		procs = append(procs, p)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
	})
	dump := func() string {
		var b strings.Builder
		for _, p := range procs {
			fmt.Fprintf(&b, "--- %s stdout:\n%s--- %s stderr:\n%s", p.name, tailLines(p.stdout.String(), 20), p.name, tailLines(p.stderr.String(), 40))
		}
		return b.String()
	}
	detail := "" // what a wait still waits for
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s\n%s", detail, dump())
		}
	})
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		detail = ""
		testenv.Eventually(t, strandDeadline, what, cond)
	}
	for range 3 {
		start()
	}
	// writer is the live helper that reports being the writer.
	writer := func() *strandProc {
		for _, p := range procs {
			select {
			case <-p.exited:
				if p.killed.IsZero() {
					t.Fatalf("helper %s exited on its own", p.name) // the cleanup logs the dump
				}
				continue
			default:
			}
			if role, _ := p.state(); role == RoleWriter.String() {
				return p
			}
		}
		return nil
	}
	var failovers []time.Duration
	var lastKill time.Time
	for k := range kills + 1 {
		var w *strandProc
		waitFor("a writer", func() bool { w = writer(); return w != nil })
		if k > 0 {
			failovers = append(failovers, time.Since(lastKill))
		}
		if k == kills {
			break
		}
		// A half to two thirds of a lease, then while it runs steps: past
		// the grace of the claims it adopted and a requeue (strandRequeued),
		// short of a lease (a claim must not wait for a lease from each
		// takeover).
		time.Sleep(strandLease/2 + rand.N(strandLease/6))
		// Two steps at least: one reported running may end just before
		// the kill.
		waitFor("the writer to run steps", func() bool {
			_, n := w.state()
			return n >= 2
		})
		w.mu.Lock()
		w.killed = time.Now()
		w.mu.Unlock()
		_ = w.cmd.Process.Signal(syscall.SIGKILL)
		<-w.exited
		lastKill = w.killed
		start()
	}

	// Every step a killed writer was running runs again.
	var all []*strandExec
	var interrupted []*strandExec
	killedAt := map[string]time.Time{}
	for _, p := range procs {
		if !p.killed.IsZero() {
			killedAt[p.name] = p.killed
		}
	}
	waitFor("every interrupted step to run again", func() bool {
		all = readStrandLog(t, logPath)
		interrupted = interrupted[:0]
		for _, e := range all {
			if !killedAt[e.helper].IsZero() && e.end.IsZero() {
				interrupted = append(interrupted, e)
			}
		}
		for _, e := range interrupted {
			if rerun(all, e) == nil {
				var execs []string
				for _, o := range all {
					if o.job == e.job {
						execs = append(execs, fmt.Sprintf("%d on %s at %s..%s", o.attempt, o.helper, o.start.Format("15:04:05.000"), o.end.Format("15:04:05.000")))
					}
				}
				detail = fmt.Sprintf("(%s: %s; %s killed at %s)", e.job, strings.Join(execs, ", "), e.helper, killedAt[e.helper].Format("15:04:05.000"))
				return false
			}
		}
		return true
	})
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}

	// Each kill interrupted work in flight, and each interrupted step ran
	// again within the slack of when it was due: the end of its lease, as
	// its holder last had it (a lease from its start, or the kill if it
	// ran over a lease), or if no writer was up then, when the next one
	// was (strandDue; a writer deposed before the step ran again, or
	// killed before it could requeue the step, counts as down).
	// A writer killed soon after it requeued a step (before a worker
	// claimed it again) passes the step on to the next writer: a failover
	// more.
	slack := strandSlack + 2*slices.Max(failovers)
	writers := tenures(procs)
	deposed := 0
	for _, tn := range writers {
		if tn.deposed {
			deposed++
			t.Logf("writer %s deposed: writer %s..%s", tn.helper, tn.from.Format("15:04:05.000"), tn.to.Format("15:04:05.000"))
		}
	}
	perHelper := map[string]int{}
	var afterStart, late []time.Duration
	var failures []string
	for _, e := range interrupted {
		perHelper[e.helper]++
		r := rerun(all, e)
		killed := killedAt[e.helper]
		leaseEnd := e.start.Add(strandLease)
		if leaseEnd.Before(killed) {
			leaseEnd = killed // renewed until the kill
		}
		due := strandDue(writers, leaseEnd, r.start)
		afterStart = append(afterStart, r.start.Sub(e.start))
		over := r.start.Sub(due)
		late = append(late, over)
		if over > slack {
			failures = append(failures, fmt.Sprintf("%s attempt %d (on %s, started %v before its kill) ran again %v after its start, %v after it was due (last kill %v after its start)",
				e.job, e.attempt, e.helper, killed.Sub(e.start).Round(time.Millisecond), r.start.Sub(e.start).Round(time.Millisecond),
				over.Round(time.Millisecond), lastKill.Sub(e.start).Round(time.Millisecond)))
		}
	}
	for name, killed := range killedAt {
		if perHelper[name] == 0 {
			t.Errorf("the kill of %s at %v interrupted no step", name, killed.Format("15:04:05.000"))
		}
	}
	// Steps that ended early on a live helper lost their claim, and ran
	// again. On file://, where a takeover is quick, none may: a live
	// member confirms its claims within the grace. On MinIO it is only
	// logged (a member whose writer is away over a lease, as on a slow
	// takeover, loses its claims by design).
	var lostLive []string
	for _, e := range all {
		if e.end.IsZero() && killedAt[e.helper].IsZero() {
			if rerun(all, e) != nil {
				lostLive = append(lostLive, fmt.Sprintf("%s attempt %d on %s (started %s)", e.job, e.attempt, e.helper, e.start.Format("15:04:05.000")))
			}
		}
	}
	if len(lostLive) > 0 && strings.HasPrefix(url, "file://") {
		t.Errorf("%d steps of live helpers lost their claim and ran again:\n%s", len(lostLive), strings.Join(lostLive, "\n"))
	}
	slices.Sort(afterStart)
	slices.Sort(late)
	slices.Sort(failovers)
	// span is "lo..hi (median m)" of sorted durations, "none" if empty (a
	// kill reported above interrupted no step).
	span := func(d []time.Duration) string {
		if len(d) == 0 {
			return "none"
		}
		r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
		return fmt.Sprintf("%v..%v (median %v)", r(d[0]), r(d[len(d)-1]), r(d[len(d)/2]))
	}
	t.Logf("%d kills, failover %s, %d writers deposed; %d steps interrupted; ran again %s after their start, %s after they were due (lease %v); %d steps of live helpers lost their claim",
		kills, span(failovers), deposed, len(interrupted), span(afterStart), span(late), strandLease, len(lostLive))
	if len(failures) > 0 {
		var ws []string
		for _, tn := range writers {
			how := "killed"
			if tn.deposed {
				how = "deposed"
			}
			ws = append(ws, fmt.Sprintf("%s %s..%s %s", tn.helper, tn.from.Format("15:04:05.000"), tn.to.Format("15:04:05.000"), how))
		}
		t.Errorf("%d of %d interrupted steps ran again over %v after they were due:\n%s\nwriters: %s", len(failures), len(interrupted), slack.Round(time.Millisecond), strings.Join(failures, "\n"), strings.Join(ws, ", "))
	}
}

func tailLines(s string, n int) string {
	l := strings.SplitAfter(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "")
}

func TestStrandDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, c := range []struct {
		name       string
		ts         []tenure
		end, rerun float64
		want       float64
	}{
		{"writer up", []tenure{{from: at(0), to: at(20)}}, 5, 7, 5},
		{"none up, next later", []tenure{{from: at(0), to: at(3)}, {from: at(8), to: at(20)}}, 5, 9, 8},
		{"deposed before the rerun", []tenure{{from: at(0), to: at(12), deposed: true}, {from: at(11), to: at(30)}}, 5, 14, 11},
		{"deposed after the rerun", []tenure{{from: at(0), to: at(12), deposed: true}, {from: at(11), to: at(30)}}, 5, 7, 5},
		{"deposed twice", []tenure{{from: at(0), to: at(12), deposed: true}, {from: at(11), to: at(16), deposed: true}, {from: at(15), to: at(30)}}, 5, 18, 15},
		{"deposed, none after", []tenure{{from: at(0), to: at(12), deposed: true}}, 5, 14, 5},
		// A writer killed before strandRequeued requeued nothing: before
		// strandRequeueIn (0.5s) after the lease's end, or after the end
		// of the grace (1s) from its takeover if that is later.
		{"killed just after the lease's end", []tenure{{from: at(0), to: at(5.2)}, {from: at(8), to: at(30)}}, 5, 9, 8},
		{"killed after the requeue at the lease's end", []tenure{{from: at(0), to: at(5.6)}, {from: at(8), to: at(30)}}, 5, 9, 5},
		{"killed within the grace", []tenure{{from: at(0), to: at(3)}, {from: at(4.5), to: at(5.3)}, {from: at(9), to: at(30)}}, 5, 11, 9},
		{"killed before the requeue, twice", []tenure{{from: at(0), to: at(3)}, {from: at(4.5), to: at(5.8)}, {from: at(6.5), to: at(7.9)}, {from: at(9), to: at(30)}}, 5, 11, 9},
		{"killed after the second's requeue", []tenure{{from: at(0), to: at(3)}, {from: at(4.5), to: at(5.8)}, {from: at(6.5), to: at(8.1)}, {from: at(9), to: at(30)}}, 5, 11, 6.5},
		{"ran again before the kill", []tenure{{from: at(0), to: at(3)}, {from: at(4), to: at(5.3)}, {from: at(9), to: at(30)}}, 5, 5.2, 5},
	} {
		if got := strandDue(c.ts, at(c.end), at(c.rerun)); !got.Equal(at(c.want)) {
			t.Errorf("%s: due %v, want %v", c.name, got.Sub(t0), at(c.want).Sub(t0))
		}
	}
}
