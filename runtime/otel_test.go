package runtime_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// otelSetup returns a span recorder and a manual metric reader wired into
// runtime options.
func otelSetup(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider, *sdkmetric.ManualReader, []runtime.Option) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return sr, tp, reader, []runtime.Option{runtime.WithTracerProvider(tp), runtime.WithMeterProvider(mp)}
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func spansNamed(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// TestOTelTraceOneRun: a three-step run submitted under a span is one
// trace: three step spans and a hook span, children of the Submit span,
// with their attributes; the step metrics count the attempts; the trace
// header reaches neither steps nor the hook.
func TestOTelTraceOneRun(t *testing.T) {
	sr, tp, reader, opts := otelSetup(t)
	q, log, hook, rt := chainSetup(t, 2, opts...)
	startRun(t, rt)

	ctx, parent := tp.Tracer("test").Start(context.Background(), "submit")
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "traced", Input: []byte("x"), Headers: map[string]string{"user": "u"}}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	o := hook.wait(t, "traced")
	checkNoReservedHeaders(t, "Outcome.Headers", o.Headers)
	if o.Headers["user"] != "u" {
		t.Errorf("Outcome.Headers = %v", o.Headers)
	}
	for _, s := range log.of("traced") {
		checkNoReservedHeaders(t, "Step.Headers", s.Headers)
	}
	testenv.Eventually(t, waitTimeout, "3 step spans and a hook span", func() bool {
		return len(spansNamed(sr, "stepwell.step")) == 3 && len(spansNamed(sr, "stepwell.hook")) == 1
	})
	want := parent.SpanContext()
	steps := map[int64]string{}
	for _, s := range append(spansNamed(sr, "stepwell.step"), spansNamed(sr, "stepwell.hook")...) {
		if s.SpanContext().TraceID() != want.TraceID() {
			t.Errorf("span %s in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), want.TraceID())
		}
		if s.Parent().SpanID() != want.SpanID() {
			t.Errorf("span %s has parent %s, want the Submit span %s", s.Name(), s.Parent().SpanID(), want.SpanID())
		}
		a := spanAttrs(s)
		if a["stepwell.run_id"].AsString() != "traced" {
			t.Errorf("span %s: run_id %v", s.Name(), a["stepwell.run_id"])
		}
		if a["stepwell.attempt"].AsInt64() != 1 {
			t.Errorf("span %s: attempt %v", s.Name(), a["stepwell.attempt"])
		}
		if s.Name() == "stepwell.step" {
			steps[a["stepwell.step"].AsInt64()] = a["stepwell.outcome"].AsString()
			if s.Status().Code == codes.Error {
				t.Errorf("step span %v has status Error", a["stepwell.step"])
			}
		}
	}
	if steps[0] != "continue" || steps[1] != "continue" || steps[2] != "succeed" {
		t.Errorf("step outcomes = %v, want continue, continue, succeed", steps)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	hist, ok := got["stepwell.step.duration"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("no stepwell.step.duration histogram: %v", got)
	}
	var n uint64
	for _, dp := range hist.DataPoints {
		n += dp.Count
		// Buckets in seconds: these sub-second attempts land in buckets
		// below a second (the SDK's default boundaries, made for
		// milliseconds, would put them all in the 0-5 s one).
		if len(dp.Bounds) == 0 || dp.Bounds[0] > 0.001 || dp.Bounds[len(dp.Bounds)-1] < 600 {
			t.Errorf("step duration buckets %v, want 1 ms to at least 10 min", dp.Bounds)
		}
		var below uint64
		for i, b := range dp.Bounds {
			if b < 1 {
				below += dp.BucketCounts[i]
			}
		}
		if below != dp.Count {
			t.Errorf("step duration: %d of %d sub-second attempts in buckets below 1 s (bounds %v, counts %v)",
				below, dp.Count, dp.Bounds, dp.BucketCounts)
		}
	}
	if n != 3 {
		t.Errorf("step duration histogram counts %d attempts, want 3", n)
	}
	counts := map[string]int64{}
	for _, dp := range got["stepwell.step.outcomes"].(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value("outcome")
		counts[v.AsString()] += dp.Value
	}
	if counts["continue"] != 2 || counts["succeed"] != 1 || len(counts) != 2 {
		t.Errorf("outcome counter = %v, want continue 2, succeed 1", counts)
	}
	for _, name := range []string{"stepwell.queue.depth", "stepwell.store.transactions", "stepwell.store.wal_batches", "stepwell.store.wal_write_time", "stepwell.store.requests", "stepwell.cluster.calls"} {
		if got[name] == nil {
			t.Errorf("no %s metric", name)
		}
	}
	// Commit latency: the WAL writes of the run's commits took some time.
	// A member writes no WAL (the writer process does): its store counters
	// are zero by design (queue.StorageStats).
	if memberMode() {
		if ss := q.StorageStats(); ss.ClusterCalls == 0 || ss.WALBatches != 0 {
			t.Errorf("member's StorageStats = %+v, want cluster calls and no WAL batches", ss)
		}
		if c, ok := got["stepwell.cluster.calls"].(metricdata.Sum[int64]); !ok || len(c.DataPoints) != 1 || c.DataPoints[0].Value <= 0 {
			t.Errorf("stepwell.cluster.calls = %+v, want one positive sum in a member", got["stepwell.cluster.calls"])
		}
	} else if wt, ok := got["stepwell.store.wal_write_time"].(metricdata.Sum[float64]); !ok || len(wt.DataPoints) != 1 || wt.DataPoints[0].Value <= 0 {
		t.Errorf("stepwell.store.wal_write_time = %+v, want one positive sum", got["stepwell.store.wal_write_time"])
	}
	_ = q
}

// TestOTelFailedAttemptSpan: a failed attempt's span records the error
// with status Error and outcome "error"; the retry is in the same trace.
func TestOTelFailedAttemptSpan(t *testing.T) {
	sr, tp, _, opts := otelSetup(t)
	q := openQueue(t, memURL())
	hook := &hookRecorder{}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Attempt == 1 {
			return steprunner.Outcome{}, errors.New("flaky")
		}
		return steprunner.Succeed(nil), nil
	})
	rt := newRuntime(t, q, runner, hook, opts...)
	startRun(t, rt)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "submit")
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "flaky", MaxAttemptsPerStep: 3}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	hook.wait(t, "flaky")
	testenv.Eventually(t, waitTimeout, "two step spans", func() bool { return len(spansNamed(sr, "stepwell.step")) == 2 })
	for _, s := range spansNamed(sr, "stepwell.step") {
		if s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("attempt span in another trace")
		}
		a := spanAttrs(s)
		switch a["stepwell.attempt"].AsInt64() {
		case 1:
			if s.Status().Code != codes.Error || a["stepwell.outcome"].AsString() != "error" {
				t.Errorf("failed attempt: status %v, outcome %v", s.Status(), a["stepwell.outcome"])
			}
			if len(s.Events()) == 0 || s.Events()[0].Name != "exception" {
				t.Errorf("failed attempt: no error event: %v", s.Events())
			}
		case 2:
			if s.Status().Code == codes.Error || a["stepwell.outcome"].AsString() != "succeed" {
				t.Errorf("second attempt: status %v, outcome %v", s.Status(), a["stepwell.outcome"])
			}
		}
	}
}

