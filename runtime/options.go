package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepwell/stepwell/queue"
)

// Option configures New.
type Option func(*options) error

type options struct {
	queueName         string
	notifyQueueName   string
	maxConcurrent     int
	notifyConcurrency int
	pollInterval      time.Duration
	retention         time.Duration
	drainTimeout      time.Duration
	stepTimeout       time.Duration
	noChain           bool
	maxSignalPayload  int
	memoLimits        MemoLimits
	spawnLimits       SpawnLimits
	logger            *slog.Logger
	errorHandler      ErrorHandler
	now               func() time.Time
	tracerProvider    trace.TracerProvider
	meterProvider     metric.MeterProvider
	workerName        string // run history: HistoryEntry.Worker
	// beforeSettle, if set, is called with each step job after its step
	// returned and before it is settled (tests: see export_test.go).
	beforeSettle func(ctx context.Context, job *queue.Job)
}

func defaultOptions() options {
	return options{
		queueName:         "workflow-steps",
		notifyQueueName:   "workflow-notify",
		maxConcurrent:     16,
		notifyConcurrency: 16,
		pollInterval:      250 * time.Millisecond,
		retention:         24 * time.Hour,
		drainTimeout:      DefaultDrainTimeout,
		maxSignalPayload:  DefaultMaxSignalPayload,
		memoLimits:        MemoLimits{}.withDefaults(),
		spawnLimits:       SpawnLimits{}.withDefaults(),
		logger:            slog.Default(),
		now:               time.Now,
		workerName:        defaultWorkerName(),
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// WithQueueName sets the step queue that this Runtime serves: the queue
// of the steps its Run executes, of runs it submits without a
// RunSpec.Queue, and of next steps that an Outcome does not send elsewhere
// (steprunner.Outcome.OnQueue). Runtimes of several step queues may share
// a store, in one process or many: each serves its own. The name must
// pass ValidateQueueName (else ErrInvalidOption wrapping
// ErrInvalidQueueName). Defaults to "workflow-steps".
func WithQueueName(name string) Option {
	return func(o *options) error {
		if err := ValidateQueueName(name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		o.queueName = name
		return nil
	}
}

// WithNotifyQueueName sets the queue that carries terminal notifications.
// The name must pass ValidateQueueName (else ErrInvalidOption wrapping
// ErrInvalidQueueName) and differ from the step queue's (WithQueueName).
// Defaults to "workflow-notify".
func WithNotifyQueueName(name string) Option {
	return func(o *options) error {
		if err := ValidateQueueName(name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		o.notifyQueueName = name
		return nil
	}
}

// WithMaxConcurrentSteps bounds how many steps Run executes at once.
// Defaults to 16.
func WithMaxConcurrentSteps(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalid("max concurrent steps %d must be at least 1", n)
		}
		o.maxConcurrent = n
		return nil
	}
}

// WithNotifyConcurrency bounds how many hook calls Run makes at once.
// Defaults to 16. Each notification costs two commits (its claim and its
// acknowledgement), so on a store with slow writes a low value makes
// notifications lag behind runs ending at a high rate.
func WithNotifyConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalid("notify concurrency %d must be at least 1", n)
		}
		o.notifyConcurrency = n
		return nil
	}
}

// WithStepChaining sets whether a step that continues at once (Continue,
// or ContinueAfter with no delay) hands its run's next step to the same
// worker slot: the settlement transaction also claims the next step, which
// then runs without a claim commit of its own. This halves the commits
// per step and keeps a started run moving ahead of runs not yet started
// (depth first); a step of higher priority waiting in the queue still goes
// first. Off, every step waits in the queue in FIFO order within its
// priority. Defaults to true.
func WithStepChaining(on bool) Option {
	return func(o *options) error {
		o.noChain = !on
		return nil
	}
}

// WithPollInterval sets the upper bound on how long an idle Run sleeps
// before looking for work; arrivals wake it at once. Defaults to 250ms.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("poll interval %v must be positive", d)
		}
		o.pollInterval = d
		return nil
	}
}

// WithTerminalRetention sets how long a finished run's record and outcome
// are kept: Status reports it, and a re-Submit of the same run ID and input
// is a no-op, during this window. After it the run ID can be reused.
// Defaults to 24h.
func WithTerminalRetention(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("terminal retention %v must be positive", d)
		}
		o.retention = d
		return nil
	}
}

// DefaultDrainTimeout is WithDrainTimeout's default: short enough that Run
// returns within a Kubernetes pod's default termination grace period (30
// s) with time left to settle and close the store.
const DefaultDrainTimeout = 25 * time.Second

// WithDrainTimeout bounds how long Run waits for running steps after its
// ctx is done. When it passes, their contexts are cancelled (cause
// steprunner.ErrShutdown) and, once they return, their jobs are released
// for another attempt that does not count against the step's attempt
// limit. Defaults to DefaultDrainTimeout; 0 waits for running steps
// without bound.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return invalid("drain timeout %v must not be negative", d)
		}
		o.drainTimeout = d
		return nil
	}
}

// WithStepTimeout sets the step timeout of runs submitted without one
// (RunSpec.StepTimeout 0): each attempt of their steps gets this deadline,
// with cause steprunner.ErrStepTimeout, and an attempt that has not
// returned by then fails and is retried (see RunSpec.StepTimeout). It
// applies where the step runs: the Runtime that executes it, not the one
// that submitted the run. Defaults to 0: no timeout.
func WithStepTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return invalid("step timeout %v must not be negative", d)
		}
		o.stepTimeout = d
		return nil
	}
}

// WithLogger sets where Run logs what it cannot return: failures of its
// background work (expiry, indexing) and step jobs it refuses to run (a
// step of an ended run requeued by hand is dead-lettered with a reason, and
// logged). Defaults to slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return invalid("logger must not be nil")
		}
		o.logger = l
		return nil
	}
}

// WithMaxSignalPayload bounds the payload of a Signal: a larger one is
// refused with a *SignalTooLargeError. It must fit the queue's value limit
// (the signal becomes a step payload). Defaults to 1 MiB.
func WithMaxSignalPayload(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return invalid("max signal payload %d must not be negative", n)
		}
		o.maxSignalPayload = n
		return nil
	}
}

// WithTracerProvider sets where the runtime's spans go: one span
// "stepwell.step" per step attempt and one "stepwell.hook" per hook
// delivery, all in the trace of the ctx that Submit got (see
// HeaderTraceParent). Defaults to otel.GetTracerProvider(): the global
// provider, a no-op unless the service sets one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error {
		if tp == nil {
			return invalid("tracer provider must not be nil")
		}
		o.tracerProvider = tp
		return nil
	}
}

// WithMeterProvider sets where the runtime's metrics go (their names start
// "stepwell."; see the package documentation). Defaults to
// otel.GetMeterProvider(): the global provider, a no-op unless the service
// sets one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error {
		if mp == nil {
			return invalid("meter provider must not be nil")
		}
		o.meterProvider = mp
		return nil
	}
}
