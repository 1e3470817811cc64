package bench

import (
	"context"
	"fmt"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/queue"
	swruntime "github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// tracker is the workload: the Runner of every step, the terminal Hook,
// and the record of when things happened to each run. Times are
// nanoseconds since start on the monotonic clock; 0 means "not yet", so a
// recorded time is at least 1.
type tracker struct {
	start  time.Time
	prefix string // run IDs are prefix + index
	steps  uint32
	work   time.Duration
	runs   []runState // nil: record nothing per run

	want       int64
	executions atomic.Int64
	completed  atomic.Int64
	failed     atomic.Int64
	lastDone   atomic.Int64
	allDone    chan struct{}

	firstOnce sync.Once
	firstStep chan struct{}
	firstAt   atomic.Int64

	// starts and returns, when set (cluster members, whose runs move
	// between processes), record each step's first RunStep call and its
	// last return, at [run*steps+step]: the coordinator derives the gaps
	// from the records of every process.
	starts, returns []atomic.Int64
}

type runState struct {
	arrival    atomic.Int64 // the Submit call
	due        atomic.Int64 // steady: when the arrival was due (its Submit call is later by the generator's lag)
	submitDur  atomic.Int64
	step0      atomic.Int64 // step 0's first RunStep call
	lastReturn atomic.Int64 // the last RunStep return
	done       atomic.Int64 // first terminal hook call
	hookDelay  atomic.Int64
	gaps       []atomic.Int64 // gaps[n], n >= 1: step n-1 return -> step n start
}

func newTracker(prefix string, runs, steps int, work time.Duration, perRun bool) *tracker {
	t := &tracker{
		start: time.Now(), prefix: prefix, steps: uint32(steps), work: work,
		want: int64(runs), allDone: make(chan struct{}), firstStep: make(chan struct{}),
	}
	if runs == 0 {
		close(t.allDone)
	}
	if perRun {
		t.runs = make([]runState, runs)
		if steps > 1 {
			gaps := make([]atomic.Int64, runs*steps)
			for i := range t.runs {
				t.runs[i].gaps = gaps[i*steps : (i+1)*steps : (i+1)*steps]
			}
		}
	}
	return t
}

func (t *tracker) now() int64 { return max(int64(time.Since(t.start)), 1) }

func (t *tracker) runID(i int) string { return t.prefix + strconv.Itoa(i) }

func (t *tracker) lookup(runID string) *runState {
	i, ok := t.index(runID)
	if !ok {
		return nil
	}
	return &t.runs[i]
}

// index returns the number of a run of this tracker.
func (t *tracker) index(runID string) (int, bool) {
	s, ok := strings.CutPrefix(runID, t.prefix)
	if !ok || t.runs == nil {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(t.runs) {
		return 0, false
	}
	return i, true
}

// recordSteps makes t record every step's start and return (see starts).
func (t *tracker) recordSteps() {
	t.starts = make([]atomic.Int64, len(t.runs)*int(t.steps))
	t.returns = make([]atomic.Int64, len(t.runs)*int(t.steps))
}

// RunStep sleeps the step's work, then continues with the payload, or
// succeeds after the last step.
func (t *tracker) RunStep(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	now := t.now()
	t.executions.Add(1)
	t.firstOnce.Do(func() { t.firstAt.Store(now); close(t.firstStep) })
	rs := t.lookup(s.RunID)
	if rs != nil && s.Attempt == 1 {
		if s.Number == 0 {
			rs.step0.CompareAndSwap(0, now)
		} else if int(s.Number) < len(rs.gaps) {
			if prev := rs.lastReturn.Load(); prev > 0 {
				rs.gaps[s.Number].CompareAndSwap(0, max(now-prev, 1))
			}
		}
	}
	at := -1 // the step's place in starts and returns
	if i, ok := t.index(s.RunID); ok && t.starts != nil && s.Number < t.steps {
		at = i*int(t.steps) + int(s.Number)
		if s.Attempt == 1 {
			t.starts[at].CompareAndSwap(0, now)
		}
	}
	if t.work > 0 {
		timer := time.NewTimer(t.work)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return steprunner.Outcome{}, context.Cause(ctx)
		}
	}
	if rs != nil {
		end := t.now()
		rs.lastReturn.Store(end)
		if at >= 0 {
			t.returns[at].Store(end)
		}
	}
	if s.Number+1 >= t.steps {
		return steprunner.Succeed(s.Payload), nil
	}
	return steprunner.Continue(s.Payload), nil
}

// OnTermination records the first notification of each run.
func (t *tracker) OnTermination(_ context.Context, o terminal.Outcome) error {
	now := t.now()
	if t.runs != nil {
		rs := t.lookup(o.RunID)
		if rs == nil || !rs.done.CompareAndSwap(0, now) {
			return nil // not ours, or a repeated delivery
		}
		if last := rs.lastReturn.Load(); last > 0 {
			rs.hookDelay.Store(max(now-last, 1))
		}
	}
	if o.Status != terminal.Succeeded {
		t.failed.Add(1)
	}
	for {
		cur := t.lastDone.Load()
		if now <= cur || t.lastDone.CompareAndSwap(cur, now) {
			break
		}
	}
	if t.completed.Add(1) == t.want {
		close(t.allDone)
	}
	return nil
}

// queueNames are the bench's own step and notification queues.
func queueNames(nonce string) (steps, notify string) {
	return "bench-" + nonce + "-steps", "bench-" + nonce + "-notify"
}

func newRuntime(q *queue.Queue, tr *tracker, nonce string, cfg Config) (*swruntime.Runtime, error) {
	steps, notify := queueNames(nonce)
	rt, err := swruntime.New(q, tr, tr,
		swruntime.WithMaxConcurrentSteps(cfg.Concurrency), swruntime.WithNotifyConcurrency(cfg.NotifyConcurrency),
		swruntime.WithQueueName(steps), swruntime.WithNotifyQueueName(notify))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return rt, nil
}

// running is a Runtime.Run in the background.
type running struct {
	stop func()
	done chan error
}

func startRuntime(ctx context.Context, rt *swruntime.Runtime) *running {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &running{stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- rt.Run(rctx) }()
	return r
}

// wait stops the Runtime and waits for it to drain.
func (r *running) wait() error {
	r.stop()
	err := <-r.done
	r.done <- err // for a second wait
	if err != nil {
		return fmt.Errorf("bench: runtime: %w", err)
	}
	return nil
}

func makePayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// submitter submits the runs of a tracker.
type submitter struct {
	rt      *swruntime.Runtime
	tr      *tracker
	payload []byte
	conc    swruntime.Concurrency // every run's (HotKeyLimit)
	// The submitter's runs are offset, offset+stride, ... (a cluster
	// member submits its share of the runs); stride 0 means 1.
	offset, stride int
	submitted      atomic.Int64
	lastEnd        atomic.Int64
	errOnce        sync.Once
	err            error
	cancel         context.CancelFunc
}

// submit submits run i, which was due at due (0: at once, closed loop).
// The run arrives when Submit is called.
func (s *submitter) submit(ctx context.Context, i int, due int64) {
	var rs *runState
	t0 := s.tr.now()
	if s.tr.runs != nil {
		rs = &s.tr.runs[i]
		rs.arrival.Store(t0)
		rs.due.Store(due)
	}
	_, err := s.rt.Submit(ctx, swruntime.RunSpec{RunID: s.tr.runID(i), Input: s.payload, Concurrency: s.conc})
	end := s.tr.now()
	if err != nil {
		if ctx.Err() == nil {
			s.errOnce.Do(func() { s.err = fmt.Errorf("bench: submitting run %d: %w", i, err); s.cancel() })
		}
		return
	}
	if rs != nil {
		rs.submitDur.Store(end - t0)
	}
	s.submitted.Add(1)
	for {
		cur := s.lastEnd.Load()
		if end <= cur || s.lastEnd.CompareAndSwap(cur, end) {
			break
		}
	}
}

// run is the number of the submitter's j-th run.
func (s *submitter) run(j int) int { return s.offset + j*max(s.stride, 1) }

// closedLoop submits the submitter's runs 0..n-1 from k goroutines, each
// submitting its next run once its previous Submit returned. It returns
// when all were submitted or ctx ended.
func (s *submitter) closedLoop(ctx context.Context, n, k int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(k, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				j := int(next.Add(1) - 1)
				if j >= n {
					return
				}
				s.submit(ctx, s.run(j), 0)
			}
		}()
	}
	wg.Wait()
}

