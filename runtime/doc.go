// Package runtime runs durable workflows: runs of steps on a queue whose
// whole state lives in a bucket.
//
// # Basics
//
// A service submits a run by run ID (Submit). Each run is a chain of steps;
// each step is one job in the queue, carrying the run ID and step number in
// its reserved headers ("workflow.run_id", "workflow.step") and deduplicated
// by the key "run:<run id>:<n>". The user's steprunner.Runner executes a
// step and answers with an Outcome or an error; Run settles it:
//
//	step result                     one transaction does
//	------------------------------  ----------------------------------------------
//	Continue(p), ContinueAfter(p,d) ack; enqueue step n+1 (now / after d) with the
//	                                run's priority and attempt limit; update the
//	                                run record
//	Succeed(r)                      ack; run record -> Succeeded; terminal record;
//	                                notification
//	Fail(reason)                    ack (no dead letter); Failed; notification
//	Cancel(reason)                  ack; Cancelled with reason; notification
//	error, attempts left            nack with backoff (run record unchanged)
//	error, last attempt             dead-letter; Failed; notification
//	steprunner.Permanent(err)       dead-letter; Failed; notification
//	anything after an external      ack; Cancelled with Error ""; notification
//	Cancel
//
// Each row is ONE queue transaction: a crash never leaves a step acked
// without its successor, or a run ended without its notification.
//
// # Scheduling
//
// Run executes up to WithMaxConcurrentSteps steps at once, claiming queued
// steps by priority, then FIFO. A step that continues at once (Continue,
// or ContinueAfter with no delay) keeps its slot: its settlement
// transaction also claims step n+1 (queue.EnqueueOptions.Claim), which runs
// next in the same slot without a claim commit of its own, unless a step
// of higher priority is waiting. Started runs thus go depth first, and a
// step costs one commit instead of two. WithStepChaining(false) turns this
// off. A chained step that a stopping Run will not start is released
// without counting the attempt.
//
// Submit and the end of a run do the same across goroutines: step 0 and the
// terminal notification are enqueued with queue.EnqueueOptions.Dispatch, so
// when a Run of this process has a slot idle (and nothing else is waiting
// in that queue) the submit's or the last settlement's transaction claims
// the job for it and it starts as soon as that transaction is durable, with
// no claim commit and no wake-up in between. A 3-step run alone thus costs
// four durable writes from Submit to the hook: submit, two chained
// settlements, and the last settlement.
//
// # Records
//
// The run record (kvrecord.Run, under workflow/runs/<id>) holds the input's
// SHA-256, the current step and its job, the cancel flag and the headers.
// Submit writes it with a compare-and-put from absent, in the transaction
// that enqueues step 0, so concurrent submits of one ID from any number of
// goroutines or processes yield one run; later submits with the same input
// report NewlySubmitted=false and a different input is ErrInputMismatch.
// When a run ends, its record and a terminal record (result, error, final
// step, end time) are kept for the terminal retention (24h by default):
// Status reports the outcome and re-submits stay no-ops. Afterwards the
// run ID may be reused.
//
// # Guarantees
//
//   - Steps run at least once. A process may die after a step returned and
//     before its settlement committed; the step then runs again. Make step
//     side effects idempotent on (RunID, Number).
//   - Settlement is atomic (see the table).
//   - The terminal hook is called at least once for every run whose
//     termination committed, and never for another: the notification job is
//     enqueued in the terminating transaction. Hook errors are retried with
//     backoff (terminal.RetryAfter honoured); terminal.IsPermanent errors and
//     exhausted attempts dead-letter the notification.
//   - Status and Cancel read and write the durable records, so they work
//     from any Runtime on the store and after restarts.
//
// # Cancel
//
// Cancel of a run whose step is queued or scheduled removes the step and
// ends the run Cancelled in one transaction. For a running step it sets the
// run's cancel flag durably and cancels the step's context with cause
// steprunner.ErrRunCancelled; the run ends Cancelled (Error "") when the
// step returns, whatever it returns, unless the step itself returned
// Cancel(reason). A step's context is also cancelled when its lease is lost
// (steprunner.ErrLeaseLost) and when a stopping Run's drain timeout passes
// (steprunner.ErrShutdown; the step is released for another attempt).
//
// # Caveats
//
// One process is the writer of a store; Runtimes in that process share it.
// A step that runs longer than the queue lease keeps its lease: Run renews
// it. Step payloads and results up to the queue's value limit (64 MiB by
// default) are supported; large ones are stored as their own objects.
package runtime
