package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/queue"
	swruntime "github.com/stepwell/stepwell/runtime"
)

// helperEnv names the environment variable that makes a process a helper
// of a cluster bench: its value is the helperSpec, as JSON.
const helperEnv = "STEPWELL_BENCH_HELPER"

// profileEnv, when set to a directory, makes every helper write a CPU
// profile of the load phase there: writer.pprof, member-N.pprof.
const profileEnv = "STEPWELL_BENCH_CPUPROFILE_DIR"

// Helper runs this process as a helper of a cluster bench if the
// environment asks for it (a cluster bench re-executes its own binary with
// the variable set), and then returns its exit code and true; otherwise
// it returns false at once. The main function of a program that runs
// cluster benches (the stepwell command, a test binary's TestMain) calls
// it first:
//
//	if code, ok := bench.Helper(); ok {
//		os.Exit(code)
//	}
func Helper() (code int, ok bool) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		return 0, false
	}
	var spec helperSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "stepwell bench helper: %s: %v\n", helperEnv, err)
		return 2, true
	}
	h := &helper{spec: spec, enc: json.NewEncoder(os.Stdout)}
	if err := h.run(os.Stdin); err != nil {
		h.send(helperMsg{Type: msgError, Err: err.Error()})
		fmt.Fprintf(os.Stderr, "stepwell bench helper %d: %v\n", spec.Index, err)
		return 1, true
	}
	return 0, true
}

// helperSpec is what a helper process is told at its start.
type helperSpec struct {
	Index  int  // 0: the writer
	Writer bool // must become the writer; runs no steps
	Store  string
	Nonce  string
	Config Config
	// The member's runs are Offset + j*Stride for j < Count, submitted
	// by Submitters goroutines (saturate) or at Rate (steady).
	Offset, Stride, Count int
	Submitters            int
}

// Commands, coordinator -> helper (one JSON object each on stdin).
const (
	cmdGo    = "go"    // start the load (members) or the measurement window (writer)
	cmdStop  = "stop"  // members: stop the Runtime and report the load
	cmdStats = "stats" // writer: report the window's counters
	cmdProbe = "probe" // start a Runtime and the probe submits; watch the role
	cmdClose = "close" // stop everything, close the store, report and exit
)

type helperCmd struct {
	Cmd string `json:"cmd"`
	// Epoch (go) is the time origin of the trackers, in Unix ns: every
	// process records times since the same instant, on the wall clock.
	Epoch int64 `json:"epoch,omitempty"`
}

// Messages, helper -> coordinator (one JSON object each on stdout).
const (
	msgReady    = "ready"    // the store is open; Role says as what
	msgProgress = "progress" // Completed, Executions, Submitted so far
	msgLoaded   = "loaded"   // a member's load report
	msgStats    = "stats"    // the writer's counters
	msgProbing  = "probing"  // probes started
	msgWriter   = "writer"   // this process became the writer, At
	msgClosed   = "closed"   // closed; Probe holds the probes
	msgError    = "error"    // Err: the helper failed and exits
)

type helperMsg struct {
	Type       string       `json:"type"`
	Role       string       `json:"role,omitempty"`
	Completed  int64        `json:"completed,omitempty"`
	Executions int64        `json:"executions,omitempty"`
	Submitted  int64        `json:"submitted,omitempty"`
	At         int64        `json:"at,omitempty"`
	Load       *memberLoad  `json:"load,omitempty"`
	Writer     *writerLoad  `json:"writer,omitempty"`
	Probe      *probeReport `json:"probe,omitempty"`
	Err        string       `json:"err,omitempty"`
}

// memberLoad is what a member recorded of the load. Times are tracker
// times (ns since the shared epoch; 0: not in this process).
type memberLoad struct {
	Arrival   []int64 `json:"arrival"`    // per run: its arrival, if submitted here
	Due       []int64 `json:"due"`        // per run: when it was due (steady), if submitted here
	SubmitDur []int64 `json:"submit_dur"` // per run: its Submit's duration
	Done      []int64 `json:"done"`       // per run: its first hook call here
	Starts    []int64 `json:"starts"`     // per run*steps+step: first attempt's start here
	Returns   []int64 `json:"returns"`    // per run*steps+step: return here

	Executions  int64   `json:"executions"`
	Failed      int64   `json:"failed"`
	Submitted   int64   `json:"submitted"`
	SubmitStart int64   `json:"submit_start"`
	SubmitEnd   int64   `json:"submit_end"`
	Calls       int64   `json:"calls"` // StorageStats.ClusterCalls over the load
	Puts        int64   `json:"puts"`  // object-store PUTs of its own (0 for a member)
	CPU         float64 `json:"cpu_s"`
	PeakHeap    uint64  `json:"peak_heap"`
	PeakRSS     uint64  `json:"peak_rss"`
	Role        string  `json:"role"` // at the end of the load
}

// writerLoad is the writer's counters over the load.
type writerLoad struct {
	Storage  Requests `json:"storage"`
	Engine   Engine   `json:"engine"`
	CPU      float64  `json:"cpu_s"`
	PeakHeap uint64   `json:"peak_heap"`
	PeakRSS  uint64   `json:"peak_rss"`
}

