package queue

import (
	"sync"
	"time"
)

// fakeClock is a settable clock for tests that exercise time without
// sleeping.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// withClock injects a clock (test-only option).
func withClock(c *fakeClock) Option {
	return func(o *options) error { o.now = c.Now; return nil }
}

// reap runs the lease reaper once (test hook).
func (q *Queue) reapNow() error {
	return q.be.(*local).reap(t0ctx)
}
