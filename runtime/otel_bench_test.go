package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
)

// BenchmarkTelemetryStep measures the telemetry of one step attempt with
// the default (global, unset: no-op) providers.
func BenchmarkTelemetryStep(b *testing.B) {
	o := defaultOptions()
	tel, err := newTelemetry(&o)
	if err != nil {
		b.Fatal(err)
	}
	job := &queue.Job{Headers: map[string]string{HeaderRunID: "r", HeaderStep: "1"}, Attempt: 1, MaxAttempts: 3}
	out := steprunner.Continue(nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		began := time.Now()
		sctx, span := tel.startStep(ctx, job, "r", 1)
		tel.endStep(sctx, span, stepOutcome(false, job, out, nil), nil, began)
	}
}
