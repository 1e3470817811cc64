// Package bench is the engine of the `stepwell bench` command: it drives a
// synthetic workload through a real Runtime on a real store and reports what
// it cost.
//
// # Scenarios
//
//	saturate  Submitters goroutines submit Runs runs as fast as Submit
//	          returns (each submitter is a closed loop on its own Submit
//	          calls) while one Runtime executes them with Concurrency step
//	          slots. The runtime is never short of work, so the figures are
//	          its capacity. Latencies include the time a run waits behind the
//	          backlog, so they grow with Runs: read them from steady.
//	steady    Runs runs arrive open loop at Rate runs/s (arrival i is due at
//	          i/Rate s; each is submitted on its own goroutine, so a slow
//	          Submit does not delay later arrivals). Latencies are measured
//	          from the Submit call; arrival_lag reports how late the
//	          generator's timer made each call (Go's timers sleep in whole
//	          milliseconds on an idle process: 0.6 ms late at p50 here),
//	          which the runtime neither causes nor sees. Below capacity this
//	          gives the latency of a lightly loaded runtime.
//	recovery  Builds History completed runs and LiveJobs pending runs (step 0
//	          queued, no Runtime running), closes the store, and times
//	          queue.Open (recovery), then a Runtime's first claim, and
//	          measures the heap the recovered state takes.
//	idle      Opens the store, runs a Runtime with nothing to do for IdleFor
//	          and counts the object-store requests it makes.
//
// # Cluster
//
// With Config.Cluster = N, saturate and steady run in cluster mode
// (queue.WithCluster) across 1 + N processes of the running binary, which
// re-executes itself in a hidden helper mode (Helper; the environment
// variable STEPWELL_BENCH_HELPER carries the process's part). The first
// process opens the store and becomes its writer; it runs no Runtime, so
// every step runs in a member. Each of the N members opens the same store
// (as a member: it forwards everything to the writer), runs a Runtime with
// Concurrency step slots, and submits its share of the runs: runs k, k+N,
// k+2N, ... with Submitters/N goroutines (saturate) or at their due times
// of the common arrival schedule (steady). The process that runs the bench
// only coordinates, over the helpers' stdin and stdout. Every process
// records times on the wall clock since one shared origin, so a step that
// ends in one member and whose successor starts in another still gives
// its added latency; the Throughput figures merge all of them. Storage and
// engine figures are the writer's; Cluster adds the members' calls to the
// writer (StorageStats.ClusterCalls) per transition and the CPU and memory
// of each role.
//
// Then, unless NoFailover, every member (and, with N = 1, a spare member
// started for the purpose) runs a Runtime and submits one-step probe runs
// back to back, 1ms apart, and watches its own Role. The writer is
// SIGKILLed (failover); 1.5s after a member took over, that member is
// closed with Queue.Close (hand-over), and another takes over. Each is
// reported as the time to the next writer's Role change and as the longest
// gap between acknowledged probe Submits across the event.
//
// STEPWELL_BENCH_CPUPROFILE_DIR, set to a directory, makes each helper
// write a CPU profile of the load there (writer.pprof, member-N.pprof).
//
// # Workload
//
// Every step is the same RunnerFunc: it sleeps StepDuration (the simulated
// work; 0 means none) and returns Continue(payload) until the last step,
// which returns Succeed(payload). Step 0's input is PayloadSize bytes. A
// terminal hook records when each run's notification arrives; a run counts
// as complete at its first hook call. Run IDs are "bench-<ULID>-<i>" and the
// step and notification queues are named "bench-<ULID>-steps" and
// "bench-<ULID>-notify", so a bench never executes or acknowledges jobs that
// were already in the store. It does leave its run records behind (they
// expire after the runtime's terminal retention): point it at a store, or
// bucket prefix, of its own.
//
// # Measurements
//
// Times are read from the monotonic clock. For saturate and steady:
//
//	elapsed             first Submit call -> last run's terminal hook
//	transitions         runs x steps: each step boundary settles in one
//	                    transaction (the last one ends the run)
//	submits_per_s       runs / (first Submit call -> last Submit return)
//	run_latency         per run: arrival (the Submit call) -> terminal hook
//	arrival_lag         steady: due time -> Submit call, per run
//	submit_latency      duration of each Submit call (one commit)
//	start_latency       arrival -> step 0 starts executing
//	added_latency_per_step
//	                    per step boundary n -> n+1 (first attempts only):
//	                    step n's RunStep returns -> step n+1's RunStep
//	                    starts. It covers the settlement commit (ack, enqueue
//	                    of n+1, run record), the claim of n+1 (a commit too),
//	                    the run-record read, and any wait for a free step slot
//	                    or behind queued steps. Measured directly rather than
//	                    derived, so it excludes the run's start and end.
//	hook_latency        last step returns -> terminal hook called: the
//	                    terminating commit plus the notification's claim
//	run_overhead_per_step
//	                    per run: (run_latency - steps x StepDuration) / steps,
//	                    the derived alternative; it includes start_latency
//	                    and hook_latency spread over the steps
//	storage             StorageStats deltas from just before the first
//	                    Submit to after the Runtime stopped (its last
//	                    notification acks flushed), so they include the
//	                    claims, settlements, notifications, snapshots and WAL
//	                    collection the workload caused; per_transition divides
//	                    them by transitions
//	txns_per_wal_object Transactions / WALBatches over the same window
//	wal_write_mean_ms   the WAL writes' durations over the same window,
//	wal_write_p50_ms    each from its start to its durability: their mean
//	wal_write_p90_ms    (WALWriteTime / WALBatches) and quantiles
//	wal_write_p99_ms    (StorageStats.WALWrites, to within 10%)
//	cpu_s               user+system CPU time of the process over elapsed
//	                    (getrusage; 0 where unavailable)
//
// Peak heap is the largest HeapAlloc-equivalent
// (/memory/classes/heap/objects:bytes: live objects plus garbage not yet
// swept) sampled every 10ms over the scenario. Peak RSS is VmHWM from
// /proc/self/status (Linux; 0 elsewhere); Run resets it at the start through
// /proc/self/clear_refs when the kernel allows, otherwise it is the peak of
// the whole process so far (PeakRSSReset says which). Both include the
// bench's own bookkeeping, about 100 bytes per run plus 8 per step.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stepwell/stepwell/queue"
)

