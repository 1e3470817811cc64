// Command otel runs one three-step workflow with OpenTelemetry wired as a
// service would wire it: the run's trace is printed by the SDK's stdout
// trace exporter (a "submit" span with three "stepwell.step" spans, one
// per step attempt, and a "stepwell.hook" span under it: one trace), and
// the runtime's metrics are served for Prometheus by the OpenTelemetry
// Prometheus exporter, at http://127.0.0.1:PORT/metrics.
//
//	go run ./examples/otel                       # any free port, printed
//	go run ./examples/otel -port 9464 -scrapes 0 # until Ctrl-C or -serve
//	curl http://127.0.0.1:9464/metrics
//
// After the run it serves /metrics until it has been scraped -scrapes
// times (1 by default; 0: no limit) or -serve has passed (30s by
// default), then exits. Its Runtime keeps running meanwhile, so the queue
// depth and store gauges are live; the step metrics are those of the run:
// stepwell_step_duration_seconds (a histogram) and
// stepwell_step_outcomes_total by outcome, stepwell_queue_depth by state,
// stepwell_store_transactions_total and the other store counters.
//
// The library depends on the OpenTelemetry API only; a service chooses the
// SDK and exporters, as this program does, and passes its providers with
// runtime.WithTracerProvider and runtime.WithMeterProvider (or sets the
// global ones).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// spanCounter counts ended spans by name, and their traces, for the
// summary line.
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
	port := flag.Int("port", 0, "serve /metrics on this `port` of 127.0.0.1 (0: any free port)")
	scrapes := flag.Int("scrapes", 1, "stop serving after this many scrapes (0: no limit)")
	serve := flag.Duration("serve", 30*time.Second, "stop serving after this long")
	flag.Parse()

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()

	// The service's side: a tracer provider printing spans as they end,
	// and a meter provider read by the Prometheus exporter, registered in
	// a registry of its own that /metrics serves.
	traceExp, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	counter := &spanCounter{counts: map[string]int{}, traces: map[string]bool{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(traceExp), sdktrace.WithSpanProcessor(counter))
	registry := prometheus.NewRegistry()
	promExp, err := otelprom.New(otelprom.WithRegisterer(registry),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(promExp))
	defer mp.Shutdown(context.Background())

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

	runCtx, stopRun := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()
	var o terminal.Outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		log.Fatal("timed out waiting for the run")
	case <-ctx.Done():
		log.Fatal("interrupted")
	}
	fmt.Printf("run %s %s with result %q\n", o.RunID, o.Status, o.Result)

	// Serve /metrics while Run runs (its queue and store gauges are
	// registered for as long as it does).
	if err := serveMetrics(ctx, registry, *port, *scrapes, *serve); err != nil {
		log.Fatal(err)
	}

	// Stop Run: every span has ended, the hook's included.
	stopRun()
	if err := <-errc; err != nil {
		log.Fatal(err)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	fmt.Printf("spans: %d submit, %d stepwell.step, %d stepwell.hook in %d trace(s)\n",
		counter.counts["submit"], counter.counts["stepwell.step"], counter.counts["stepwell.hook"], len(counter.traces))
}

// serveMetrics serves the registry's metrics at /metrics on 127.0.0.1:port
// until they have been scraped `scrapes` times (0: no limit), `serve` has
// passed or ctx is done.
func serveMetrics(ctx context.Context, registry *prometheus.Registry, port, scrapes int, serve time.Duration) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	enough := make(chan struct{})
	var served atomic.Int64
	metrics := promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		metrics.ServeHTTP(w, r)
		if n := served.Add(1); scrapes > 0 && n == int64(scrapes) {
			close(enough)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	until := fmt.Sprintf("for %v", serve)
	if scrapes > 0 {
		until = fmt.Sprintf("until scraped %d time(s), at most %v", scrapes, serve)
	}
	fmt.Printf("metrics: http://%s/metrics (serving %s)\n", ln.Addr(), until)

	timer := time.NewTimer(serve)
	defer timer.Stop()
	select {
	case <-enough:
	case <-timer.C:
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	// Shutdown lets a scrape in progress finish its response.
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Printf("served /metrics %d time(s)\n", served.Load())
	return nil
}