// openLoop submits the submitter's runs 0..n-1, run i at start + i/rate,
// each on its own goroutine.
func (s *submitter) openLoop(ctx context.Context, n int, rate float64, start int64) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for j := 0; j < n; j++ {
		i := s.run(j)
		due := start + int64(float64(i)/rate*1e9)
		if d := time.Duration(due - s.tr.now()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.submit(ctx, i, due)
		}()
	}
}

// hotKey is the Concurrency of cfg's runs (HotKeyLimit).
func hotKey(cfg Config) swruntime.Concurrency {
	if cfg.HotKeyLimit <= 0 {
		return swruntime.Concurrency{}
	}
	return swruntime.Concurrency{Key: "bench-hot", Limit: cfg.HotKeyLimit}
}

// newThroughput is the result of a saturate or steady run of cfg before
// it ran: the workload's description.
func newThroughput(cfg Config) Throughput {
	res := Throughput{
		Runs: cfg.Runs, StepsPerRun: cfg.Steps, PayloadBytes: cfg.PayloadSize,
		StepDurationMS: float64(cfg.StepDuration) / 1e6, Concurrency: cfg.Concurrency,
		NotifyConcurrency: cfg.NotifyConcurrency, HotKeyLimit: cfg.HotKeyLimit,
	}
	if cfg.Scenario == ScenarioSteady {
		res.OfferedRunsPerS = cfg.Rate
	} else {
		res.Submitters = cfg.Submitters
	}
	return res
}