// probeErr is a failed probe Submit: its return (Unix ns) and error.
type probeErr struct {
	At  int64  `json:"at"`
	Msg string `json:"msg"`
}

// probeReport is what a helper saw in the failover phase. Times are Unix
// ns.
type probeReport struct {
	Acks       [][2]int64 `json:"acks"`   // acknowledged Submits: call, return
	Errors     []probeErr `json:"errors"` // failed Submits
	CloseStart int64      `json:"close_start"`
	CloseEnd   int64      `json:"close_end"`
}

type helper struct {
	spec helperSpec
	mu   sync.Mutex // serializes send
	enc  *json.Encoder
	q    *queue.Queue
	mem  *memSampler

	// The load (members).
	tr      *tracker
	sub     *submitter
	load    *running
	subDone chan struct{}
	stopSub context.CancelFunc
	// loadStart is when the member started submitting (tracker time).
	loadStart int64
	before    queue.StorageStats
	cpu0      float64
	prof      *os.File

	// The failover phase.
	probeRun  *running
	stopProbe context.CancelFunc
	probeWG   sync.WaitGroup
	pmu       sync.Mutex
	probes    probeReport
}

func (h *helper) send(m helperMsg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.enc.Encode(m)
}

// run opens the store and obeys the coordinator until close. If stdin
// ends first (the coordinator died), the process exits at once.
func (h *helper) run(stdin io.Reader) error {
	h.mem = startMemSampler()
	resetPeakRSS()
	cmds := make(chan helperCmd)
	go func() {
		dec := json.NewDecoder(stdin)
		for {
			var c helperCmd
			if err := dec.Decode(&c); err != nil {
				os.Exit(3) // nobody to report to
			}
			cmds <- c
		}
	}()
	ctx := context.Background()
	q, err := openStore(ctx, h.spec.Store, queue.WithCluster(queue.ClusterConfig{Listen: "127.0.0.1:0"}))
	if err != nil {
		return err
	}
	h.q = q
	h.send(helperMsg{Type: msgReady, Role: q.Role().String()})
	for c := range cmds {
		var err error
		switch c.Cmd {
		case cmdGo:
			err = h.start(ctx, c.Epoch)
		case cmdStop:
			err = h.stopLoad()
		case cmdStats:
			h.stats()
		case cmdProbe:
			err = h.startProbes(ctx)
		case cmdClose:
			return h.close(ctx)
		default:
			err = fmt.Errorf("unknown command %q", c.Cmd)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (h *helper) startProfile(name string) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err == nil && pprof.StartCPUProfile(f) == nil {
		h.prof = f
	}
}

func (h *helper) stopProfile() {
	if h.prof != nil {
		pprof.StopCPUProfile()
		h.prof.Close()
		h.prof = nil
	}
}

// start begins the load window: the writer notes its counters; a member
// starts its Runtime and submits its runs.
func (h *helper) start(ctx context.Context, epoch int64) error {
	h.before, h.cpu0 = h.q.StorageStats(), cpuTime()
	cfg := h.spec.Config
	if h.spec.Writer {
		h.startProfile("writer")
		return nil
	}
	h.startProfile("member-" + strconv.Itoa(h.spec.Index))
	tr := newTracker("bench-"+h.spec.Nonce+"-", cfg.Runs, cfg.Steps, cfg.StepDuration, true)
	tr.start = time.Unix(0, epoch) // the wall clock: the same origin in every process
	tr.recordSteps()
	rt, err := newRuntime(h.q, tr, h.spec.Nonce, cfg)
	if err != nil {
		return err
	}
	h.tr = tr
	h.load = startRuntime(ctx, rt)
	subCtx, cancel := context.WithCancel(ctx)
	h.stopSub = cancel
	h.sub = &submitter{rt: rt, tr: tr, payload: makePayload(cfg.PayloadSize), cancel: cancel, conc: hotKey(cfg),
		offset: h.spec.Offset, stride: h.spec.Stride}
	h.subDone = make(chan struct{})
	start := tr.now()
	h.loadStart = start
	go func() {
		defer close(h.subDone)
		if cfg.Scenario == ScenarioSteady {
			h.sub.openLoop(subCtx, h.spec.Count, cfg.Rate, start)
		} else {
			h.sub.closedLoop(subCtx, h.spec.Count, h.spec.Submitters)
		}
	}()
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				h.send(helperMsg{Type: msgProgress, Completed: tr.completed.Load(),
					Executions: tr.executions.Load(), Submitted: h.sub.submitted.Load()})
			case <-subCtx.Done():
				if err := h.sub.err; err != nil { // a Submit failed (set before the cancel)
					h.send(helperMsg{Type: msgError, Err: err.Error()})
				}
				return
			}
		}
	}()
	return nil
}

