package bench

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stepwell/stepwell/internal/testenv"
)

func TestMain(m *testing.M) {
	if code, ok := Helper(); ok { // a process of a cluster bench
		os.Exit(code)
	}
	testenv.Main(m)
}

// TestMeasure runs one bench described by the JSON Config in
// $STEPWELL_BENCH (durations in nanoseconds) and prints its table and JSON.
// It runs the same code as `stepwell bench`, under the test harness, for
// profiles and for the MinIO figures in docs/BENCHMARKS.md:
//
//	STEPWELL_BENCH='{"Store":"file://","Runs":5000,"Steps":3,"Concurrency":32}' \
//	    go test -run TestMeasure -count=1 -v -timeout 30m ./internal/bench/
//
// Add -cpuprofile cpu.out to profile it. Skipped without the variable.
// Store "s3" or "gs" measures a fresh store on the local MinIO or GCS
// emulator that the test harness starts (see internal/testenv).
func TestMeasure(t *testing.T) {
	spec := os.Getenv("STEPWELL_BENCH")
	if spec == "" {
		t.Skip("set STEPWELL_BENCH to a JSON Config to measure")
	}
	var cfg Config
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatalf("STEPWELL_BENCH: %v", err)
	}
	switch cfg.Store {
	case "s3":
		cfg.Store = testenv.S3(t)
	case "gs":
		cfg.Store = testenv.GCS(t)
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
