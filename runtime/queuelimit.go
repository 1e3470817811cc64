package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepwell/stepwell/queue"
)

// ErrInvalidQueueLimit: a QueueLimit field is out of range (negative, NaN
// or infinite, a PerSecond under queue.MinLimitPerSecond, a Burst without
// PerSecond). Nothing was written. Not retryable.
var ErrInvalidQueueLimit = errors.New("runtime: invalid queue limit")

// QueueLimit caps the steps of one step queue across every process of the
// store (SetQueueLimit): how many run at once, and how fast they start.
// A zero field means no limit of that kind; the zero QueueLimit, none.
type QueueLimit struct {
	// PerSecond is the rate of step starts: a token bucket refilled at
	// PerSecond tokens a second, up to Burst; each start takes one. 0: no
	// rate limit. Fractions are allowed (0.5: a step every 2s).
	PerSecond float64
	// Burst is how many steps may start at once after the queue was
	// quiet. 0 with PerSecond set means 1; Burst without PerSecond is
	// ErrInvalidQueueLimit.
	Burst int
	// MaxRunning is how many steps of the queue may run at once, in all
	// processes together. 0: no such limit.
	MaxRunning int
}

// SetQueueLimit sets the limit of a step queue, durably, in place of the
// one it had; the zero QueueLimit removes it. It works from any Runtime on
// the store (client Runtimes and cluster members included) and holds for
// every Runtime that serves the queue, in every process, across restarts
// and failovers. An invalid queue name is ErrInvalidQueueName, an invalid
// limit ErrInvalidQueueLimit, and nothing is written.
//
// Steps the limit holds back stay pending, spend no attempt, and start in
// their usual order (priority, then FIFO) once it admits them; Status of
// their runs says "held by the queue limit of <queue>". See "Queue
// limits" in the package documentation.
func (rt *Runtime) SetQueueLimit(ctx context.Context, queueName string, l QueueLimit) error {
	if err := ValidateQueueName(queueName); err != nil {
		return err
	}
	err := rt.q.SetLimit(ctx, queueName, queue.Limit(l))
	if errors.Is(err, queue.ErrInvalidLimit) {
		return fmt.Errorf("%w: %w", ErrInvalidQueueLimit, err)
	}
	return err
}

// QueueLimits returns the limit of every queue that has one, by name.
func (rt *Runtime) QueueLimits(ctx context.Context) (map[string]QueueLimit, error) {
	m, err := rt.q.Limits(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]QueueLimit, len(m))
	for name, l := range m {
		out[name] = QueueLimit(l)
	}
	return out, nil
}

// heldByLimit sets st.WaitingFor when st is of a run whose step is queued,
// ready, on a queue whose limit holds it back now.
func (rt *Runtime) heldByLimit(ctx context.Context, st *RunStatus) error {
	if st.State != StatePending || st.Scheduled || st.Paused || st.WaitingFor != "" || st.Queue == "" {
		return nil
	}
	s, err := rt.q.Stats(ctx, st.Queue)
	if err != nil {
		return err
	}
	if s.Throttled {
		st.WaitingFor = "held by the queue limit of " + st.Queue
	}
	return nil
}