// Scenario names.
const (
	ScenarioSaturate = "saturate"
	ScenarioSteady   = "steady"
	ScenarioRecovery = "recovery"
	ScenarioIdle     = "idle"
)

// Defaults applied by Run to zero Config fields.
const (
	DefaultStore       = "mem://" // a fresh in-memory store of the bench's own
	DefaultRuns        = 1000
	DefaultSteps       = 3
	DefaultPayloadSize = 64
	DefaultConcurrency = 32
	DefaultSubmitters  = 32
	DefaultLiveJobs    = 100_000
	DefaultIdleFor     = 30 * time.Second
)

// Upper bounds that keep a mistyped flag from exhausting memory.
const (
	MaxRuns        = 100_000_000
	MaxSteps       = 1_000_000
	MaxPayloadSize = 64 << 20 // the queue's default value limit
	MaxConcurrency = 100_000
	MaxSubmitters  = 100_000
	MaxCluster     = 64
)

// Config describes one bench. Zero fields take the defaults above.
type Config struct {
	// Store is the store URL (mem://, file://, s3://...). "" or "mem://"
	// is a fresh in-memory store; "file://" (empty path) is a new
	// temporary directory, removed afterwards.
	Store string
	// Scenario is "saturate" (the default), "steady", "recovery" or
	// "idle".
	Scenario string
	// Runs is how many runs to submit (saturate, steady). Default 1000.
	Runs int
	// Steps is how many steps each run has (all scenarios that execute
	// runs). Default 3.
	Steps int
	// PayloadSize is the size of each step's payload, in bytes. Default
	// 64; there is no way to ask for 0 (use 1).
	PayloadSize int
	// StepDuration is the simulated work of a step (a sleep). 0: none.
	StepDuration time.Duration
	// Concurrency is runtime.WithMaxConcurrentSteps. Default 32.
	Concurrency int
	// NotifyConcurrency is runtime.WithNotifyConcurrency: how many terminal
	// hook calls run at once. Default: Concurrency. (The runtime's own
	// default, 4, makes the notification queue the bottleneck of a
	// saturated file:// store; see docs/BENCHMARKS.md.)
	NotifyConcurrency int
	// Submitters is how many goroutines submit runs (saturate; recovery
	// uses them to build). Default 32.
	Submitters int
	// Rate is the arrival rate of steady, in runs per second. Required
	// for steady.
	Rate float64
	// LiveJobs is how many pending runs recovery builds (each is one
	// queued step-0 job and one run record). Default 100,000.
	LiveJobs int
	// History is how many runs recovery executes to completion before
	// building the live jobs (their terminal records stay in the state).
	// 0: none.
	History int
	// IdleFor is how long idle observes. Default 30s.
	IdleFor time.Duration
	// Cluster, when above 0, runs saturate or steady in cluster mode
	// (queue.WithCluster) across 1 + Cluster processes of the running
	// binary, re-executed in a hidden helper mode (see Helper): a writer
	// that runs no steps, and Cluster members that each run a Runtime with
	// Concurrency step slots and submit their share of the runs (Rate and
	// Submitters are split between them). Then, unless NoFailover, it
	// times a failover (SIGKILL of the writer) and a clean hand-over
	// (Close of the next one). Not for mem:// stores.
	Cluster int
	// NoFailover skips the failover and hand-over of a Cluster bench.
	NoFailover bool
	// HotKeyLimit, when above 0, submits every run (saturate, steady)
	// with one concurrency key of that Limit (runtime.RunSpec.Concurrency,
	// key "bench-hot"): at most that many runs active at once. 0: no key.
	HotKeyLimit int
	// Progress, when set, receives a progress line rewritten in place
	// with '\r' a few times a second, and a final newline.
	Progress io.Writer `json:"-"`
}

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("bench: invalid config")

