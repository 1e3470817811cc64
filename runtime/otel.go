package runtime

import (
	"context"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// HeaderTraceParent is the reserved job header that carries a run's W3C
// trace context (traceparent) from Submit to its step and notification
// jobs. Like every "workflow." header it never reaches steps or hooks.
const HeaderTraceParent = "workflow.traceparent"

// durationBuckets are the bucket boundaries (seconds) that
// stepwell.step.duration advises: from a millisecond to an hour. The SDK's
// default ones (0, 5, 10, 25 ... 10000) suit milliseconds, and would put
// every step shorter than 5 s in one bucket. A service's View overrides
// them.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// instrumentationName names the tracer and meter of the runtime.
const instrumentationName = "github.com/stepwell/stepwell/runtime"

// Span and attribute names.
const (
	spanStep     = "stepwell.step"
	spanHook     = "stepwell.hook"
	attrRunID    = "stepwell.run_id"
	attrStep     = "stepwell.step"
	attrAttempt  = "stepwell.attempt"
	attrOutcome  = "stepwell.outcome"
	attrStatus   = "stepwell.status"
	attrState    = "state"
	attrKind     = "kind"
	attrOutcomeM = "outcome"
)

// Step outcomes, as recorded on spans and metrics.
const (
	outcomeContinue  = "continue"
	outcomeSucceed   = "succeed"
	outcomeFail      = "fail"
	outcomeCancel    = "cancel"
	outcomeAwait     = "await"
	outcomeSpawn     = "spawn"
	outcomeError     = "error"     // retried
	outcomeDead      = "dead"      // the last attempt's error: the run fails
	outcomeCancelled = "cancelled" // cancelled from outside
)

var allOutcomes = []string{outcomeContinue, outcomeSucceed, outcomeFail, outcomeCancel,
	outcomeAwait, outcomeSpawn, outcomeError, outcomeDead, outcomeCancelled}

// telemetry holds the runtime's tracer and instruments. Options and
// attribute sets are built once, so that recording allocates nothing
// beyond what the providers do.
type telemetry struct {
	tracer trace.Tracer
	// idle is the global TracerProvider that tracer comes from, when no
	// WithTracerProvider was given and no provider was set globally by
	// New (nil otherwise). While it is still the global one, its tracer
	// makes only non-recording spans: the span work is skipped (see
	// tracing). Once otel.SetTracerProvider sets one, tracer delegates
	// to it, as it always did.
	idle     trace.TracerProvider
	meter    metric.Meter
	prop     propagation.TraceContext
	duration metric.Float64Histogram
	outcomes metric.Int64Counter
	record   map[string][]metric.RecordOption // by outcome
	add      map[string][]metric.AddOption    // by outcome
}

var (
	stepStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	hookStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

func newTelemetry(o *options) (*telemetry, error) {
	tp, mp := o.tracerProvider, o.meterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &telemetry{
		tracer: tp.Tracer(instrumentationName),
		idle:   unsetGlobal(tp),
		meter:  mp.Meter(instrumentationName),
		record: make(map[string][]metric.RecordOption, len(allOutcomes)),
		add:    make(map[string][]metric.AddOption, len(allOutcomes)),
	}
	var err error
	if t.duration, err = t.meter.Float64Histogram("stepwell.step.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of step attempts, by outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return nil, err
	}
	if t.outcomes, err = t.meter.Int64Counter("stepwell.step.outcomes",
		metric.WithUnit("{attempt}"), metric.WithDescription("Step attempts settled, by outcome.")); err != nil {
		return nil, err
	}
	for _, k := range allOutcomes {
		opt := metric.WithAttributeSet(attribute.NewSet(attribute.String(attrOutcomeM, k)))
		t.record[k] = []metric.RecordOption{opt}
		t.add[k] = []metric.AddOption{opt}
	}
	return t, nil
}

// unsetGlobal returns tp if it is the global TracerProvider that
// otel.GetTracerProvider returns while none is set (otel's internal
// delegating provider), else nil.
func unsetGlobal(tp trace.TracerProvider) trace.TracerProvider {
	t := reflect.TypeOf(tp)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().PkgPath() != "go.opentelemetry.io/otel/internal/global" ||
		tp != otel.GetTracerProvider() {
		return nil
	}
	return tp
}

// tracing reports whether a span started now could record: false while
// the runtime's tracer is the global one and no TracerProvider has been
// set globally (otel.SetTracerProvider). Its spans would then be
// non-recording, with the parent's span context, and ending them does
// nothing: the runtime skips starting them (an allocation or three per
// step and hook) and carries the parent's span context alone.
func (t *telemetry) tracing() bool {
	return t.idle == nil || otel.GetTracerProvider() != t.idle
}

// offSpan is the span of a step or hook while tracing is off: it records
// nothing.
var offSpan = trace.SpanFromContext(context.Background())

// stepOutcome names how an attempt settled.
func stepOutcome(cancelled bool, job *queue.Job, out steprunner.Outcome, stepErr error) string {
	switch {
	case cancelled && !(stepErr == nil && out.Kind() == steprunner.KindCancel):
		return outcomeCancelled
	case stepErr != nil && !steprunner.IsPermanent(stepErr) && job.Attempt < job.MaxAttempts:
		return outcomeError
	case stepErr != nil:
		return outcomeDead
	}
	switch out.Kind() {
	case steprunner.KindContinue:
		return outcomeContinue
	case steprunner.KindAwait:
		return outcomeAwait
	case steprunner.KindSpawn:
		return outcomeSpawn
	case steprunner.KindSucceed:
		return outcomeSucceed
	case steprunner.KindFail:
		return outcomeFail
	case steprunner.KindCancel:
		return outcomeCancel
	}
	return outcomeError
}

// traceParent returns the traceparent of ctx's span ("" without a valid
// one).
func (t *telemetry) traceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	t.prop.Inject(ctx, c)
	return c["traceparent"]
}

// parent returns ctx carrying the remote span context of a job's
// traceparent header, if any.
func (t *telemetry) parent(ctx context.Context, headers map[string]string) context.Context {
	tp := headers[HeaderTraceParent]
	if tp == "" {
		return ctx
	}
	return t.prop.Extract(ctx, traceParentCarrier(tp))
}

// traceParentCarrier is a TextMapCarrier holding only a traceparent.
type traceParentCarrier string

func (c traceParentCarrier) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}
func (traceParentCarrier) Set(string, string) {}
func (traceParentCarrier) Keys() []string     { return []string{"traceparent"} }

