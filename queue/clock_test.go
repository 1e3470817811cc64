package queue

import (
	"github.com/stepwell/stepwell/internal/testenv"
)

// fakeClock is testenv's settable clock, for tests that exercise time
// without sleeping.
type fakeClock = testenv.Clock

func newFakeClock() *fakeClock { return testenv.NewClock() }

// withClock injects a clock (test-only option).
func withClock(c *fakeClock) Option {
	return func(o *options) error { o.now = c.Now; return nil }
}

// reap runs the lease reaper once (test hook).
func (q *Queue) reapNow() error {
	return q.be.(*local).reap(t0ctx)
}
