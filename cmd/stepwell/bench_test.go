package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The bench subcommand runs a small workload end to end and reports counts
// that add up; bad flags are usage errors.
func TestBenchCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--runs", "30", "--steps", "2", "--quiet", "--json"},
		func(string) string { return "" }, &out, &errb)
	if code != 0 {
		t.Fatalf("bench exit %d: %s", code, errb.String())
	}
	var res struct {
		Throughput struct {
			Runs            int     `json:"runs"`
			Transitions     int     `json:"transitions"`
			RunsCompleted   int     `json:"runs_completed"`
			TransitionsPerS float64 `json:"transitions_per_s"`
		} `json:"throughput"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json output: %v\n%s", err, out.String())
	}
	tp := res.Throughput
	if tp.Runs != 30 || tp.RunsCompleted != 30 || tp.Transitions != 60 || tp.TransitionsPerS <= 0 {
		t.Fatalf("bench result = %+v", tp)
	}
	if code := run([]string{"bench", "--runs", "-1"}, func(string) string { return "" }, &out, &errb); code != exitUsage {
		t.Fatalf("bench --runs -1: exit %d, want %d", code, exitUsage)
	}
}

// --cluster runs the bench across processes (this test binary,
// re-executed: see TestMain) and reports the cluster's figures.
func TestBenchCluster(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--store", "file://", "--cluster", "1", "--failover=false", "--runs", "30", "--steps", "2", "--quiet", "--json"},
		func(string) string { return "" }, &out, &errb)
	if code != 0 {
		t.Fatalf("bench --cluster 1 exit %d: %s", code, errb.String())
	}
	var res struct {
		Throughput struct {
			RunsCompleted int `json:"runs_completed"`
		} `json:"throughput"`
		Cluster *struct {
			Members            int      `json:"members"`
			CallsPerTransition float64  `json:"calls_per_transition"`
			Failover           *float64 `json:"failover"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json output: %v\n%s", err, out.String())
	}
	if res.Throughput.RunsCompleted != 30 || res.Cluster == nil || res.Cluster.Members != 1 ||
		res.Cluster.CallsPerTransition <= 0 || res.Cluster.Failover != nil {
		t.Fatalf("bench --cluster result: %s", out.String())
	}
	if code := run([]string{"bench", "--cluster", "1"}, func(string) string { return "" }, &out, &errb); code != exitUsage {
		t.Fatalf("bench --cluster 1 on mem://: exit %d, want %d", code, exitUsage)
	}
}
