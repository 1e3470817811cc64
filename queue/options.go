package queue

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Option configures Open.
type Option func(*options) error

type options struct {
	lease          time.Duration
	maxAttempts    uint32
	backoffBase    time.Duration
	backoffMax     time.Duration
	takeover       bool
	acceptTailLoss bool
	heartbeat      time.Duration
	largeValue     int
	maxValue       int
	snapshotBytes  int64
	snapshotObjs   int
	writeRetry     time.Duration
	logger         *slog.Logger
	queues         map[string]QueueConfig
	pollInterval   time.Duration
	now            func() time.Time // injected clock (tests)
	readOnly       bool
	cluster        *ClusterConfig
	// member is, on the writer, the cluster member a call came from: the
	// holder of the claims it grants ("" for this process's own calls).
	member string
	// clusterAddr and clusterSecret go into the owner object when this
	// process opens the store as the cluster's writer.
	clusterAddr   string
	clusterSecret []byte
	// clusterDialer, set by tests, makes a member's connections.
	clusterDialer func(ctx context.Context, addr string) (net.Conn, error)
}

func defaultOptions() options {
	return options{
		lease:        30 * time.Second,
		maxAttempts:  5,
		backoffBase:  time.Second,
		backoffMax:   5 * time.Minute,
		heartbeat:    2 * time.Second,
		largeValue:   256 << 10,
		maxValue:     64 << 20,
		pollInterval: time.Second,
		now:          time.Now,
	}
}

// QueueConfig holds one named queue's settings. Zero fields take the
// Queue-wide defaults (WithLease, WithMaxAttempts, WithRetryBackoff) or, for
// retentions, their documented defaults.
type QueueConfig struct {
	Lease       time.Duration
	MaxAttempts uint32
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// DoneRetention keeps acknowledged jobs (without their payloads) this
	// long for inspection. Defaults to 0: an acknowledged job is deleted in
	// the transaction that acknowledges it.
	DoneRetention time.Duration
	// DeadRetention deletes dead-lettered jobs this long after they died.
	// Defaults to 0: dead jobs are kept until requeued or deleted.
	DeadRetention time.Duration
}

// WithQueueConfig sets the settings of the named queue, overriding the
// defaults for it.
func WithQueueConfig(name string, cfg QueueConfig) Option {
	return func(o *options) error {
		if name == "" {
			return invalid("queue name must not be empty")
		}
		if cfg.Lease < 0 || cfg.BackoffBase < 0 || cfg.BackoffMax < 0 || cfg.DoneRetention < 0 || cfg.DeadRetention < 0 {
			return invalid("queue %q: durations must not be negative", name)
		}
		if cfg.BackoffBase > 0 && cfg.BackoffMax > 0 && cfg.BackoffMax < cfg.BackoffBase {
			return invalid("queue %q: backoff max %v below base %v", name, cfg.BackoffMax, cfg.BackoffBase)
		}
		if o.queues == nil {
			o.queues = map[string]QueueConfig{}
		}
		o.queues[name] = cfg
		return nil
	}
}

// WithPollInterval sets the upper bound on how long a blocking claim sleeps
// before looking again; arrivals and due jobs wake it sooner. Defaults to 1s.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("poll interval %v must be positive", d)
		}
		o.pollInterval = d
		return nil
	}
}

func (o *options) logf(format string, args ...any) {
	l := o.logger
	if l == nil {
		l = slog.Default()
	}
	l.Warn(fmt.Sprintf(format, args...))
}

// config returns the effective settings of a queue.
func (o *options) config(name string) QueueConfig {
	c := o.queues[name]
	if c.Lease == 0 {
		c.Lease = o.lease
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = o.maxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = o.backoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(o.backoffMax, c.BackoffBase)
	}
	return c
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// WithLease sets the default claim lease of every queue. Defaults to 30s.
func WithLease(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("lease %v must be positive", d)
		}
		o.lease = d
		return nil
	}
}

// WithMaxAttempts sets the default per-job attempt limit. Defaults to 5.
func WithMaxAttempts(n uint32) Option {
	return func(o *options) error {
		if n == 0 {
			return invalid("max attempts must be at least 1")
		}
		o.maxAttempts = n
		return nil
	}
}

