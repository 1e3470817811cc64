package bench

import (
	"fmt"
	"io"
	goruntime "runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stepwell/stepwell/queue"
)

// Result is what a bench measured. Exactly one of Throughput (saturate,
// steady), Recovery and Idle is set. Durations are float seconds (_s) or
// milliseconds (_ms); JSON keys are snake_case.
type Result struct {
	Scenario string `json:"scenario"`
	// Store is the store URL used (redacted; a temporary directory or
	// generated mem name when the Config asked for one).
	Store string `json:"store"`
	Env   Env    `json:"env"`

	Throughput *Throughput `json:"throughput,omitempty"`
	// Cluster is set with Throughput by a cluster bench (Config.Cluster):
	// Throughput then merges the records of every process, and its
	// storage and engine figures are the writer's.
	Cluster  *Cluster  `json:"cluster,omitempty"`
	Recovery *Recovery `json:"recovery,omitempty"`
	Idle     *Idle     `json:"idle,omitempty"`

	// PeakHeapBytes is the largest heap (live objects plus unswept
	// garbage) sampled every 10ms during the scenario. In a cluster bench,
	// the largest of the writer's and the members'.
	PeakHeapBytes uint64 `json:"peak_heap_bytes"`
	// PeakRSSBytes is the process's peak resident set (VmHWM; 0 where
	// unavailable); in a cluster bench, the largest of the writer's and
	// the members'.
	PeakRSSBytes uint64 `json:"peak_rss_bytes"`
	// PeakRSSReset is true when the peak RSS was reset at the start of the
	// scenario; otherwise PeakRSSBytes covers the process's whole life.
	PeakRSSReset bool `json:"peak_rss_reset"`
}

// Env describes where the bench ran.
type Env struct {
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model,omitempty"`
}

func environment() Env {
	return Env{
		GoVersion: goruntime.Version(), GOOS: goruntime.GOOS, GOARCH: goruntime.GOARCH,
		NumCPU: goruntime.NumCPU(), GOMAXPROCS: goruntime.GOMAXPROCS(0), CPUModel: cpuModel(),
	}
}