// stopLoad stops a member's submitters and Runtime and reports the load.
func (h *helper) stopLoad() error {
	if h.tr == nil {
		return errors.New("stop before go")
	}
	h.stopSub()
	<-h.subDone
	err := h.load.wait()
	after, cpu := h.q.StorageStats(), cpuTime()
	h.stopProfile()
	tr := h.tr
	l := &memberLoad{
		Arrival: make([]int64, len(tr.runs)), Due: make([]int64, len(tr.runs)), SubmitDur: make([]int64, len(tr.runs)), Done: make([]int64, len(tr.runs)),
		Starts: loadAll(tr.starts), Returns: loadAll(tr.returns),
		Executions: tr.executions.Load(), Failed: tr.failed.Load(), Submitted: h.sub.submitted.Load(),
		SubmitStart: h.loadStart, SubmitEnd: h.sub.lastEnd.Load(),
		Calls: after.ClusterCalls - h.before.ClusterCalls, Puts: after.Puts - h.before.Puts,
		CPU: cpu - h.cpu0, PeakHeap: h.mem.peakNow(), PeakRSS: peakRSS(), Role: h.q.Role().String(),
	}
	for i := range tr.runs {
		rs := &tr.runs[i]
		if rs.submitDur.Load() > 0 { // submitted here
			l.Arrival[i], l.Due[i], l.SubmitDur[i] = rs.arrival.Load(), rs.due.Load(), rs.submitDur.Load()
		}
		l.Done[i] = rs.done.Load()
	}
	h.send(helperMsg{Type: msgLoaded, Load: l})
	if err != nil {
		return err
	}
	return h.sub.err
}

func loadAll(a []atomic.Int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = a[i].Load()
	}
	return out
}

// stats reports the writer's counters over the load window.
func (h *helper) stats() {
	after, cpu := h.q.StorageStats(), cpuTime()
	h.stopProfile()
	w := &writerLoad{CPU: cpu - h.cpu0, PeakHeap: h.mem.peakNow(), PeakRSS: peakRSS()}
	w.Storage, w.Engine = delta(after, h.before)
	h.send(helperMsg{Type: msgStats, Writer: w})
}

// probeGap is the pause between a probe's Submits.
const probeGap = time.Millisecond

// startProbes starts a Runtime (the probe runs' one step each runs
// wherever it is claimed), a goroutine that submits back to back with
// probeGap between Submits, and one that reports the moment this process
// becomes the writer.
func (h *helper) startProbes(ctx context.Context) error {
	cfg := h.spec.Config
	cfg.Steps = 1
	tr := newTracker("probe-"+h.spec.Nonce+"-", 0, 1, 0, false)
	rt, err := newRuntime(h.q, tr, h.spec.Nonce, cfg)
	if err != nil {
		return err
	}
	h.probeRun = startRuntime(ctx, rt)
	pctx, cancel := context.WithCancel(ctx)
	h.stopProbe = cancel
	payload := makePayload(16)
	h.probeWG.Add(2)
	go func() {
		defer h.probeWG.Done()
		for i := 0; pctx.Err() == nil; i++ {
			sctx, cancel := context.WithTimeout(pctx, time.Minute)
			t0 := time.Now()
			_, err := rt.Submit(sctx, swruntime.RunSpec{
				RunID: "probe-" + h.spec.Nonce + "-" + strconv.Itoa(h.spec.Index) + "-" + strconv.Itoa(i), Input: payload})
			t1 := time.Now()
			cancel()
			h.pmu.Lock()
			switch {
			case err == nil:
				h.probes.Acks = append(h.probes.Acks, [2]int64{t0.UnixNano(), t1.UnixNano()})
			case pctx.Err() == nil:
				h.probes.Errors = append(h.probes.Errors, probeErr{At: t1.UnixNano(), Msg: err.Error()})
			}
			h.pmu.Unlock()
			select {
			case <-time.After(probeGap):
			case <-pctx.Done():
			}
		}
	}()
	go func() {
		defer h.probeWG.Done()
		was := h.q.Role()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-pctx.Done():
				return
			}
			if r := h.q.Role(); r != was {
				was = r
				if r == queue.RoleWriter {
					h.send(helperMsg{Type: msgWriter, At: time.Now().UnixNano()})
				}
			}
		}
	}()
	h.send(helperMsg{Type: msgProbing, Role: h.q.Role().String()})
	return nil
}

// close stops the probes and Runtimes, closes the store and reports.
func (h *helper) close(ctx context.Context) error {
	if h.stopProbe != nil {
		h.stopProbe()
		h.probeWG.Wait()
	}
	var errs []error
	if h.probeRun != nil {
		errs = append(errs, h.probeRun.wait())
	}
	if h.load != nil {
		h.stopSub()
		errs = append(errs, h.load.wait())
	}
	h.stopProfile()
	h.pmu.Lock()
	rep := h.probes
	h.pmu.Unlock()
	rep.CloseStart = time.Now().UnixNano()
	errs = append(errs, h.q.Close(ctx))
	rep.CloseEnd = time.Now().UnixNano()
	h.send(helperMsg{Type: msgClosed, Probe: &rep})
	return errors.Join(errs...)
}
