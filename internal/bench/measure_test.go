package bench

import (
	"context"
	"encoding/json"
	"os"
	"testing"
)

// TestMeasure runs one bench described by the JSON Config in
// $STEPWELL_BENCH (durations in nanoseconds) and prints its table and JSON.
// It is how docs/BENCHMARKS.md was measured until `stepwell bench` exists:
//
//	STEPWELL_BENCH='{"Store":"file://","Runs":5000,"Steps":3,"Concurrency":32}' \
//	    go test -run TestMeasure -count=1 -v -timeout 30m ./internal/bench/
//
// Add -cpuprofile cpu.out to profile it. Skipped without the variable.
func TestMeasure(t *testing.T) {
	spec := os.Getenv("STEPWELL_BENCH")
	if spec == "" {
		t.Skip("set STEPWELL_BENCH to a JSON Config to measure")
	}
	var cfg Config
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatalf("STEPWELL_BENCH: %v", err)
	}
	cfg.Progress = os.Stderr
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := res.WriteTable(os.Stdout); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	os.Stdout.Write(append(b, '\n'))
}
