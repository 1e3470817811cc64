package runtime

import (
	"context"
	"time"

	"github.com/stepwell/stepwell/queue"
)

// WithClock sets the Runtime's clock (run records' times), for tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		o.now = now
		return nil
	}
}

// WithBeforeSettle sets a function called with each step job after its
// step returned and before the Runtime settles it, for tests (say, to
// lose the job's claim first, as a lease that runs out does).
func WithBeforeSettle(f func(ctx context.Context, job *queue.Job)) Option {
	return func(o *options) error {
		o.beforeSettle = f
		return nil
	}
}

// ReleaseJob returns a claimed job to its queue without counting the
// attempt (the queue's Release, which its public API leaves out).
func ReleaseJob(ctx context.Context, q *queue.Queue, j *queue.Job) error {
	return qx.Release(q, ctx, j)
}

// SetWaitHook sets a function called before each read of Wait (armed
// false) and once its watch is registered (armed true); nil: none. For
// tests that count them.
func SetWaitHook(f func(runID string, armed bool)) {
	if f == nil {
		testHookWait.Store(nil)
		return
	}
	testHookWait.Store(&f)
}