// Latency summarizes a distribution of durations, in milliseconds.
type Latency struct {
	N      int     `json:"n"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
}

// summarize sorts ds (nanoseconds) and summarizes it with nearest-rank
// percentiles.
func summarize(ds []int64) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum float64
	for _, d := range ds {
		sum += float64(d)
	}
	rank := func(p float64) int64 {
		i := int(float64(len(ds))*p+0.999999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return Latency{
		N: len(ds), MeanMS: sum / float64(len(ds)) / 1e6,
		P50MS: ms(rank(0.50)), P99MS: ms(rank(0.99)), MaxMS: ms(ds[len(ds)-1]),
	}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// Requests counts object-store requests and bytes (a StorageStats delta).
type Requests struct {
	Puts         int64 `json:"puts"`
	Gets         int64 `json:"gets"`
	Lists        int64 `json:"lists"`
	Deletes      int64 `json:"deletes"`
	Heads        int64 `json:"heads"`
	BytesWritten int64 `json:"bytes_written"`
	BytesRead    int64 `json:"bytes_read"`
}

// Total is the number of requests of every kind.
func (r Requests) Total() int64 { return r.Puts + r.Gets + r.Lists + r.Deletes + r.Heads }

// RequestRates are Requests divided by something (transitions, minutes).
type RequestRates struct {
	Puts         float64 `json:"puts"`
	Gets         float64 `json:"gets"`
	Lists        float64 `json:"lists"`
	Deletes      float64 `json:"deletes"`
	Heads        float64 `json:"heads"`
	Total        float64 `json:"total"`
	BytesWritten float64 `json:"bytes_written"`
	BytesRead    float64 `json:"bytes_read"`
}

func (r Requests) per(d float64) RequestRates {
	if d <= 0 {
		return RequestRates{}
	}
	return RequestRates{
		Puts: float64(r.Puts) / d, Gets: float64(r.Gets) / d, Lists: float64(r.Lists) / d,
		Deletes: float64(r.Deletes) / d, Heads: float64(r.Heads) / d, Total: float64(r.Total()) / d,
		BytesWritten: float64(r.BytesWritten) / d, BytesRead: float64(r.BytesRead) / d,
	}
}

// Engine is the engine's work over a window (a StorageStats delta).
type Engine struct {
	WALBatches uint64 `json:"wal_batches"`
	// WALSegmentBatches of them were records of WAL segments (file://).
	WALSegmentBatches uint64 `json:"wal_segment_batches"`
	Transactions      uint64 `json:"transactions"`
	Mutations         uint64 `json:"mutations"`
	WALBytes          uint64 `json:"wal_bytes"`
	Snapshots         uint64 `json:"snapshots"`
	// TxnsPerWALObject is Transactions / WALBatches: how many
	// transactions group commit put in each WAL write.
	TxnsPerWALObject float64 `json:"txns_per_wal_object"`
	// WALWriteMeanMS is the mean time of a WAL write, from its start to
	// its durability (StorageStats.WALWriteTime / WALBatches): the
	// commit latency of a transaction that waits for no other write.
	WALWriteMeanMS float64 `json:"wal_write_mean_ms"`
	// WALWriteP50MS, P90 and P99 are quantiles of the same writes'
	// durations (StorageStats.WALWrites, to within 10%): the mean hides a
	// disk's slow tail.
	WALWriteP50MS float64 `json:"wal_write_p50_ms"`
	WALWriteP90MS float64 `json:"wal_write_p90_ms"`
	WALWriteP99MS float64 `json:"wal_write_p99_ms"`
	// KeysAtEnd is the number of keys in the state at the end.
	KeysAtEnd int `json:"keys_at_end"`
	// PreallocBytes are the bytes of the WAL segments staged new (zero
	// filled, file://) and SnapshotBytes those of the snapshots written:
	// both part of Requests.BytesWritten.
	PreallocBytes uint64 `json:"wal_prealloc_bytes"`
	SnapshotBytes uint64 `json:"snapshot_bytes"`
}

// Written splits the bytes written per transition (Requests.BytesWritten
// over the transitions) by what wrote them.
type Written struct {
	Total float64 `json:"total"`
	// WAL is what the WAL writes wrote: segment records (batch, record
	// header, padding to the 4 KiB block) and WAL objects; the owner
	// object's few writes are counted here too. WALBatches is the encoded
	// batches alone (Engine.WALBytes), the part of WAL the records are.
	WAL        float64 `json:"wal"`
	WALBatches float64 `json:"wal_batches"`
	// Prealloc is the zero-filling of new WAL segments (file://).
	Prealloc float64 `json:"wal_prealloc"`
	// Snapshot is the snapshots written.
	Snapshot float64 `json:"snapshot"`
}

// written returns t's Written, from its Storage and Engine.
func (t *Throughput) written() Written {
	n := float64(t.Transitions)
	if n <= 0 {
		return Written{}
	}
	e := t.Engine
	return Written{
		Total:      float64(t.Storage.BytesWritten) / n,
		WAL:        (float64(t.Storage.BytesWritten) - float64(e.PreallocBytes) - float64(e.SnapshotBytes)) / n,
		WALBatches: float64(e.WALBytes) / n,
		Prealloc:   float64(e.PreallocBytes) / n,
		Snapshot:   float64(e.SnapshotBytes) / n,
	}
}

func delta(after, before queue.StorageStats) (Requests, Engine) {
	r := Requests{
		Puts: after.Puts - before.Puts, Gets: after.Gets - before.Gets,
		Lists: after.Lists - before.Lists, Deletes: after.Deletes - before.Deletes,
		Heads: after.Heads - before.Heads, BytesWritten: after.BytesWritten - before.BytesWritten,
		BytesRead: after.BytesRead - before.BytesRead,
	}
	e := Engine{
		WALBatches: after.WALBatches - before.WALBatches, WALSegmentBatches: after.WALSegmentBatches - before.WALSegmentBatches, Transactions: after.Transactions - before.Transactions,
		Mutations: after.Mutations - before.Mutations, WALBytes: after.WALBytes - before.WALBytes,
		Snapshots: after.Snapshots - before.Snapshots, KeysAtEnd: after.Keys,
		PreallocBytes: after.WALPreallocBytes - before.WALPreallocBytes,
		SnapshotBytes: after.SnapshotBytes - before.SnapshotBytes,
	}
	if e.WALBatches > 0 {
		e.TxnsPerWALObject = float64(e.Transactions) / float64(e.WALBatches)
		e.WALWriteMeanMS = float64(after.WALWriteTime-before.WALWriteTime) / 1e6 / float64(e.WALBatches)
	}
	w := after.WALWrites.Sub(before.WALWrites)
	ms := func(q float64) float64 { return float64(w.Quantile(q)) / 1e6 }
	e.WALWriteP50MS, e.WALWriteP90MS, e.WALWriteP99MS = ms(0.5), ms(0.9), ms(0.99)
	return r, e
}

// Throughput is the result of saturate and steady.
type Throughput struct {
	Runs           int     `json:"runs"`
	StepsPerRun    int     `json:"steps_per_run"`
	PayloadBytes   int     `json:"payload_bytes"`
	StepDurationMS float64 `json:"step_duration_ms"`
	Concurrency    int     `json:"concurrency"`
	// NotifyConcurrency is how many terminal hook calls ran at once.
	NotifyConcurrency int `json:"notify_concurrency"`
	// Submitters is the number of submitting goroutines (saturate).
	Submitters int `json:"submitters,omitempty"`
	// HotKeyLimit is the Limit of the one concurrency key of every run
	// (Config.HotKeyLimit); 0: none.
	HotKeyLimit int `json:"hot_key_limit,omitempty"`
	// OfferedRunsPerS is the configured arrival rate (steady).
	OfferedRunsPerS float64 `json:"offered_runs_per_s,omitempty"`

	// Transitions is runs x steps: the step settlements the completed runs
	// committed.
	Transitions int64 `json:"transitions"`
	// StepExecutions counts RunStep calls (more than Transitions if a step
	// was delivered again).
	StepExecutions int64 `json:"step_executions"`
	RunsCompleted  int64 `json:"runs_completed"`
	// RunsFailed counts runs that ended other than Succeeded (never, unless
	// something is wrong).
	RunsFailed int64 `json:"runs_failed"`

	ElapsedS       float64 `json:"elapsed_s"`
	SubmitElapsedS float64 `json:"submit_elapsed_s"`

	TransitionsPerS float64 `json:"transitions_per_s"`
	RunsPerS        float64 `json:"runs_per_s"`
	SubmitsPerS     float64 `json:"submits_per_s"`

	RunLatency    Latency `json:"run_latency"`
	SubmitLatency Latency `json:"submit_latency"`
	StartLatency  Latency `json:"start_latency"`
	// ArrivalLag (steady) is how late the load generator called Submit
	// after each arrival's due time: its own timer's lateness (Go's timers
	// sleep in whole milliseconds on an idle process), not the runtime's,
	// and so left out of the latencies above.
	ArrivalLag          Latency `json:"arrival_lag"`
	AddedLatencyPerStep Latency `json:"added_latency_per_step"`
	HookLatency         Latency `json:"hook_latency"`
	RunOverheadPerStep  Latency `json:"run_overhead_per_step"`

	Storage       Requests     `json:"storage"`
	PerTransition RequestRates `json:"per_transition"`
	// Written is PerTransition.BytesWritten split by what wrote it.
	Written Written `json:"written_per_transition"`
	Engine  Engine  `json:"engine"`

	CPUSeconds float64 `json:"cpu_s"`
	// CPUCores is CPUSeconds / ElapsedS: how many cores were busy on
	// average.
	CPUCores float64 `json:"cpu_cores"`
	// CPUPerTransitionUS is CPUSeconds / Transitions, in microseconds:
	// far less sensitive to a shared machine's load than TransitionsPerS.
	CPUPerTransitionUS float64 `json:"cpu_us_per_transition"`

	// CommitFloorMS (steady) is what a run alone cannot beat: its steps+1
	// commits on the way from Submit to the hook (the submit, which claims
	// step 0; each settlement, which claims what comes next), each waiting
	// for one WAL write of Engine.WALWriteMeanMS. RunLatency.P50MS -
	// CommitFloorMS is the rest: CPU, goroutine and process hand-offs.
	CommitFloorMS float64 `json:"commit_floor_ms,omitempty"`
	// AllocsPerTransition and AllocBytesPerTransition are the process's
	// heap allocations per transition (objects, bytes), the bench's own
	// work (submitters, bookkeeping) included; not measured (0) in
	// cluster mode.
	AllocsPerTransition     float64 `json:"allocs_per_transition,omitempty"`
	AllocBytesPerTransition float64 `json:"alloc_bytes_per_transition,omitempty"`
}

// Recovery is the result of recovery.
type Recovery struct {
	LiveJobs    int `json:"live_jobs"`
	History     int `json:"history"`
	StepsPerRun int `json:"steps_per_run"`
	Concurrency int `json:"concurrency"`

	// BuildS is the time to execute the history runs and submit the live
	// ones.
	BuildS float64 `json:"build_s"`
	// ReopenS is the duration of queue.Open on the built store (recovery:
	// list, read the snapshot and WAL, rebuild the indexes).
	ReopenS float64 `json:"reopen_s"`
	// FirstClaimS is from Runtime.Run's start to the first RunStep call.
	FirstClaimS float64 `json:"first_claim_s"`
	// PendingAfterReopen is the step queue's pending count after Open (it
	// should equal LiveJobs).
	PendingAfterReopen int64 `json:"pending_after_reopen"`
	// KeysAfterReopen is the number of keys in the recovered state.
	KeysAfterReopen int `json:"keys_after_reopen"`

	// HeapBeforeReopenBytes is the live heap after a GC with the store
	// closed; HeapAfterReopenBytes after a GC with it open (no Runtime
	// yet). HeapPerLiveJobBytes is their difference over LiveJobs (history
	// records included).
	HeapBeforeReopenBytes uint64  `json:"heap_before_reopen_bytes"`
	HeapAfterReopenBytes  uint64  `json:"heap_after_reopen_bytes"`
	HeapPerLiveJobBytes   float64 `json:"heap_per_live_job_bytes"`

	// ReopenStorage counts the requests queue.Open made.
	ReopenStorage Requests `json:"reopen_storage"`
	// BuildStorage counts the requests of the build.
	BuildStorage Requests `json:"build_storage"`
	BuildEngine  Engine   `json:"build_engine"`
}

// Idle is the result of idle.
type Idle struct {
	IdleS float64 `json:"idle_s"`
	// Storage counts the requests over the window.
	Storage Requests `json:"storage"`
	// PerMinute is Storage scaled to one minute.
	PerMinute  RequestRates `json:"per_minute"`
	Engine     Engine       `json:"engine"`
	CPUSeconds float64      `json:"cpu_s"`
}

// WriteTable writes r as an aligned, human-readable table.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...))
	}
	lat := func(k string, l Latency) {
		row(k, "p50 %s  p99 %s  max %s  (n=%d)", fmtMS(l.P50MS), fmtMS(l.P99MS), fmtMS(l.MaxMS), l.N)
	}
	reqs := func(k string, q Requests) {
		row(k, "%d puts  %d gets  %d lists  %d deletes  %s written  %s read",
			q.Puts, q.Gets, q.Lists, q.Deletes, fmtBytes(float64(q.BytesWritten)), fmtBytes(float64(q.BytesRead)))
	}
	row("scenario", "%s", r.Scenario)
	row("store", "%s", r.Store)
	row("machine", "%s %s/%s, %d CPUs (GOMAXPROCS %d) %s", r.Env.GoVersion, r.Env.GOOS, r.Env.GOARCH,
		r.Env.NumCPU, r.Env.GOMAXPROCS, r.Env.CPUModel)
	if t := r.Throughput; t != nil {
		row("workload", "%d runs x %d steps, %d-byte payloads, %s per step, concurrency %d (notify %d)",
			t.Runs, t.StepsPerRun, t.PayloadBytes, fmtMS(t.StepDurationMS), t.Concurrency, t.NotifyConcurrency)
		if t.OfferedRunsPerS > 0 {
			row("arrivals", "open loop at %.1f runs/s", t.OfferedRunsPerS)
		} else {
			row("submitters", "%d (closed loop on Submit)", t.Submitters)
		}
		if t.HotKeyLimit > 0 {
			row("concurrency key", "every run on one key, Limit %d", t.HotKeyLimit)
		}
		row("completed", "%d runs (%d failed), %d transitions, %d step executions",
			t.RunsCompleted, t.RunsFailed, t.Transitions, t.StepExecutions)
		row("elapsed", "%.3fs (submitting: %.3fs)", t.ElapsedS, t.SubmitElapsedS)
		row("transitions/s", "%.0f", t.TransitionsPerS)
		row("runs/s", "%.0f", t.RunsPerS)
		row("submits/s", "%.0f", t.SubmitsPerS)
		lat("run latency", t.RunLatency)
		lat("submit latency", t.SubmitLatency)
		lat("start latency", t.StartLatency)
		if t.ArrivalLag.N > 0 {
			lat("arrival lag", t.ArrivalLag)
		}
		lat("added latency/step", t.AddedLatencyPerStep)
		lat("hook latency", t.HookLatency)
		lat("run overhead/step", t.RunOverheadPerStep)
		p := t.PerTransition
		row("requests/transition", "%.3f puts  %.3f gets  %.3f lists  %.3f deletes  %s written",
			p.Puts, p.Gets, p.Lists, p.Deletes, fmtBytes(p.BytesWritten))
		w := t.Written
		row("written/transition", "%s: WAL %s (batches %s), preallocation %s, snapshots %s",
			fmtBytes(w.Total), fmtBytes(w.WAL), fmtBytes(w.WALBatches), fmtBytes(w.Prealloc), fmtBytes(w.Snapshot))
		reqs("requests (total)", t.Storage)
		e := t.Engine
		row("WAL", "%d batches (%d in segments), %d txns (%.1f per batch), %s, %d snapshots",
			e.WALBatches, e.WALSegmentBatches, e.Transactions, e.TxnsPerWALObject, fmtBytes(float64(e.WALBytes)), e.Snapshots)
		row("WAL write", "%s mean, p50 %s, p90 %s, p99 %s",
			fmtMS(e.WALWriteMeanMS), fmtMS(e.WALWriteP50MS), fmtMS(e.WALWriteP90MS), fmtMS(e.WALWriteP99MS))
		row("CPU", "%.2fs (%.2f cores busy, %.1fµs per transition)", t.CPUSeconds, t.CPUCores, t.CPUPerTransitionUS)
		if t.CommitFloorMS > 0 {
			row("commit floor", "%s per run (%d WAL writes of %s)", fmtMS(t.CommitFloorMS), t.StepsPerRun+1, fmtMS(t.Engine.WALWriteMeanMS))
		}
		if t.AllocsPerTransition > 0 {
			row("allocations", "%.1f per transition, %s", t.AllocsPerTransition, fmtBytes(t.AllocBytesPerTransition))
		}
	}
	if c := r.Cluster; c != nil {
		c.writeRows(row)
	}
	if v := r.Recovery; v != nil {
		row("workload", "%d live jobs (pending step 0 of %d-step runs), %d completed runs of history",
			v.LiveJobs, v.StepsPerRun, v.History)
		row("build", "%.3fs", v.BuildS)
		row("reopen (queue.Open)", "%.3fs", v.ReopenS)
		row("first claim", "%s after Run started", fmtMS(v.FirstClaimS*1000))
		row("pending after reopen", "%d (keys %d)", v.PendingAfterReopen, v.KeysAfterReopen)
		row("heap", "%s before reopen, %s after", fmtBytes(float64(v.HeapBeforeReopenBytes)),
			fmtBytes(float64(v.HeapAfterReopenBytes)))
		row("heap per live job", "%s", fmtBytes(v.HeapPerLiveJobBytes))
		reqs("reopen requests", v.ReopenStorage)
		reqs("build requests", v.BuildStorage)
	}
	if v := r.Idle; v != nil {
		row("observed", "%.1fs idle", v.IdleS)
		p := v.PerMinute
		row("requests/minute", "%.1f (%.1f puts  %.1f gets  %.1f lists  %.1f deletes)  %s written",
			p.Total, p.Puts, p.Gets, p.Lists, p.Deletes, fmtBytes(p.BytesWritten))
		reqs("requests (total)", v.Storage)
		row("WAL", "%d batches (%d in segments), %d txns", v.Engine.WALBatches, v.Engine.WALSegmentBatches, v.Engine.Transactions)
		row("CPU", "%.3fs", v.CPUSeconds)
	}
	row("peak heap", "%s", fmtBytes(float64(r.PeakHeapBytes)))
	rss := fmtBytes(float64(r.PeakRSSBytes))
	if r.PeakRSSBytes == 0 {
		rss = "n/a"
	} else if !r.PeakRSSReset {
		rss += " (process lifetime)"
	}
	row("peak RSS", "%s", rss)
	return tw.Flush()
}

func fmtMS(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.0fµs", v*1000)
	case v < 100:
		return fmt.Sprintf("%.2fms", v)
	case v < 10000:
		return fmt.Sprintf("%.0fms", v)
	}
	return (time.Duration(v * 1e6)).Round(100 * time.Millisecond).String()
}

func fmtBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return strings.TrimSuffix(fmt.Sprintf("%.0f B", v), " ")
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
