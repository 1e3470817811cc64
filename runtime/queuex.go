package runtime

import (
	"context"

	"github.com/stepwell/stepwell/internal/queuex"
	"github.com/stepwell/stepwell/queue"
)

// qx is the queue's plumbing that the runtime uses and the queue's public
// API leaves out: chaining a run's next step to the slot that settles it
// (WithClaim, Claimed), dispatching steps and notifications to an idle
// slot (WithDispatch), settling steps in their own transactions
// (WithManualSettle), Release and RequireJobState.
var qx = queuex.Get[*queue.Queue, queue.Txn, *queue.Job,
	queue.EnqueueOptions, queue.EnqueueResult, queue.WorkOptions]()

// manualSettle returns Work options whose handler settles its own job.
func manualSettle(o queue.WorkOptions) queue.WorkOptions { return qx.WithManualSettle(o, true) }

// requireJob adds to t the condition that job id is in one of states (see
// queuex.API.RequireJobState).
func requireJob(t *queue.Txn, id string, states ...queue.State) *queue.Txn {
	*t = qx.RequireJobState(*t, id, queuex.StateSet(states...))
	return t
}

// commitPooled commits txn, taken from the transactions' pool
// (qx.TakeTxn), and gives it back once committed: nothing refers to its
// operations then. A failed commit keeps it (one whose outcome is unknown
// is still being finished with its operations).
func (rt *Runtime) commitPooled(ctx context.Context, txn *queue.Txn) (queue.TxnResult, error) {
	res, err := rt.q.Commit(ctx, txn)
	if err == nil {
		qx.RecycleTxn(txn)
	}
	return res, err
}
