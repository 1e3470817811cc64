package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Cluster is what a cluster bench (Config.Cluster) measured beyond
// Throughput: the cost of the calls to the writer, where the CPU went, and
// how long the store was unavailable when the writer died or closed.
type Cluster struct {
	// Members is the number of member processes that ran steps; the
	// writer ran none.
	Members int `json:"members"`
	// Calls counts the members' calls to the writer over the load
	// (StorageStats.ClusterCalls: commits, claims, reads, long-polls);
	// CallsPerTransition divides them by the transitions.
	Calls              int64   `json:"calls"`
	CallsPerTransition float64 `json:"calls_per_transition"`
	// WriterCPUCores and MembersCPUCores are the CPU time of the writer
	// and of all members over the load, divided by the elapsed time.
	WriterCPUCores  float64 `json:"writer_cpu_cores"`
	MembersCPUCores float64 `json:"members_cpu_cores"`
	// WriterCPUPerTransitionUS and MembersCPUPerTransitionUS are the
	// same CPU times divided by the transitions, in microseconds; their
	// sum is Throughput.CPUPerTransitionUS.
	WriterCPUPerTransitionUS  float64 `json:"writer_cpu_us_per_transition"`
	MembersCPUPerTransitionUS float64 `json:"members_cpu_us_per_transition"`
	// Peak heap and RSS of the writer, and the largest of a member.
	WriterPeakHeapBytes uint64 `json:"writer_peak_heap_bytes"`
	WriterPeakRSSBytes  uint64 `json:"writer_peak_rss_bytes"`
	MemberPeakHeapBytes uint64 `json:"member_peak_heap_bytes"`
	MemberPeakRSSBytes  uint64 `json:"member_peak_rss_bytes"`
	// Failover is the SIGKILL of the writer; Handover the Close of the
	// member that took over from it. Nil when not measured.
	Failover *Switch `json:"failover,omitempty"`
	Handover *Switch `json:"handover,omitempty"`
}

// Switch is one change of writer, seen from the surviving processes,
// each of which submits a one-step probe run back to back (1ms apart)
// and watches its own Role.
type Switch struct {
	// TakeoverMS runs from the event (SIGKILL sent; Close called) to the
	// moment a surviving process's Role became RoleWriter.
	TakeoverMS float64 `json:"takeover_ms"`
	// OutageMS is the longest interval between two consecutive
	// acknowledged probe Submits (by return time, all processes merged)
	// across the event: how long no Submit could be acknowledged.
	OutageMS float64 `json:"outage_ms"`
	// CloseMS (hand-over) is how long the old writer's Close took.
	CloseMS float64 `json:"close_ms,omitempty"`
	// ProbeAcks counts the acknowledged probes from 1s before the event
	// to 250ms after the takeover, and ProbeErrors the probes that failed
	// over the same window (e.g. with queue.ErrOutcomeUnknown), by error
	// message (the first 160 bytes) in ProbeErrorKinds.
	ProbeAcks       int            `json:"probe_acks"`
	ProbeErrors     int            `json:"probe_errors"`
	ProbeErrorKinds map[string]int `json:"probe_error_kinds,omitempty"`
}

func (c *Cluster) writeRows(row func(k, format string, args ...any)) {
	row("cluster", "1 writer (runs no steps) + %d members (each a Runtime with the configured concurrency)", c.Members)
	row("calls to the writer", "%d (%.3f per transition)", c.Calls, c.CallsPerTransition)
	row("CPU by role", "writer %.2f cores (%.1fµs per transition), members %.2f cores (%.1fµs)",
		c.WriterCPUCores, c.WriterCPUPerTransitionUS, c.MembersCPUCores, c.MembersCPUPerTransitionUS)
	row("peak RSS by role", "writer %s, largest member %s", fmtBytes(float64(c.WriterPeakRSSBytes)), fmtBytes(float64(c.MemberPeakRSSBytes)))
	sw := func(k string, s *Switch) {
		if s == nil {
			return
		}
		extra := ""
		if s.CloseMS > 0 {
			extra = fmt.Sprintf(", old writer's Close %s", fmtMS(s.CloseMS))
		}
		row(k, "new writer after %s, longest gap between acknowledged submits %s (%d acks, %d errors)%s",
			fmtMS(s.TakeoverMS), fmtMS(s.OutageMS), s.ProbeAcks, s.ProbeErrors, extra)
	}
	sw("failover (SIGKILL)", c.Failover)
	sw("hand-over (Close)", c.Handover)
}