// WithRetryBackoff sets the exponential backoff between attempts: base after
// the first failure, doubling, capped at max, with jitter. Defaults to 1s
// and 5m.
func WithRetryBackoff(base, max time.Duration) Option {
	return func(o *options) error {
		if base <= 0 || max < base {
			return invalid("retry backoff base %v, max %v: need 0 < base <= max", base, max)
		}
		o.backoffBase, o.backoffMax = base, max
		return nil
	}
}

// WithTakeover makes Open fence a live writer on a bucket store instead of
// failing with ErrStoreLocked. The previous writer's next write fails with
// ErrFenced; nothing it had acknowledged is lost. Has no effect on file://
// stores, whose lock dies with its process.
func WithTakeover() Option {
	return func(o *options) error { o.takeover = true; return nil }
}

// WithAcceptTailLoss opens a store whose log ends below the sequence its
// owner object recorded as durable, which Open otherwise refuses with a
// TailLostError (ErrTailLost): the newest WAL objects were deleted, or a
// file:// WAL segment was truncated or deleted. The transactions in the
// missing batches are given up: Open logs how many batches (at ERROR) and
// the store goes on from where its log ends. It also opens a store whose
// owner object is there but damaged, which a writer's Open otherwise
// refuses with a CorruptionError naming it, without checking the log's
// end. A recovery tool for an operator who cannot put the missing objects
// back; never use it by default. Has no effect on read-only opens, which
// refuse a lost tail (and open past a damaged owner object, logging it).
func WithAcceptTailLoss() Option {
	return func(o *options) error { o.acceptTailLoss = true; return nil }
}

// WithReadOnly opens the store as a reader: it loads the state without
// becoming the writer, writes nothing, and so never fences or blocks the
// live writer (use it for the CLI and dashboards). Reads see the store as
// of Open or the last Refresh; every write fails with ErrReadOnly.
func WithReadOnly() Option {
	return func(o *options) error { o.readOnly = true; return nil }
}

// WithHeartbeat sets how often a writer on a bucket store rewrites its owner
// object. Open on a store with an owner object watches it for 2.5 intervals
// to tell a live writer from a crashed one. file:// stores, locked by the
// OS, keep no owner object and ignore it. Defaults to 2s.
func WithHeartbeat(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("heartbeat %v must be positive", d)
		}
		o.heartbeat = d
		return nil
	}
}

// WithLargeValueThreshold sets the size above which a value is stored in
// its own object instead of inline in the WAL and snapshots: from 1 KiB to
// 256 MiB (an inline value must fit in one WAL object with the rest of its
// batch). Defaults to 256 KiB.
func WithLargeValueThreshold(n int) Option {
	return func(o *options) error {
		if n < 1024 || n > maxLargeValue {
			return invalid("large value threshold %d must be from 1024 to %d", n, maxLargeValue)
		}
		o.largeValue = n
		return nil
	}
}

// maxLargeValue bounds WithLargeValueThreshold.
const maxLargeValue = 256 << 20

// WithMaxValueSize sets the largest value (and job payload) accepted.
// Defaults to 64 MiB.
func WithMaxValueSize(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalid("max value size %d must be positive", n)
		}
		o.maxValue = n
		return nil
	}
}

// WithSnapshotThreshold sets when a snapshot is written: after bytes of WAL
// (or the size of the last snapshot, if larger) or after objects WAL
// objects, whichever comes first. Defaults to 16 MiB and 2048.
func WithSnapshotThreshold(bytes int64, objects int) Option {
	return func(o *options) error {
		if bytes <= 0 || objects <= 0 {
			return invalid("snapshot threshold %d bytes, %d objects must be positive", bytes, objects)
		}
		o.snapshotBytes, o.snapshotObjs = bytes, objects
		return nil
	}
}

// WithWriteRetry sets how long a transient object-store failure of one
// request is retried before the call that made it fails: the requests of
// Open, and the upload or read of a large value. It does not bound WAL
// writes, which are retried until the store answers, however long that
// takes (see Health). Defaults to 60s.
func WithWriteRetry(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("write retry %v must be positive", d)
		}
		o.writeRetry = d
		return nil
	}
}

// WithLogger sets where background errors are logged. Defaults to
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { o.logger = l; return nil }
}
