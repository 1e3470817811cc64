package testenv

import (
	"sync"
	"time"
)

// Clock is a settable clock for tests that exercise time without sleeping:
// hand its Now to the code under test and move it with Advance. It is safe
// for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock standing at a fixed moment (2026-01-02 03:04:05
// UTC), so that runs are reproducible.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