// runLoad runs saturate or steady.
func runLoad(ctx context.Context, cfg Config, storeURL, nonce string, pr *progress) (res Throughput, err error) {
	res = newThroughput(cfg)
	steady := cfg.Scenario == ScenarioSteady
	q, err := openStore(ctx, storeURL)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := q.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = fmt.Errorf("bench: closing the store: %w", cerr)
		}
	}()
	tr := newTracker("bench-"+nonce+"-", cfg.Runs, cfg.Steps, cfg.StepDuration, true)
	rt, err := newRuntime(q, tr, nonce, cfg)
	if err != nil {
		return res, err
	}
	out, err := drive(ctx, q, rt, tr, cfg, steady, pr)
	out.fill(&res, tr, cfg)
	return res, err
}

// driveOut is what drive measured.
type driveOut struct {
	submitStart, submitEnd int64
	before, after          queue.StorageStats
	cpu                    float64
	allocs, allocBytes     uint64 // heap allocations over the load (this process)
	submitted              int64
}

// drive runs tr's runs on rt: it starts the Runtime, submits every run
// (closed or open loop), waits for every terminal hook, stops the Runtime
// and reads the store's counters.
func drive(ctx context.Context, q *queue.Queue, rt *swruntime.Runtime, tr *tracker, cfg Config, steady bool, pr *progress) (driveOut, error) {
	var out driveOut
	run := startRuntime(ctx, rt)
	subCtx, cancelSub := context.WithCancel(ctx)
	defer cancelSub()
	sub := &submitter{rt: rt, tr: tr, payload: makePayload(cfg.PayloadSize), cancel: cancelSub, conc: hotKey(cfg)}
	n := int(tr.want)
	label := cfg.Scenario
	if pr != nil {
		pr.set(func() string {
			el := time.Since(tr.start).Seconds()
			return fmt.Sprintf("%s: submitted %d/%d  completed %d/%d  steps %d  %.1fs",
				label, sub.submitted.Load(), n, tr.completed.Load(), n, tr.executions.Load(), el)
		})
	}

	out.before = q.StorageStats()
	cpu0 := cpuTime()
	allocs0, allocBytes0 := heapAllocs()
	out.submitStart = tr.now()
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		if steady {
			sub.openLoop(subCtx, n, cfg.Rate, out.submitStart)
		} else {
			sub.closedLoop(subCtx, n, cfg.Submitters)
		}
	}()

	var err error
	select {
	case <-tr.allDone:
	case <-subCtx.Done(): // a Submit failed, or ctx ended
	case rerr := <-run.done:
		run.done <- rerr
		err = fmt.Errorf("bench: runtime stopped early: %v", rerr)
	}
	cancelSub()
	<-subDone
	if werr := run.wait(); werr != nil && err == nil {
		err = werr
	}
	out.cpu = cpuTime() - cpu0
	allocs1, allocBytes1 := heapAllocs()
	out.allocs, out.allocBytes = allocs1-allocs0, allocBytes1-allocBytes0
	out.after = q.StorageStats()
	out.submitEnd = sub.lastEnd.Load()
	out.submitted = sub.submitted.Load()
	switch {
	case err != nil:
	case sub.err != nil:
		err = sub.err
	case tr.completed.Load() < tr.want:
		err = fmt.Errorf("%w: %d of %d runs completed: %w", ErrIncomplete, tr.completed.Load(), tr.want, context.Cause(ctx))
	}
	if err == nil {
		if f := tr.failed.Load(); f > 0 {
			err = fmt.Errorf("bench: %d runs did not succeed", f)
		}
	}
	return out, err
}

