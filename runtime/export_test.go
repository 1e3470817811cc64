package runtime

import "time"

// WithClock sets the Runtime's clock (run records' times), for tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		o.now = now
		return nil
	}
}
