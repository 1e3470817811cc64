// Command otel runs one three-step workflow with OpenTelemetry wired to the
// SDK's stdout exporters: it prints the run's trace (a "submit" span with
// three "stepwell.step" spans and a "stepwell.hook" span under it) and then
// the runtime's metrics (step durations and outcomes, queue depth, store
// counters).
//
//	go run ./examples/otel
//
// The library depends on the OpenTelemetry API only; a service chooses the
// SDK and exporters, as this program does, and passes its providers with
// runtime.WithTracerProvider and runtime.WithMeterProvider (or sets the
// global ones).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// spanCounter counts ended spans by name, for the summary line.
type spanCounter struct {
	mu     sync.Mutex
	counts map[string]int
	traces map[string]bool
}

func (c *spanCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *spanCounter) OnEnd(s sdktrace.ReadOnlySpan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[s.Name()]++
	c.traces[s.SpanContext().TraceID().String()] = true
}
func (c *spanCounter) Shutdown(context.Context) error   { return nil }
func (c *spanCounter) ForceFlush(context.Context) error { return nil }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The service's side: SDK providers with stdout exporters.
	traceExp, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	counter := &spanCounter{counts: map[string]int{}, traces: map[string]bool{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(traceExp), sdktrace.WithSpanProcessor(counter))
	metricExp, err := stdoutmetric.New(stdoutmetric.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	dir, err := os.MkdirTemp("", "stepwell-otel-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(ctx, "file://"+dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(context.Background())

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if s.Number < 2 {
			return steprunner.Continue([]byte(strings.ToUpper(string(s.Payload)) + "!")), nil
		}
		return steprunner.Succeed(s.Payload), nil
	})
	done := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		select { // delivery is at least once: a repeat must not block
		case done <- o:
		default:
		}
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithTracerProvider(tp), runtime.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}

	// Submit under a span: the run's steps and hook join its trace.
	subCtx, span := tp.Tracer("example").Start(ctx, "submit")
	if _, err := rt.Submit(subCtx, runtime.RunSpec{RunID: "traced-1", Input: []byte("hello")}); err != nil {
		log.Fatal(err)
	}
	span.End()

	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()
	var o terminal.Outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		log.Fatal("timed out waiting for the run")
	}
	// Collect while Run runs (its queue and store gauges are registered
	// for as long as it does), then stop it: every span has ended.
	rm := new(metricdata.ResourceMetrics)
	if err := reader.Collect(ctx, rm); err != nil {
		log.Fatal(err)
	}
	stop()
	if err := <-errc; err != nil {
		log.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("metrics:")
	if err := metricExp.Export(ctx, rm); err != nil {
		log.Fatal(err)
	}
	_ = mp.Shutdown(ctx)

	counter.mu.Lock()
	defer counter.mu.Unlock()
	fmt.Printf("run %s %s with result %q\n", o.RunID, o.Status, o.Result)
	fmt.Printf("spans: %d submit, %d stepwell.step, %d stepwell.hook in %d trace(s)\n",
		counter.counts["submit"], counter.counts["stepwell.step"], counter.counts["stepwell.hook"], len(counter.traces))
}
