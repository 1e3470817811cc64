package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func runT(t *testing.T, cfg Config) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run(%+v): %v", cfg, err)
	}
	var tbl bytes.Buffer
	if err := res.WriteTable(&tbl); err != nil {
		t.Fatalf("WriteTable: %v", err)
	}
	t.Logf("\n%s", tbl.String())
	return res
}

func checkLatency(t *testing.T, name string, l Latency, n int) {
	t.Helper()
	if l.N != n {
		t.Errorf("%s: n = %d, want %d", name, l.N, n)
	}
	if !(0 <= l.P50MS && l.P50MS <= l.P99MS && l.P99MS <= l.MaxMS) {
		t.Errorf("%s: want 0 <= p50 <= p99 <= max, got %+v", name, l)
	}
}

func checkThroughput(t *testing.T, res Result, runs, steps int) {
	t.Helper()
	tp := res.Throughput
	if tp == nil || res.Recovery != nil || res.Idle != nil {
		t.Fatalf("want only Throughput set, got %+v", res)
	}
	if tp.RunsCompleted != int64(runs) || tp.RunsFailed != 0 {
		t.Errorf("completed %d (failed %d), want %d (0)", tp.RunsCompleted, tp.RunsFailed, runs)
	}
	if want := int64(runs * steps); tp.Transitions != want || tp.StepExecutions != want {
		t.Errorf("transitions %d, step executions %d, want %d", tp.Transitions, tp.StepExecutions, want)
	}
	if tp.ElapsedS <= 0 || tp.TransitionsPerS <= 0 || tp.RunsPerS <= 0 || tp.SubmitsPerS <= 0 {
		t.Errorf("rates must be positive: %+v", tp)
	}
	if got := tp.TransitionsPerS / tp.RunsPerS; math.Abs(got-float64(steps)) > 1e-6 {
		t.Errorf("transitions/s / runs/s = %v, want %d", got, steps)
	}
	checkLatency(t, "run latency", tp.RunLatency, runs)
	checkLatency(t, "submit latency", tp.SubmitLatency, runs)
	checkLatency(t, "start latency", tp.StartLatency, runs)
	checkLatency(t, "added latency per step", tp.AddedLatencyPerStep, runs*(steps-1))
	checkLatency(t, "hook latency", tp.HookLatency, runs)
	checkLatency(t, "run overhead per step", tp.RunOverheadPerStep, runs)
	s := tp.Storage
	if s.Puts <= 0 || s.BytesWritten <= 0 || s.Total() <= 0 {
		t.Errorf("want object-store requests and bytes, got %+v", s)
	}
	if tp.PerTransition.Puts <= 0 || tp.PerTransition.BytesWritten <= 0 {
		t.Errorf("per transition: %+v", tp.PerTransition)
	}
	// Each run commits at least a submit and a settlement per step (claims
	// are batched, several jobs per transaction).
	if min := uint64(runs * (1 + steps)); tp.Engine.Transactions < min {
		t.Errorf("transactions %d, want at least %d", tp.Engine.Transactions, min)
	}
	if tp.Engine.WALBatches == 0 || tp.Engine.TxnsPerWALObject < 1 {
		t.Errorf("engine: %+v", tp.Engine)
	}
	if res.PeakHeapBytes == 0 {
		t.Error("peak heap is 0")
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"transitions_per_s":`)) {
		t.Errorf("JSON lacks transitions_per_s: %s", b)
	}
}

func TestSaturateMem(t *testing.T) {
	var progress bytes.Buffer
	res := runT(t, Config{Runs: 200, Steps: 3, Concurrency: 8, Submitters: 4, Progress: &progress})
	if res.Scenario != ScenarioSaturate || !strings.HasPrefix(res.Store, "mem://bench-") {
		t.Errorf("scenario %q store %q", res.Scenario, res.Store)
	}
	checkThroughput(t, res, 200, 3)
	if p := progress.String(); p != "" && !strings.HasSuffix(p, "\n") {
		t.Errorf("progress output does not end its line: %q", p)
	}
}

func TestSaturateFileTempDir(t *testing.T) {
	res := runT(t, Config{Store: "file://", Runs: 50, Steps: 2, PayloadSize: 10, StepDuration: time.Millisecond})
	if !strings.HasPrefix(res.Store, "file:///") {
		t.Errorf("store %q, want a temp dir", res.Store)
	}
	checkThroughput(t, res, 50, 2)
	w := res.Throughput.Written
	if w.WALBatches <= 0 || w.WAL < w.WALBatches || math.Abs(w.WAL+w.Prealloc+w.Snapshot-w.Total) > 1e-6*w.Total {
		t.Errorf("written per transition %+v: want WAL >= its batches > 0, and the shares summing to the total", w)
	}
	if got := res.Throughput.RunLatency.P50MS; got < 2 {
		t.Errorf("run latency p50 %vms below 2 steps x 1ms", got)
	}
}

func TestSingleStep(t *testing.T) {
	res := runT(t, Config{Runs: 20, Steps: 1})
	checkThroughput(t, res, 20, 1)
}

func TestSteady(t *testing.T) {
	res := runT(t, Config{Scenario: ScenarioSteady, Runs: 20, Steps: 2, Rate: 100})
	checkThroughput(t, res, 20, 2)
	tp := res.Throughput
	if tp.OfferedRunsPerS != 100 {
		t.Errorf("offered %v", tp.OfferedRunsPerS)
	}
	// Each run is 3 commits: its submit and 2 settlements.
	if want := 3 * tp.Engine.WALWriteMeanMS; tp.CommitFloorMS != want || want <= 0 {
		t.Errorf("commit floor %vms, want %vms (3 WAL writes of %vms)", tp.CommitFloorMS, want, tp.Engine.WALWriteMeanMS)
	}
	if tp.CPUPerTransitionUS <= 0 {
		t.Errorf("CPU per transition %vµs", tp.CPUPerTransitionUS)
	}
	// The WAL writes' quantiles are there, and ordered.
	e := tp.Engine
	if !(e.WALWriteP50MS > 0 && e.WALWriteP50MS <= e.WALWriteP90MS && e.WALWriteP90MS <= e.WALWriteP99MS) {
		t.Errorf("WAL write quantiles p50 %v, p90 %v, p99 %v ms", e.WALWriteP50MS, e.WALWriteP90MS, e.WALWriteP99MS)
	}
	// 20 arrivals at 100/s span 190ms.
	if tp.SubmitElapsedS < 0.18 {
		t.Errorf("submitting took %vs, want about 0.19s", tp.SubmitElapsedS)
	}
}

func TestRecovery(t *testing.T) {
	res := runT(t, Config{Scenario: ScenarioRecovery, LiveJobs: 300, History: 30, Steps: 2})
	r := res.Recovery
	if r == nil || res.Throughput != nil {
		t.Fatalf("want only Recovery set, got %+v", res)
	}
	if r.PendingAfterReopen != 300 {
		t.Errorf("pending after reopen = %d, want 300", r.PendingAfterReopen)
	}
	if r.BuildS <= 0 || r.ReopenS <= 0 || r.FirstClaimS <= 0 {
		t.Errorf("times must be positive: %+v", r)
	}
	if r.HeapAfterReopenBytes == 0 || r.ReopenStorage.Total() == 0 || r.BuildStorage.Puts == 0 {
		t.Errorf("recovery: %+v", r)
	}
	// 300 run records + 300 jobs and their index entries, 30 terminal
	// records...
	if r.KeysAfterReopen < 600 {
		t.Errorf("keys after reopen = %d", r.KeysAfterReopen)
	}
}

func TestIdle(t *testing.T) {
	res := runT(t, Config{Scenario: ScenarioIdle, IdleFor: 300 * time.Millisecond})
	i := res.Idle
	if i == nil {
		t.Fatal("Idle not set")
	}
	if i.IdleS < 0.3 {
		t.Errorf("idle for %vs, want >= 0.3", i.IdleS)
	}
	if v := i.PerMinute.Total; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		t.Errorf("requests per minute = %v", v)
	}
	// Nothing to do: no transactions.
	if i.Engine.Transactions != 0 {
		t.Errorf("an idle runtime committed %d transactions", i.Engine.Transactions)
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Scenario: "burst"}, "Scenario"},
		{Config{Store: "no-scheme"}, "Store"},
		{Config{Runs: -1}, "Runs"},
		{Config{Steps: -3}, "Steps"},
		{Config{Steps: MaxSteps + 1}, "Steps"},
		{Config{PayloadSize: -1}, "PayloadSize"},
		{Config{Concurrency: -1}, "Concurrency"},
		{Config{Submitters: -2}, "Submitters"},
		{Config{NotifyConcurrency: -1}, "NotifyConcurrency"},
		{Config{StepDuration: -time.Second}, "StepDuration"},
		{Config{Scenario: ScenarioSteady}, "Rate"},
		{Config{Scenario: ScenarioSteady, Rate: math.Inf(1)}, "Rate"},
		{Config{Rate: -1}, "Rate"},
		{Config{Scenario: ScenarioRecovery, LiveJobs: -1}, "LiveJobs"},
		{Config{Scenario: ScenarioRecovery, History: -1}, "History"},
		{Config{Scenario: ScenarioIdle, IdleFor: -time.Second}, "IdleFor"},
	} {
		_, err := Run(context.Background(), tc.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.Field != tc.field {
			t.Errorf("Run(%+v) = %v, want a ConfigError on %s", tc.cfg, err, tc.field)
		}
	}
	// A malformed URL of a known shape fails in queue.Open, not as a
	// ConfigError.
	if _, err := Run(context.Background(), Config{Store: "file://relative/dir", Runs: 1}); err == nil || errors.Is(err, ErrInvalidConfig) {
		t.Errorf("relative file URL: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Config{}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.Scenario != ScenarioSaturate || c.Store != DefaultStore || c.Runs != DefaultRuns ||
		c.Steps != DefaultSteps || c.PayloadSize != DefaultPayloadSize ||
		c.Concurrency != DefaultConcurrency || c.Submitters != DefaultSubmitters ||
		c.NotifyConcurrency != DefaultConcurrency ||
		c.LiveJobs != DefaultLiveJobs || c.History != 0 || c.IdleFor != DefaultIdleFor {
		t.Errorf("defaults: %+v", c)
	}
}

func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Runs: 10})
	if err == nil {
		t.Fatal("Run with a cancelled context succeeded")
	}
}

func TestSummarize(t *testing.T) {
	ds := make([]int64, 100)
	for i := range ds {
		ds[i] = int64(100-i) * 1e6 // 100ms .. 1ms, unsorted
	}
	l := summarize(ds)
	if l.N != 100 || l.P50MS != 50 || l.P99MS != 99 || l.MaxMS != 100 || l.MeanMS != 50.5 {
		t.Errorf("summarize = %+v", l)
	}
	if c, _ := (Config{Concurrency: 5}).Normalize(); c.NotifyConcurrency != 5 {
		t.Errorf("NotifyConcurrency defaults to %d, want Concurrency (5)", c.NotifyConcurrency)
	}
	if (summarize(nil) != Latency{}) {
		t.Error("summarize(nil) is not zero")
	}
}
