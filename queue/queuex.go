package queue

import (
	"context"

	"github.com/stepwell/stepwell/internal/queuex"
)

// The runtime's plumbing (see internal/queuex): unexported here, so that
// the public API is what users of jobs call.
func init() {
	queuex.Register(&queuex.API[*Queue, Txn, *Job, EnqueueOptions, EnqueueResult, WorkOptions]{
		WithClaim:        func(o EnqueueOptions, on bool) EnqueueOptions { o.claim = on; return o },
		WithDispatch:     func(o EnqueueOptions, on bool) EnqueueOptions { o.dispatch = on; return o },
		Claimed:          func(r EnqueueResult) *Job { return r.claimed },
		Dispatched:       func(r EnqueueResult) bool { return r.dispatched },
		WithManualSettle: func(o WorkOptions, on bool) WorkOptions { o.manualSettle = on; return o },
		RequireJobState:  func(t Txn, id string, in queuex.States) Txn { t.requireJobStates(id, in); return t },
		Release:          func(q *Queue, ctx context.Context, j *Job) error { return q.release(ctx, j) },
		OnClaimEnd:       onClaimEnd,
		WatchKey: func(q *Queue, ctx context.Context, key, v []byte, found bool) (<-chan struct{}, func(), error) {
			return q.watchKey(ctx, key, v, found)
		},
		TakeTxn:    takeTxn,
		RecycleTxn: recycleTxn,
	})
}
