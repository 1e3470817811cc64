package engine

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
)

// Riding out an outage. The committer retries a WAL write that fails with
// a transient error (see retryLater) until it lands, however long that
// takes: an outage delays commits but does not close the store. While a
// write is failing, or has been in flight longer than stallGrace, the
// store is stalled: Health reports it unhealthy, and the write's whole
// duration, from its start, counts as stall time (StallTime), so that the
// layer above can keep leases from running out on a clock that nothing
// could be committed against. A write that lands within the grace counts
// for nothing.

// stallGrace is how long a WAL write may be in flight, without failing,
// before the store counts as stalled.
const stallGrace = time.Second

// warnEvery bounds how often a failing WAL write is logged.
const warnEvery = 30 * time.Second

// Health is the engine's view of its store, as its WAL writes see it.
type Health struct {
	// Healthy is false while a WAL write is failing, or has been in flight
	// longer than a second: commits wait, and the queue claims no new work.
	Healthy bool
	// Since is when Healthy last changed: for an unhealthy store, when the
	// stall began; for a healthy one, when the last stall ended (or Open).
	Since time.Time
	// LastError is the last error of a failed WAL write attempt since Open,
	// kept after the store heals; nil if none failed.
	LastError error
	// Stalled is how long the current stall has lasted; 0 when healthy.
	Stalled time.Duration
}

// health tracks the committer's WAL writes. Its mutex is a leaf: nothing
// is locked while it is held.
type health struct {
	now func() time.Time
	log *slog.Logger

	mu        sync.Mutex
	writing   bool      // a WAL write is in flight
	start     time.Time // when it started
	firstFail time.Time // its first failed attempt; zero if none
	total     time.Duration
	healedAt  time.Time
	lastErr   error
	fails     int       // failed attempts not yet logged
	attempts  int       // failed attempts of the write in flight
	warnedAt  time.Time // last warning; zero if none in this stall
	changed   chan struct{}
}

func newHealth(now func() time.Time, log *slog.Logger) *health {
	return &health{now: now, log: log, healedAt: now()}
}

// unhealthyLocked reports whether the write in flight, if any, has failed
// or outlasted the grace at now.
func (h *health) unhealthyLocked(now time.Time) bool {
	return h.writing && (!h.firstFail.IsZero() || now.Sub(h.start) >= stallGrace)
}

// stalledLocked returns how long the store has been stalled at now: the
// age of the write in flight, if it makes the store unhealthy.
func (h *health) stalledLocked(now time.Time) time.Duration {
	if !h.unhealthyLocked(now) {
		return 0
	}
	return max(now.Sub(h.start), 0)
}

// begin notes that a WAL write starts.
func (h *health) begin() {
	h.mu.Lock()
	h.writing, h.start, h.firstFail = true, h.now(), time.Time{}
	h.mu.Unlock()
}

// end notes that the WAL write in flight ended (landed, or failed for
// good): its stall, if any, is over.
func (h *health) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if d := h.stalledLocked(now); d > 0 {
		h.total += d
		h.healedAt = now
		if !h.warnedAt.IsZero() {
			h.log.Warn("stepwell: the store answers again; WAL writes resumed", "stalled_for", d, "failed_attempts", h.attempts)
		}
	}
	h.writing, h.fails, h.attempts, h.warnedAt = false, 0, 0, time.Time{}
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// failed notes a failed attempt of the WAL write in flight, logging at
// most one warning per warnEvery.
func (h *health) failed(key string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if h.firstFail.IsZero() {
		h.firstFail = now
	}
	h.lastErr = err
	h.fails++
	h.attempts++
	if wall := time.Now(); h.warnedAt.IsZero() || wall.Sub(h.warnedAt) >= warnEvery {
		h.log.Warn("stepwell: WAL write failing; retrying until the store answers",
			"key", key, "failed_attempts", h.fails, "stalled_for", h.stalledLocked(now), "err", err)
		h.warnedAt, h.fails = wall, 0
	}
}

func (h *health) get() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	s := Health{Healthy: true, Since: h.healedAt, LastError: h.lastErr}
	if h.unhealthyLocked(now) {
		s.Healthy, s.Since, s.Stalled = false, h.start, h.stalledLocked(now)
	}
	return s
}

// stallTime returns the time spent stalled since Open, the current stall
// included.
func (h *health) stallTime() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total + h.stalledLocked(h.now())
}

// wait returns a channel closed when the WAL write in flight ends, or nil
// if the store is healthy.
func (h *health) wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.unhealthyLocked(h.now()) {
		return nil
	}
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.changed
}

// Health reports whether the store answers WAL writes. A read-only engine,
// which writes nothing, is always healthy.
func (e *Engine) Health() Health { return e.health.get() }

// Stalled reports whether the store is stalled now (Health's Healthy is
// false), without waiting.
func (e *Engine) Stalled() bool {
	h := e.health
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unhealthyLocked(h.now())
}

// StallTime returns how long, in total since Open, the store has been
// stalled (see Health), the current stall included. It only grows; the
// layer above subtracts two readings to learn how much of an interval the
// store spent stalled.
func (e *Engine) StallTime() time.Duration { return e.health.stallTime() }

// WaitHealthy returns once the store is healthy, the engine has failed or
// closed (the caller's next call reports why), or ctx ends (ctx's error).
func (e *Engine) WaitHealthy(ctx context.Context) error {
	for {
		ch := e.health.wait()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-e.bgCtx.Done():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// retryLater reports whether a failed write may land if tried again
// later: what objstore.IsRetryable reports (network errors, timeouts,
// throttling, 5xx), and a full or read-only file system, which an operator
// can fix while the writer waits. Anything else (permission denied, a
// failing disk: EIO) is final.
func retryLater(err error) bool {
	if objstore.IsRetryable(err) {
		return true
	}
	for _, errno := range []error{syscall.ENOSPC, syscall.EROFS, syscall.EDQUOT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// outageBackoff sleeps before attempt (0-based) of a write that keeps
// failing: 10ms doubling up to 5s, with jitter, so that a store that comes
// back is noticed within seconds without hammering it meanwhile.
func outageBackoff(ctx context.Context, attempt int) error {
	d := min(10*time.Millisecond<<min(attempt, 10), 5*time.Second)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