// proc is one helper process, seen from the coordinator.
type proc struct {
	index  int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	exited chan struct{} // closed once Wait returned

	// Counters from its progress messages, read by the progress line.
	completed, executions, submitted atomic.Int64
	closed                           bool        // it reported msgClosed (coordinator goroutine)
	killed                           atomic.Bool // SIGKILLed on purpose
}

// event is a message from a helper, or its end (eof).
type event struct {
	p   *proc
	m   helperMsg
	eof bool
}

// coord runs the helper processes of one cluster bench.
type coord struct {
	exe    string
	spec   helperSpec // the common part
	events chan event
	done   chan struct{} // closed by stopAll: events are no longer read
	procs  []*proc
}

// tailBuffer keeps the last 8 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if n := len(t.b); n > 8<<10 {
		t.b = append(t.b[:0], t.b[n-8<<10:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// start starts helper spec and waits for it to report ready.
func (c *coord) start(ctx context.Context, spec helperSpec) (*proc, string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(c.exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
	p := &proc{index: spec.Index, cmd: cmd, stderr: &tailBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("bench: starting a cluster helper (%s): %w", c.exe, err)
	}
	c.procs = append(c.procs, p)
	go func() {
		dec := json.NewDecoder(stdout)
		for {
			var m helperMsg
			if err := dec.Decode(&m); err != nil {
				break
			}
			if m.Type == msgProgress {
				p.completed.Store(m.Completed)
				p.executions.Store(m.Executions)
				p.submitted.Store(m.Submitted)
				continue
			}
			select {
			case c.events <- event{p: p, m: m}:
			case <-c.done:
			}
		}
		_ = cmd.Wait()
		close(p.exited)
		select {
		case c.events <- event{p: p, eof: true}:
		case <-c.done:
		}
	}()
	var role string
	err = c.wait(ctx, time.Minute, "process "+fmt.Sprint(spec.Index)+" to open the store", func(ev event) (bool, error) {
		if ev.p == p && ev.m.Type == msgReady {
			role = ev.m.Role
			return true, nil
		}
		return false, nil
	})
	return p, role, err
}

// send sends a command to p.
func (c *coord) send(p *proc, cmd helperCmd) error {
	b, _ := json.Marshal(cmd)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("bench: helper %d: %w", p.index, err)
	}
	return nil
}

// wait handles events until done says so, a helper fails or ends
// unexpectedly, ctx ends or timeout passes (0: none). what describes the
// wait for the timeout's error.
func (c *coord) wait(ctx context.Context, timeout time.Duration, what string, done func(event) (bool, error)) error {
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	for {
		select {
		case ev := <-c.events:
			switch {
			case ev.m.Type == msgError:
				return fmt.Errorf("bench: cluster helper %d failed: %s", ev.p.index, ev.m.Err)
			case ev.m.Type == msgClosed:
				ev.p.closed = true
			}
			ok, err := done(ev)
			if err != nil || ok {
				return err
			}
			if ev.eof && !ev.p.closed && !ev.p.killed.Load() {
				return fmt.Errorf("bench: cluster helper %d exited (%v) unexpectedly: %s", ev.p.index, ev.p.cmd.ProcessState, ev.p.stderr)
			}
		case <-tc:
			return fmt.Errorf("%w after %v waiting for %s", errWaitTimeout, timeout, what)
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrIncomplete, context.Cause(ctx))
		}
	}
}

// errWaitTimeout: a wait's timeout passed.
var errWaitTimeout = errors.New("bench: cluster: timed out")

// kill SIGKILLs p and waits for it to exit.
func (p *proc) kill() {
	p.killed.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// pause handles events for d, failing only on a helper's failure.
func (c *coord) pause(ctx context.Context, d time.Duration) error {
	err := c.wait(ctx, d, "", func(event) (bool, error) { return false, nil })
	if errors.Is(err, errWaitTimeout) {
		return nil
	}
	return err
}

// stopAll ends every helper still running: closing its stdin makes it
// exit; after a grace period it is killed.
func (c *coord) stopAll() {
	for _, p := range c.procs {
		_ = p.stdin.Close()
	}
	close(c.done)
	grace := time.After(5 * time.Second)
	for _, p := range c.procs {
		select {
		case <-p.exited:
		case <-grace:
			p.kill()
		}
	}
}

// runCluster runs saturate or steady across a writer and cfg.Cluster
// member processes, then the failover and hand-over.
func runCluster(ctx context.Context, cfg Config, storeURL, nonce string, pr *progress) (res Throughput, cl Cluster, err error) {
	res = newThroughput(cfg)
	cl.Members = cfg.Cluster
	exe, err := os.Executable()
	if err != nil {
		return res, cl, fmt.Errorf("bench: cluster: finding this program to re-execute: %w", err)
	}
	cfg.Progress = nil
	c := &coord{exe: exe, events: make(chan event, 16), done: make(chan struct{}),
		spec: helperSpec{Store: storeURL, Nonce: nonce, Config: cfg}}
	// Events are drained by stopAll; the readers then exit with the pipes.
	defer c.stopAll()

	label := "cluster " + cfg.Scenario
	pr.set(func() string { return label + ": starting the writer and " + fmt.Sprint(cfg.Cluster) + " members" })
	ws := c.spec
	ws.Writer = true
	w, role, err := c.start(ctx, ws)
	if err != nil {
		return res, cl, err
	}
	if role != "writer" {
		return res, cl, fmt.Errorf("bench: cluster: the first process opened the store as a %s, not its writer: is another process using it?", role)
	}
	n := cfg.Cluster
	members := make([]*proc, n)
	for k := range n {
		ms := c.spec
		ms.Index, ms.Offset, ms.Stride = k+1, k, n
		ms.Count = (cfg.Runs - k + n - 1) / n
		ms.Submitters = max(cfg.Submitters/n+btoi(k < cfg.Submitters%n), 1)
		m, role, err := c.start(ctx, ms)
		if err != nil {
			return res, cl, err
		}
		if role != "member" {
			return res, cl, fmt.Errorf("bench: cluster: process %d opened the store as a %s, not a member", k+1, role)
		}
		members[k] = m
	}

	// The load.
	sum := func(f func(*proc) int64) (t int64) {
		for _, m := range members {
			t += f(m)
		}
		return t
	}
	start := time.Now()
	pr.set(func() string {
		return fmt.Sprintf("%s: submitted %d/%d  completed %d/%d  steps %d  %.1fs", label,
			sum(func(p *proc) int64 { return p.submitted.Load() }), cfg.Runs,
			sum(func(p *proc) int64 { return p.completed.Load() }), cfg.Runs,
			sum(func(p *proc) int64 { return p.executions.Load() }), time.Since(start).Seconds())
	})
	goCmd := helperCmd{Cmd: cmdGo, Epoch: start.UnixNano()}
	for _, p := range append([]*proc{w}, members...) {
		if err := c.send(p, goCmd); err != nil {
			return res, cl, err
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for sum(func(p *proc) int64 { return p.completed.Load() }) < int64(cfg.Runs) {
		select {
		case ev := <-c.events:
			if ev.m.Type == msgError {
				return res, cl, fmt.Errorf("bench: cluster member %d failed: %s", ev.p.index, ev.m.Err)
			}
			if ev.eof {
				return res, cl, fmt.Errorf("bench: cluster helper %d exited (%v) during the load: %s", ev.p.index, ev.p.cmd.ProcessState, ev.p.stderr)
			}
		case <-tick.C:
		case <-ctx.Done():
			return res, cl, fmt.Errorf("%w: %d of %d runs completed: %w", ErrIncomplete,
				sum(func(p *proc) int64 { return p.completed.Load() }), cfg.Runs, context.Cause(ctx))
		}
	}
	for _, m := range members {
		if err := c.send(m, helperCmd{Cmd: cmdStop}); err != nil {
			return res, cl, err
		}
	}
	loads := map[*proc]*memberLoad{}
	err = c.wait(ctx, time.Minute, "the members to stop", func(ev event) (bool, error) {
		if ev.m.Type == msgLoaded {
			loads[ev.p] = ev.m.Load
		}
		return len(loads) == n, nil
	})
	if err != nil {
		return res, cl, err
	}
	if err := c.send(w, helperCmd{Cmd: cmdStats}); err != nil {
		return res, cl, err
	}
	var wl *writerLoad
	err = c.wait(ctx, time.Minute, "the writer's counters", func(ev event) (bool, error) {
		if ev.p == w && ev.m.Type == msgStats {
			wl = ev.m.Writer
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return res, cl, err
	}
	merge(&res, &cl, cfg, nonce, members, loads, wl)
	if res.RunsCompleted < int64(cfg.Runs) {
		return res, cl, fmt.Errorf("bench: cluster: %d of %d runs completed", res.RunsCompleted, cfg.Runs)
	}
	if res.RunsFailed > 0 {
		return res, cl, fmt.Errorf("bench: %d runs did not succeed", res.RunsFailed)
	}
	if cfg.NoFailover {
		return res, cl, c.closeAll(ctx, members)
	}
	cl.Failover, cl.Handover, err = c.failover(ctx, w, members, pr, label)
	return res, cl, err
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// merge computes the load's figures from the records of every process.
func merge(res *Throughput, cl *Cluster, cfg Config, nonce string, members []*proc, loads map[*proc]*memberLoad, wl *writerLoad) {
	steps := cfg.Steps
	tr := newTracker("bench-"+nonce+"-", cfg.Runs, steps, cfg.StepDuration, true)
	starts := make([]int64, cfg.Runs*steps)
	returns := make([]int64, cfg.Runs*steps)
	firstNonZero := func(cur, v int64) int64 {
		if v > 0 && (cur == 0 || v < cur) {
			return v
		}
		return cur
	}
	var out driveOut
	var memberCPU float64
	for _, m := range members {
		l := loads[m]
		for i := range tr.runs {
			rs := &tr.runs[i]
			if l.SubmitDur[i] > 0 {
				rs.arrival.Store(l.Arrival[i])
				if i < len(l.Due) {
					rs.due.Store(l.Due[i])
				}
				rs.submitDur.Store(l.SubmitDur[i])
			}
			rs.done.Store(firstNonZero(rs.done.Load(), l.Done[i]))
		}
		for k := range starts {
			starts[k] = firstNonZero(starts[k], l.Starts[k])
			returns[k] = max(returns[k], l.Returns[k])
		}
		tr.executions.Add(l.Executions)
		tr.failed.Add(l.Failed)
		out.submitted += l.Submitted
		if l.SubmitStart > 0 && (out.submitStart == 0 || l.SubmitStart < out.submitStart) {
			out.submitStart = l.SubmitStart
		}
		out.submitEnd = max(out.submitEnd, l.SubmitEnd)
		cl.Calls += l.Calls
		memberCPU += l.CPU
		cl.MemberPeakHeapBytes = max(cl.MemberPeakHeapBytes, l.PeakHeap)
		cl.MemberPeakRSSBytes = max(cl.MemberPeakRSSBytes, l.PeakRSS)
	}
	var last int64
	for i := range tr.runs {
		rs := &tr.runs[i]
		base := i * steps
		if s0 := starts[base]; s0 > 0 {
			rs.step0.Store(s0)
		}
		for s := 1; s < steps; s++ {
			if a, b := returns[base+s-1], starts[base+s]; a > 0 && b > 0 {
				rs.gaps[s].Store(max(b-a, 1))
			}
		}
		end := returns[base+steps-1]
		rs.lastReturn.Store(end)
		if d := rs.done.Load(); d > 0 {
			tr.completed.Add(1)
			last = max(last, d)
			if end > 0 {
				rs.hookDelay.Store(max(d-end, 1))
			}
		}
	}
	tr.lastDone.Store(last)
	out.cpu = memberCPU + wl.CPU
	out.fill(res, tr, cfg)
	res.Storage, res.Engine = wl.Storage, wl.Engine
	res.PerTransition = res.Storage.per(float64(res.Transitions))
	res.derive()
	if res.Transitions > 0 {
		cl.CallsPerTransition = float64(cl.Calls) / float64(res.Transitions)
		cl.WriterCPUPerTransitionUS = wl.CPU / float64(res.Transitions) * 1e6
		cl.MembersCPUPerTransitionUS = memberCPU / float64(res.Transitions) * 1e6
	}
	if res.ElapsedS > 0 {
		cl.WriterCPUCores = wl.CPU / res.ElapsedS
		cl.MembersCPUCores = memberCPU / res.ElapsedS
	}
	cl.WriterPeakHeapBytes, cl.WriterPeakRSSBytes = wl.PeakHeap, wl.PeakRSS
}

// closeAll closes members (their Runtimes were stopped) and then the
// writer, if still running.
func (c *coord) closeAll(ctx context.Context, procs []*proc) error {
	var writer *proc
	for _, p := range c.procs {
		if !slices.Contains(procs, p) && !p.killed.Load() && !p.closed {
			writer = p
		}
	}
	for _, group := range [][]*proc{procs, {writer}} {
		want := 0
		for _, p := range group {
			if p == nil || p.closed || p.killed.Load() {
				continue
			}
			if err := c.send(p, helperCmd{Cmd: cmdClose}); err != nil {
				return err
			}
			want++
		}
		got := 0
		if want == 0 {
			continue
		}
		if err := c.wait(ctx, time.Minute, "the helpers to close", func(ev event) (bool, error) {
			if ev.m.Type == msgClosed && slices.Contains(group, ev.p) {
				got++
			}
			return got == want, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// eventGap is the time left between the start of the probes, the
// failover and the hand-over: more than the window outage looks at after
// a takeover (250ms) plus before an event (1s).
const eventGap = 1500 * time.Millisecond

// failover measures a failover (SIGKILL of the writer w) and then a
// hand-over (Close of the process that took over), with every other
// process probing. With a single member, a spare member (no load) joins
// first, so that one process is left to take over at the hand-over.
func (c *coord) failover(ctx context.Context, w *proc, members []*proc, pr *progress, label string) (fo, ho *Switch, err error) {
	cands := slices.Clone(members)
	if len(cands) < 2 {
		sp := c.spec
		sp.Index = len(c.procs)
		p, role, err := c.start(ctx, sp)
		if err != nil {
			return nil, nil, err
		}
		if role != "member" {
			return nil, nil, fmt.Errorf("bench: cluster: the spare opened the store as a %s", role)
		}
		cands = append(cands, p)
	}
	pr.set(func() string { return label + ": failover: probing" })
	for _, p := range cands {
		if err := c.send(p, helperCmd{Cmd: cmdProbe}); err != nil {
			return nil, nil, err
		}
	}
	probing := 0
	if err := c.wait(ctx, time.Minute, "the probes to start", func(ev event) (bool, error) {
		if ev.m.Type == msgProbing {
			probing++
		}
		return probing == len(cands), nil
	}); err != nil {
		return nil, nil, err
	}
	if err := c.pause(ctx, eventGap); err != nil {
		return nil, nil, err
	}

	// Failover: SIGKILL the writer; a member takes over.
	pr.set(func() string { return label + ": failover: writer killed, waiting for a new one" })
	killAt := time.Now().UnixNano()
	w.kill()
	var next *proc
	var nextAt int64
	if err := c.wait(ctx, time.Minute, "a member to take over from the killed writer", func(ev event) (bool, error) {
		if ev.m.Type == msgWriter {
			next, nextAt = ev.p, ev.m.At
			return true, nil
		}
		return false, nil
	}); err != nil {
		return nil, nil, err
	}
	if err := c.pause(ctx, eventGap); err != nil {
		return nil, nil, err
	}

	// Hand-over: Close the new writer; another member takes over.
	pr.set(func() string { return label + ": hand-over: writer closing, waiting for a new one" })
	if err := c.send(next, helperCmd{Cmd: cmdClose}); err != nil {
		return nil, nil, err
	}
	var closed *probeReport
	var third *proc
	var thirdAt int64
	if err := c.wait(ctx, time.Minute, "the hand-over", func(ev event) (bool, error) {
		switch {
		case ev.p == next && ev.m.Type == msgClosed:
			closed = ev.m.Probe
		case ev.p != next && ev.m.Type == msgWriter:
			third, thirdAt = ev.p, ev.m.At
		}
		return closed != nil && third != nil, nil
	}); err != nil {
		return nil, nil, err
	}
	if err := c.pause(ctx, eventGap); err != nil {
		return nil, nil, err
	}

	// Collect every survivor's probes, closing the members first and the
	// writer last, as a service would stop.
	pr.set(func() string { return label + ": closing" })
	reports := []*probeReport{closed}
	for _, group := range [][]*proc{slices.DeleteFunc(slices.Clone(cands), func(p *proc) bool { return p == next || p == third }), {third}} {
		for _, p := range group {
			if err := c.send(p, helperCmd{Cmd: cmdClose}); err != nil {
				return nil, nil, err
			}
		}
		got := 0
		if len(group) == 0 {
			continue
		}
		if err := c.wait(ctx, time.Minute, "the members to close", func(ev event) (bool, error) {
			if ev.m.Type == msgClosed && slices.Contains(group, ev.p) {
				reports = append(reports, ev.m.Probe)
				got++
			}
			return got == len(group), nil
		}); err != nil {
			return nil, nil, err
		}
	}
	var acks [][2]int64
	var errs []probeErr
	for _, r := range reports {
		acks = append(acks, r.Acks...)
		errs = append(errs, r.Errors...)
	}
	slices.SortFunc(acks, func(a, b [2]int64) int { return cmp.Compare(a[1], b[1]) })
	fo = outage(acks, errs, killAt, nextAt)
	ho = outage(acks, errs, closed.CloseStart, thirdAt)
	ho.CloseMS = float64(closed.CloseEnd-closed.CloseStart) / 1e6
	return fo, ho, nil
}

// outage measures a change of writer at event, taken over at takeover,
// from the acknowledged probes (sorted by return) and the failed ones.
func outage(acks [][2]int64, errs []probeErr, event, takeover int64) *Switch {
	s := &Switch{TakeoverMS: float64(takeover-event) / 1e6}
	from, to := event-int64(time.Second), max(takeover, event)+int64(250*time.Millisecond)
	for _, e := range errs {
		if e.At >= from && e.At <= to {
			if s.ProbeErrorKinds == nil {
				s.ProbeErrorKinds = map[string]int{}
			}
			s.ProbeErrors++
			msg := e.Msg
			if len(msg) > 160 {
				msg = msg[:160]
			}
			s.ProbeErrorKinds[msg]++
		}
	}
	prev := int64(0)
	for _, a := range acks {
		end := a[1]
		if end < from || end > to {
			if end > to {
				break
			}
			continue
		}
		s.ProbeAcks++
		if end > event {
			if prev == 0 {
				prev = event // no ack before the event in the window
			}
			s.OutageMS = max(s.OutageMS, float64(end-prev)/1e6)
		}
		prev = end
	}
	return s
}
