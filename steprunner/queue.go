package steprunner

// OnQueue returns o with its next step sent to the step queue name: the
// runtime enqueues it there instead of on the queue of the Runtime that
// settles o, and a Runtime that serves name (runtime.WithQueueName, in
// this process or another) runs it; until one does, it waits there. It
// applies to Continue, ContinueAfter, AwaitSignal (the step that the
// signal or the timeout starts goes to name) and Spawn (the step after
// the join); Succeed, Fail and Cancel
// have no next step, and ignore it. Without OnQueue the next step stays
// on the current step's queue.
//
// The name must be a valid step queue name (runtime.ValidateQueueName:
// 1 to 128 bytes of printable ASCII, not ending in ".dead" or ".timers")
// and must not be a notify queue (runtime.WithNotifyQueueName: the
// settling Runtime refuses its own); a step that returns an Outcome with an invalid one (OnQueue("")
// included) fails its run, as Permanent would.
func (o Outcome) OnQueue(name string) Outcome {
	o.queue, o.onQueue = name, true
	return o
}

// nextQueue returns the step queue that OnQueue named for the next step,
// and whether OnQueue was called; ("", false) for every Outcome whose kind
// has no next step (Succeed, Fail, Cancel). The runtime reads it through
// stepmemo.NextQueue.
func (o Outcome) nextQueue() (name string, ok bool) {
	if o.kind != KindContinue && o.kind != KindAwait && o.kind != KindSpawn {
		return "", false
	}
	return o.queue, o.onQueue
}
