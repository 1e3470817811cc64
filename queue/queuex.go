package queue

import (
	"context"

	"github.com/stepwell/stepwell/internal/queuex"
)

// The runtime's plumbing (see internal/queuex): unexported here, so that
// the public API is what users of jobs call.
func init() {
	queuex.Register(&queuex.API[*Queue, *Txn, *Job, EnqueueOptions, EnqueueResult, WorkOptions, State]{
		SetClaim:        func(o *EnqueueOptions, on bool) { o.claim = on },
		SetDispatch:     func(o *EnqueueOptions, on bool) { o.dispatch = on },
		Claimed:         func(r *EnqueueResult) *Job { return r.claimed },
		Dispatched:      func(r *EnqueueResult) bool { return r.dispatched },
		SetManualSettle: func(o *WorkOptions, on bool) { o.manualSettle = on },
		RequireJobState: (*Txn).requireJobState,
		Release:         func(q *Queue, ctx context.Context, j *Job) error { return q.release(ctx, j) },
		ReleaseTxn:      (*Txn).release,
	})
}