// startStep starts the span of a step attempt.
func (t *telemetry) startStep(ctx context.Context, job *queue.Job, runID string, n uint32) (context.Context, trace.Span) {
	if !t.tracing() {
		return t.parent(ctx, job.Headers), offSpan
	}
	ctx, span := t.tracer.Start(t.parent(ctx, job.Headers), spanStep, stepStart...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrRunID, runID), attribute.Int64(attrStep, int64(n)),
			attribute.Int64(attrAttempt, int64(job.Attempt)))
	}
	return ctx, span
}

// endStep records a settled attempt on its span and the step metrics.
func (t *telemetry) endStep(ctx context.Context, span trace.Span, outcome string, stepErr error, began time.Time) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrOutcome, outcome))
		if stepErr != nil {
			span.RecordError(stepErr)
			span.SetStatus(codes.Error, stepErr.Error())
		}
	}
	span.End()
	t.duration.Record(ctx, time.Since(began).Seconds(), t.record[outcome]...)
	t.outcomes.Add(ctx, 1, t.add[outcome]...)
}

// startHook starts the span of a hook delivery.
func (t *telemetry) startHook(ctx context.Context, job *queue.Job, o *terminal.Outcome) (context.Context, trace.Span) {
	if !t.tracing() {
		return t.parent(ctx, job.Headers), offSpan
	}
	ctx, span := t.tracer.Start(t.parent(ctx, job.Headers), spanHook, hookStart...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrRunID, o.RunID), attribute.Int64(attrStep, int64(o.FinalStep)),
			attribute.Int64(attrAttempt, int64(job.Attempt)), attribute.String(attrStatus, o.Status.String()))
	}
	return ctx, span
}

func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// observe registers the observable instruments (queue depth, store
// counters) for as long as Run runs; the returned func unregisters them.
func (t *telemetry) observe(q *queue.Queue, stepQueue string) (func(), error) {
	m := t.meter
	depth, err := m.Int64ObservableGauge("stepwell.queue.depth", metric.WithUnit("{job}"),
		metric.WithDescription("Step jobs in the runtime's step queue, by state."))
	if err != nil {
		return nil, err
	}
	walBatches, err := m.Int64ObservableCounter("stepwell.store.wal_batches", metric.WithUnit("{batch}"),
		metric.WithDescription("WAL batches written by this process."))
	if err != nil {
		return nil, err
	}
	txns, err := m.Int64ObservableCounter("stepwell.store.transactions", metric.WithUnit("{transaction}"),
		metric.WithDescription("Transactions committed by this process; divided by stepwell.store.wal_batches, the transactions per WAL write."))
	if err != nil {
		return nil, err
	}
	writeTime, err := m.Float64ObservableCounter("stepwell.store.wal_write_time", metric.WithUnit("s"),
		metric.WithDescription("Time WAL batch writes took, from start to durability; divided by stepwell.store.wal_batches, the mean WAL write: a commit's latency floor."))
	if err != nil {
		return nil, err
	}
	requests, err := m.Int64ObservableCounter("stepwell.store.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Object-store requests, by kind."))
	if err != nil {
		return nil, err
	}
	calls, err := m.Int64ObservableCounter("stepwell.cluster.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls this process made to its cluster's writer as a member (queue.WithCluster; 0 otherwise); divided by step transitions, what a member costs."))
	if err != nil {
		return nil, err
	}
	queueAttr := attribute.String("queue", stepQueue)
	state := func(s string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(queueAttr, attribute.String(attrState, s)))
	}
	kind := func(s string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String(attrKind, s)))
	}
	pending, scheduled, claimed, dead := state("pending"), state("scheduled"), state("claimed"), state("dead")
	put, get, list, del, head := kind("put"), kind("get"), kind("list"), kind("delete"), kind("head")
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if s, err := q.Stats(ctx, stepQueue); err == nil {
			o.ObserveInt64(depth, s.Pending, pending)
			o.ObserveInt64(depth, s.Scheduled, scheduled)
			o.ObserveInt64(depth, s.Claimed, claimed)
			o.ObserveInt64(depth, s.Dead, dead)
		}
		ss := q.StorageStats()
		o.ObserveInt64(walBatches, int64(ss.WALBatches))
		o.ObserveInt64(txns, int64(ss.Transactions))
		o.ObserveFloat64(writeTime, ss.WALWriteTime.Seconds())
		o.ObserveInt64(requests, ss.Puts, put)
		o.ObserveInt64(requests, ss.Gets, get)
		o.ObserveInt64(requests, ss.Lists, list)
		o.ObserveInt64(requests, ss.Deletes, del)
		o.ObserveInt64(requests, ss.Heads, head)
		o.ObserveInt64(calls, ss.ClusterCalls)
		return nil
	}, depth, walBatches, txns, writeTime, requests, calls)
	if err != nil {
		return nil, err
	}
	return func() { _ = reg.Unregister() }, nil
}
