package runtime

import (
	"github.com/stepwell/stepwell/internal/queuex"
	"github.com/stepwell/stepwell/queue"
)

// qx is the queue's plumbing that the runtime uses and the queue's public
// API leaves out: chaining a run's next step to the slot that settles it
// (SetClaim, Claimed), dispatching steps and notifications to an idle
// slot (SetDispatch), settling steps in their own transactions
// (SetManualSettle), Release and RequireJobState.
var qx = queuex.Get[*queue.Queue, *queue.Txn, *queue.Job,
	queue.EnqueueOptions, queue.EnqueueResult, queue.WorkOptions, queue.State]()

// manualSettle returns Work options whose handler settles its own job.
func manualSettle(o queue.WorkOptions) queue.WorkOptions {
	qx.SetManualSettle(&o, true)
	return o
}