// TestOTelNoSpanNoHeader: a Submit without a span context writes no trace
// header, and the default (global, no-op) providers work.
func TestOTelNoSpanNoHeader(t *testing.T) {
	q, log, hook, rt := chainSetup(t, 1)
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "plain"})
	o := hook.wait(t, "plain")
	checkNoReservedHeaders(t, "Outcome.Headers", o.Headers)
	if len(log.of("plain")) != 2 {
		t.Errorf("steps = %d, want 2", len(log.of("plain")))
	}
	_ = q
}

// TestOTelGlobalProviderSetAfterNew: a Runtime made without
// WithTracerProvider traces once a TracerProvider is set globally, even
// after New (the runtime skips span work only while none is set).
func TestOTelGlobalProviderSetAfterNew(t *testing.T) {
	_, log, hook, rt := chainSetup(t, 1)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	startRun(t, rt)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "submit")
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "global"}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	hook.wait(t, "global")
	if len(log.of("global")) != 2 {
		t.Fatalf("steps = %d, want 2", len(log.of("global")))
	}
	testenv.Eventually(t, waitTimeout, "2 step spans and a hook span", func() bool {
		return len(spansNamed(sr, "stepwell.step")) == 2 && len(spansNamed(sr, "stepwell.hook")) == 1
	})
	for _, s := range append(spansNamed(sr, "stepwell.step"), spansNamed(sr, "stepwell.hook")...) {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s has parent %s, want the Submit span", s.Name(), s.Parent().SpanID())
		}
	}
}