// fill computes the figures of a load from the tracker's records.
func (out driveOut) fill(res *Throughput, tr *tracker, cfg Config) {
	res.RunsCompleted = tr.completed.Load()
	res.RunsFailed = tr.failed.Load()
	res.StepExecutions = tr.executions.Load()
	res.Transitions = res.RunsCompleted * int64(cfg.Steps)
	end := tr.lastDone.Load()
	if res.RunsCompleted > 0 && end > out.submitStart {
		res.ElapsedS = float64(end-out.submitStart) / 1e9
		res.TransitionsPerS = float64(res.Transitions) / res.ElapsedS
		res.RunsPerS = float64(res.RunsCompleted) / res.ElapsedS
		res.CPUSeconds = out.cpu
		res.CPUCores = out.cpu / res.ElapsedS
		res.CPUPerTransitionUS = out.cpu / float64(res.Transitions) * 1e6
		res.AllocsPerTransition = float64(out.allocs) / float64(res.Transitions)
		res.AllocBytesPerTransition = float64(out.allocBytes) / float64(res.Transitions)
	}
	if out.submitEnd > out.submitStart {
		res.SubmitElapsedS = float64(out.submitEnd-out.submitStart) / 1e9
		res.SubmitsPerS = float64(out.submitted) / res.SubmitElapsedS
	}
	var runLat, subLat, startLat, lag, gaps, hook, overhead []int64
	work := int64(cfg.StepDuration) * int64(cfg.Steps)
	for i := range tr.runs {
		rs := &tr.runs[i]
		arrival := rs.arrival.Load()
		if d := rs.submitDur.Load(); d > 0 {
			subLat = append(subLat, d)
			if due := rs.due.Load(); due > 0 {
				lag = append(lag, max(arrival-due, 0))
			}
		}
		if s0 := rs.step0.Load(); s0 > 0 && arrival > 0 {
			startLat = append(startLat, max(s0-arrival, 0))
		}
		for n := 1; n < len(rs.gaps); n++ {
			if g := rs.gaps[n].Load(); g > 0 {
				gaps = append(gaps, g)
			}
		}
		done := rs.done.Load()
		if done == 0 {
			continue
		}
		lat := max(done-arrival, 0)
		runLat = append(runLat, lat)
		overhead = append(overhead, max(lat-work, 0)/int64(cfg.Steps))
		if h := rs.hookDelay.Load(); h > 0 {
			hook = append(hook, h)
		}
	}
	res.RunLatency = summarize(runLat)
	res.SubmitLatency = summarize(subLat)
	res.StartLatency = summarize(startLat)
	res.ArrivalLag = summarize(lag)
	res.AddedLatencyPerStep = summarize(gaps)
	res.HookLatency = summarize(hook)
	res.RunOverheadPerStep = summarize(overhead)
	res.Storage, res.Engine = delta(out.after, out.before)
	res.PerTransition = res.Storage.per(float64(res.Transitions))
	res.derive()
}

// derive computes the figures made of others: CPU per transition and the
// commit floor.
func (res *Throughput) derive() {
	res.CPUPerTransitionUS, res.CommitFloorMS = 0, 0
	if res.Transitions > 0 {
		res.CPUPerTransitionUS = res.CPUSeconds / float64(res.Transitions) * 1e6
	}
	if res.OfferedRunsPerS > 0 {
		res.CommitFloorMS = float64(res.StepsPerRun+1) * res.Engine.WALWriteMeanMS
	}
}

// heapAllocs returns the process's heap allocations so far: objects and
// bytes (runtime/metrics, which does not stop the world).
func heapAllocs() (objects, bytes uint64) {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 || m[1].Value.Kind() != metrics.KindUint64 {
		return 0, 0
	}
	return m[0].Value.Uint64(), m[1].Value.Uint64()
}
