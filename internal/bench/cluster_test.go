package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// runCluster runs a cluster bench: its helpers are this test binary,
// re-executed (TestMain calls Helper).
func runClusterT(t *testing.T, cfg Config) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run(%+v): %v", cfg, err)
	}
	return res
}

func checkCluster(t *testing.T, res Result, members int, failover bool) {
	t.Helper()
	c := res.Cluster
	if c == nil || res.Throughput == nil {
		t.Fatalf("want Cluster and Throughput, got %+v", res)
	}
	if c.Members != members {
		t.Errorf("members = %d, want %d", c.Members, members)
	}
	if c.Calls <= 0 || c.CallsPerTransition <= 0 {
		t.Errorf("calls to the writer: %d (%v per transition)", c.Calls, c.CallsPerTransition)
	}
	if c.WriterCPUCores <= 0 || c.MembersCPUCores <= 0 || c.WriterPeakRSSBytes == 0 || c.MemberPeakRSSBytes == 0 ||
		c.WriterCPUPerTransitionUS <= 0 || c.MembersCPUPerTransitionUS <= 0 {
		t.Errorf("per-role figures: %+v", c)
	}
	if !failover {
		if c.Failover != nil || c.Handover != nil {
			t.Errorf("failover measured with NoFailover: %+v %+v", c.Failover, c.Handover)
		}
		return
	}
	for name, s := range map[string]*Switch{"failover": c.Failover, "hand-over": c.Handover} {
		if s == nil {
			t.Errorf("%s not measured", name)
			continue
		}
		if s.TakeoverMS <= 0 || s.OutageMS <= 0 || s.ProbeAcks == 0 {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if c.Handover != nil && c.Handover.CloseMS <= 0 {
		t.Errorf("hand-over: the old writer's Close took %vms", c.Handover.CloseMS)
	}
}

// Two members on file://: every run completes, with its steps run in the
// members only (the writer's process runs none), and the failover and
// hand-over are timed.
func TestClusterSaturateFile(t *testing.T) {
	res := runClusterT(t, Config{Store: "file://", Cluster: 2, Runs: 200, Steps: 3, Concurrency: 8, Submitters: 4})
	checkThroughput(t, res, 200, 3)
	checkCluster(t, res, 2, true)
	t.Logf("%+v\nfailover %+v\nhand-over %+v", *res.Cluster, *res.Cluster.Failover, *res.Cluster.Handover)
}

// One member, steady arrivals, no failover: the latencies merge across
// processes.
func TestClusterSteadyFile(t *testing.T) {
	res := runClusterT(t, Config{Store: "file://", Scenario: ScenarioSteady, Rate: 200, Cluster: 1, Runs: 40, Steps: 2, NoFailover: true})
	checkThroughput(t, res, 40, 2)
	checkCluster(t, res, 1, false)
}

// The same on MinIO (the failover takes a few heartbeats there: left to
// the measurements in docs/BENCHMARKS.md).
func TestClusterSaturateS3(t *testing.T) {
	res := runClusterT(t, Config{Store: testenv.S3(t), Cluster: 2, Runs: 100, Steps: 2, Concurrency: 8, Submitters: 4, NoFailover: true})
	checkThroughput(t, res, 100, 2)
	checkCluster(t, res, 2, false)
}

func TestClusterInvalidConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Cluster: -1},
		{Cluster: MaxCluster + 1, Store: "file://"},
		{Cluster: 1}, // mem://
		{Cluster: 1, Store: "file://", Scenario: ScenarioRecovery},
		{Cluster: 1, Store: "file://", Scenario: ScenarioIdle},
	} {
		_, err := Run(context.Background(), cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "Cluster" {
			t.Errorf("Run(%+v) = %v, want a ConfigError on Cluster", cfg, err)
		}
	}
}

// The outage is the longest gap between acknowledged probes across the
// event, and only the window around it counts.
func TestOutage(t *testing.T) {
	ms := int64(time.Millisecond)
	ev := 10_000 * ms
	acks := [][2]int64{
		{0, ev - 2000*ms},    // outside the window
		{0, ev - 900*ms},     // in it
		{0, ev - 2*ms},       // last before the event
		{0, ev + 98*ms},      // first after: 100ms
		{0, ev + 99*ms},      //
		{0, ev + 150*ms},     // 51ms
		{0, ev + 100_000*ms}, // outside
	}
	errs := []probeErr{{At: ev + ms, Msg: "x"}, {At: ev + 3*ms, Msg: "x"}, {At: ev + 90_000*ms, Msg: "y"}}
	s := outage(acks, errs, ev, ev+95*ms)
	if s.TakeoverMS != 95 || s.OutageMS != 100 || s.ProbeAcks != 5 || s.ProbeErrors != 2 || s.ProbeErrorKinds["x"] != 2 {
		t.Errorf("outage = %+v", s)
	}
	// No ack before the event: measured from the event.
	s = outage(acks[3:5], nil, ev, ev+95*ms)
	if s.OutageMS != 98 {
		t.Errorf("outage without an earlier ack = %+v", s)
	}
}