// ErrIncomplete is wrapped by the error Run returns when its context ended
// before the scenario finished; the Result then holds what was measured.
var ErrIncomplete = errors.New("bench: scenario did not finish")

// ConfigError reports an invalid Config field. Not retryable with the same
// Config.
type ConfigError struct {
	Field  string // the Config field name, e.g. "Runs"
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("bench: invalid config: %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

func cfgErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Normalize validates c and returns it with the defaults applied. It does
// not touch the store (an unreachable or malformed store URL fails in Run,
// with the store's own error). Run calls it; it is exported so that a CLI
// can show the effective configuration.
func (c Config) Normalize() (Config, error) {
	if c.Scenario == "" {
		c.Scenario = ScenarioSaturate
	}
	switch c.Scenario {
	case ScenarioSaturate, ScenarioSteady, ScenarioRecovery, ScenarioIdle:
	default:
		return c, cfgErr("Scenario", "%q is not one of saturate, steady, recovery, idle", c.Scenario)
	}
	if c.Store == "" {
		c.Store = DefaultStore
	}
	u, err := url.Parse(c.Store)
	if err != nil || u.Scheme == "" {
		return c, cfgErr("Store", "%q is not a store URL (want mem://, file:///dir, s3://, gs:// or azblob://)", c.Store)
	}
	type intField struct {
		name     string
		v        *int
		def, max int
	}
	for _, f := range []intField{
		{"Runs", &c.Runs, DefaultRuns, MaxRuns},
		{"Steps", &c.Steps, DefaultSteps, MaxSteps},
		{"PayloadSize", &c.PayloadSize, DefaultPayloadSize, MaxPayloadSize},
		{"Concurrency", &c.Concurrency, DefaultConcurrency, MaxConcurrency},
		{"Submitters", &c.Submitters, DefaultSubmitters, MaxSubmitters},
		{"NotifyConcurrency", &c.NotifyConcurrency, -1, MaxConcurrency},
		{"LiveJobs", &c.LiveJobs, DefaultLiveJobs, MaxRuns},
		{"History", &c.History, 0, MaxRuns},
		{"Cluster", &c.Cluster, 0, MaxCluster},
	} {
		switch {
		case *f.v < 0:
			return c, cfgErr(f.name, "%d is negative", *f.v)
		case *f.v > f.max:
			return c, cfgErr(f.name, "%d is above the limit %d", *f.v, f.max)
		case *f.v == 0:
			*f.v = f.def
		}
	}
	if c.NotifyConcurrency == -1 {
		c.NotifyConcurrency = c.Concurrency
	}
	if c.HotKeyLimit < 0 {
		return c, cfgErr("HotKeyLimit", "%d is negative", c.HotKeyLimit)
	}
	if c.StepDuration < 0 {
		return c, cfgErr("StepDuration", "%v is negative", c.StepDuration)
	}
	if c.IdleFor < 0 {
		return c, cfgErr("IdleFor", "%v is negative", c.IdleFor)
	}
	if c.IdleFor == 0 {
		c.IdleFor = DefaultIdleFor
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0 {
		return c, cfgErr("Rate", "%v is not a finite, non-negative number", c.Rate)
	}
	if c.Scenario == ScenarioSteady && c.Rate == 0 {
		return c, cfgErr("Rate", "steady needs an arrival rate (runs per second) above 0")
	}
	if c.Cluster > 0 {
		switch {
		case c.Scenario != ScenarioSaturate && c.Scenario != ScenarioSteady:
			return c, cfgErr("Cluster", "the cluster bench runs saturate or steady, not %s", c.Scenario)
		case u.Scheme == "mem":
			return c, cfgErr("Cluster", "a mem:// store cannot be shared between processes (use file:// or a bucket)")
		}
	}
	return c, nil
}

// Run runs the bench cfg describes and returns its figures. It opens the
// store with queue.Open and closes everything it opened before returning.
// A *ConfigError (wrapping ErrInvalidConfig) is returned before anything is
// opened. If ctx ends first, the error wraps ErrIncomplete and the ctx error,
// and the Result holds what was measured so far.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.Normalize()
	if err != nil {
		return Result{}, err
	}
	st, err := prepareStore(cfg.Store)
	if err != nil {
		return Result{}, err
	}
	defer st.cleanup()

	res := Result{Scenario: cfg.Scenario, Store: st.display, Env: environment()}
	mem := startMemSampler()
	res.PeakRSSReset = resetPeakRSS()
	pr := newProgress(cfg.Progress)
	nonce := strings.ToLower(ulid.Make().String())

	switch cfg.Scenario {
	case ScenarioSaturate, ScenarioSteady:
		if cfg.Cluster > 0 {
			var t Throughput
			var c Cluster
			t, c, err = runCluster(ctx, cfg, st.url, nonce, pr)
			res.Throughput, res.Cluster = &t, &c
			break
		}
		var t Throughput
		t, err = runLoad(ctx, cfg, st.url, nonce, pr)
		res.Throughput = &t
	case ScenarioRecovery:
		var r Recovery
		r, err = runRecovery(ctx, cfg, st.url, nonce, pr)
		res.Recovery = &r
	case ScenarioIdle:
		var i Idle
		i, err = runIdle(ctx, cfg, st.url, nonce, pr)
		res.Idle = &i
	}
	if t := res.Throughput; t != nil {
		t.Written = t.written()
	}
	pr.stop()
	res.PeakHeapBytes = mem.stop()
	res.PeakRSSBytes = peakRSS()
	if c := res.Cluster; c != nil {
		// The processes that did the work: the writer and the members.
		res.PeakHeapBytes = max(c.WriterPeakHeapBytes, c.MemberPeakHeapBytes)
		res.PeakRSSBytes = max(c.WriterPeakRSSBytes, c.MemberPeakRSSBytes)
	}
	return res, err
}

// store is a store URL made ready for a bench.
type store struct {
	url     string
	display string // redacted, for the report
	cleanup func()
}

// prepareStore gives "mem://" a fresh name and "file://" a temp dir.
func prepareStore(raw string) (store, error) {
	u, _ := url.Parse(raw) // validated by Normalize
	st := store{url: raw, cleanup: func() {}}
	switch {
	case u.Scheme == "mem" && u.Host == "":
		st.url = "mem://bench-" + strings.ToLower(ulid.Make().String())
		if u.RawQuery != "" {
			st.url += "?" + u.RawQuery
		}
	case u.Scheme == "file" && u.Host == "" && u.Path == "" && u.Opaque == "":
		dir, err := os.MkdirTemp("", "stepwell-bench-")
		if err != nil {
			return st, fmt.Errorf("bench: temporary store directory: %w", err)
		}
		st.url = "file://" + dir
		st.cleanup = func() { os.RemoveAll(dir) }
	}
	if pu, err := url.Parse(st.url); err == nil {
		st.display = pu.Redacted()
	} else {
		st.display = st.url
	}
	return st, nil
}

// openStore opens the bench's store. Steps that fail are retried quickly,
// which the workload never asks for; it is for the odd lost lease.
func openStore(ctx context.Context, storeURL string, opts ...queue.Option) (*queue.Queue, error) {
	opts = append([]queue.Option{queue.WithRetryBackoff(10*time.Millisecond, time.Second)}, opts...)
	q, err := queue.Open(ctx, storeURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("bench: opening the store: %w", err)
	}
	return q, nil
}
