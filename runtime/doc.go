// Package runtime runs durable workflows: runs of steps on a queue whose
// whole state lives in a bucket.
//
// # Quick start
//
// Open a queue on a store, make a Runtime with a steprunner.Runner and a
// terminal hook (nil for none), start Run, submit runs by ID and wait for
// their results:
//
//	q, err := queue.Open(ctx, "file:///var/lib/app/stepwell")
//	rt, err := runtime.New(q, runner, hook)
//	go rt.Run(ctx) // executes steps until ctx ends
//	_, err = rt.Submit(ctx, runtime.RunSpec{RunID: "order-42", Input: order})
//	st, err := rt.Wait(ctx, "order-42") // st.State, st.Result
//
// ExampleRuntime_Submit and ExampleRuntime_Wait do this on an in-memory
// store; the rest of this documentation is the design in detail.
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
//	AwaitSignal(name, t), a signal  ack; delete the oldest mailbox entry of that
//	of that name in the mailbox     name; enqueue step n+1 with its payload
//	                                (chained as Continue); update the run record
//	AwaitSignal(name, t), none      ack; run record -> waiting (name, deadline,
//	                                CurrentStep n+1, no step job); if t > 0,
//	                                enqueue a timeout job on <queue>.timers at
//	                                the deadline
//	error, attempts left            nack: retried after the run's backoff
//	                                (RunSpec.Retry, else the queue's), or
//	                                after d for RetryAfter(err, d) (run
//	                                record: its HistorySeq only)
//	error, last attempt             dead-letter; Failed; notification
//	steprunner.Permanent(err)       dead-letter; Failed; notification
//	(also inside RetryAfter)
//	a settlement that cannot        dead-letter (the job keeps the payload);
//	commit for good (a Succeed      Failed with a reason that wraps the
//	result, a Continue payload      *queue.TooLargeError ("step n's
//	over the queue's value limit)   settlement ... cannot commit: ...");
//	                                logged at ERROR; notification
//	no return by the step timeout,  as an error (ErrStepTimeout), settled
//	or a return after it            at the deadline; a late return is
//	                                discarded
//	anything after an external      ack; Cancelled with Error ""; notification
//	Cancel
//	a step job of an ended run      dead-letter, with a reason that says to
//	(requeued by hand) or a stale   Retry the run; logged (WithLogger); the
//	one                             run record unchanged
//	Continue, ContinueAfter or      as the row above, with step n+1 (and an
//	AwaitSignal with OnQueue(q)     await's timeout job, on q.timers)
//	                                enqueued on step queue q instead of this
//	                                Runtime's; run record -> Queue q
//	an Outcome with an invalid      as steprunner.Permanent: dead-letter;
//	OnQueue name                    Failed with ErrInvalidQueueName
//	any Outcome above with          also: put each key's last value (delete
//	WithMemo(key, value) writes     it for nil) under workflow/memo/<run>/;
//	                                the run record's MemoKeys, MemoBytes
//	                                updated (the same transaction)
//	an Outcome whose memory writes  as steprunner.Permanent: dead-letter;
//	break a limit (WithMemoLimits)  Failed with a *MemoLimitError (or
//	or name an invalid key          ErrInvalidMemoKey); nothing of the
//	                                Outcome written; logged at ERROR
//	Spawn(children)                 ack; each child's run record (Parent,
//	                                ParentStep, ChildIndex, Depth), index
//	                                entry and step-0 job; one entry per
//	                                child under workflow/children/<run>/<n>/
//	                                and the Join (this step's payload) under
//	                                workflow/join/<run>; up to 16 pending
//	                                counters (workflow/pending/<run>/<n>/);
//	                                run record -> waiting for them
//	                                (Spawned, Pending: the counters,
//	                                SpawnStep n, CurrentStep n+1, no job)
//	a Spawn over a limit            as steprunner.Permanent: dead-letter;
//	(WithSpawnLimits), with an      Failed with a *SpawnLimitError,
//	invalid child, or naming a run  ErrInvalidChild, ErrInvalidRunID,
//	that exists                     ErrInputMismatch (another input) or
//	                                ErrChildExists; nothing of it written
//	any row that ends a child run,  also: the child's entry under its parent
//	its first end                   -> ended (status, result, error); its
//	                                pending counter -1; if that empties it,
//	                                the counter deleted and the parent's
//	                                record Pending-1 and, at 0, its step
//	                                n+1 enqueued with the Join's payload
//	                                and Step.Children (parked if paused);
//	                                child record -> JoinReported
//	any row that ends a run with a  also: its slot is released: if the
//	concurrency key (RunSpec.       key's line is not empty, its oldest
//	Concurrency) holding a slot     entry deleted, that run's record ->
//	                                holding the slot and its step started
//	                                (parked if paused): the slot passes to
//	                                it; else the key's count -1 (its
//	                                records deleted at 0); see Per-key
//	                                concurrency
//	any row that ends a run with a  also: cancel its deadline job; run
//	deadline (RunSpec.Deadline)     record DeadlineJob -> ""
//	anything a step returns after   ack, nothing more: the deadline's row
//	its run's deadline ended the    (below) ended the run Failed already
//	run while it ran
//
// Each row is ONE queue transaction: a crash never leaves a step acked
// without its successor, or a run ended without its notification. Every
// row also appends the attempt's entry to the run's history in that
// transaction (see History), as do Signal, Pause, Resume, Cancel, Retry,
// an await's timeout, a Spawn's join, a run's deadline and the hook's
// delivery: what did not commit has no entry.
//
// Step queues. Each Runtime serves one step queue (WithQueueName,
// "workflow-steps" by default); Runtimes of several step queues share a
// store, in one process or in many (cluster mode too). A run's step 0
// goes to RunSpec.Queue (else the submitting Runtime's queue), and each
// next step to the queue its predecessor's Outcome names (OnQueue), else
// to the same queue. The run record names the current step's queue
// (kvrecord.Run.Queue; Status reports it), and every row here that
// enqueues a run's step (a signal, a timeout, Resume, Retry) enqueues it
// there, whichever Runtime commits the row, so control works across
// queues. Each step queue keeps its own notices and timers queues
// (<queue>.dead, <queue>.timers), worked by the Runtimes that serve it;
// run records and the notify queue are shared. A step sent to a queue
// that no Runtime serves waits there, pending, until one does. Only a
// step that stays on this Runtime's queue is chained to its slot (see
// Scheduling); a step sent to another queue is dispatched to an idle slot
// of a Runtime of this process that serves it, if there is one.
//
// Run memory. A run keeps a small key-value map, written only by
// settlements (steprunner.Outcome.WithMemo) and read with each step
// (steprunner.Step.Memo): before a step starts, the runtime reads the
// run's memory in one prefix scan, and only if the run record counts some
// (MemoKeys > 0), so a run that never writes any costs no read and no
// write more (a step of a run with memory costs one scan: in a cluster
// member, one more call to the writer). Only the settlement of a run's current step writes its
// memory, so what the scan reads is what committed before the step
// started, and a retry reads what committed before it, never the writes
// of an attempt that failed: writes ride with the Outcome, and an Outcome
// that is not settled as such (an error, a run cancelled from outside
// unless the Outcome is Cancel, a settlement that cannot commit) writes
// nothing. The limits (WithMemoLimits; defaults: keys of 1 to 256 bytes
// of printable ASCII, values up to 256 KiB, a run's memory up to 1 MiB
// and 1,000 keys) are checked when the step returns, against the memory
// it read and before its settlement is built: a step cannot return an
// error from WithMemo, but its settlement can refuse it (the row above),
// and it is refused on every attempt alike, so it fails at once instead
// of being retried. The memory is kept while the run is kept (Retry keeps
// it) and deleted with its record at expiry; RunMemo and "stepwell run
// ID" read it. Failed
// and cancelled runs keep their final step's payload (and the ID of its
// dead job, if it died) in their terminal record, for Retry:
//
//	operator call                   one transaction does
//	------------------------------  ----------------------------------------------
//	Retry, final step dead-lettered requeue the dead job in place (fresh attempt
//	                                budget, history kept); run record -> active
//	                                at that step, Retries+1; delete the terminal
//	                                record
//	Retry, otherwise (Fail, Cancel, enqueue the final step again with the kept
//	dead job deleted)               payload; run record and terminal record as
//	                                above
//	Cancel of a queued step         remove the step; Cancelled; notification
//	Cancel of a waiting run or of   remove the timeout job / parked step;
//	a paused run's parked step      Cancelled; notification
//	Cancel of a run waiting in its  its line entry deleted (the payload
//	concurrency key's line          kept for Retry); Cancelled;
//	                                notification
//	Cancel of a run waiting for     Cancelled; notification; its pending
//	children                        counters deleted; a cascade notice
//	                                on <step queue>.dead, whose
//	                                handler Cancels each child not ended
//	                                (theirs in turn), then acks it
//	SetQueueLimit(q, l)             put the limit record of step queue q
//	                                (the zero QueueLimit: delete it); the
//	                                writer applies it to every claim
//	                                after (see Queue limits)
//
// Child runs. A step's Spawn (steprunner.Spawn) starts child runs and
// parks its run until every child has ended; the last child's end starts
// the parent's next step with the spawning step's payload and
// Step.Children, the results in the order given. A child left unnamed
// gets the run ID "<parent>.s<step>.<index>", so a Spawn whose attempt
// runs again (its settlement was lost) names the same children, and its
// one transaction writes them once. The results are kept under the
// parent (workflow/children/<parent>/), not read from the children's
// terminal records, so a child's terminal retention never shortens a
// join; they are deleted with the parent's record. Children are ordinary
// runs (Status shows Parent; the parent's Status lists Children, and
// waits with WaitingFor "children: 37 of 100 ended"), inheriting the
// parent's priority, attempt limit, step timeout and retry policy and
// its step queue unless Child.Queue names one. A child that fails or is
// cancelled does not fail its parent. A child counts once: a Retry of a
// child after its first end (its parent joined, or still waits for the
// others) does not reach the parent again. Cancelling a waiting parent
// cancels its children, and theirs (the cascade notice above: a crash
// mid-cascade redoes it); a Retry of that parent runs its step n+1 with
// an empty payload and the results as they stand (a child not ended yet
// has Status 0). Limits (WithSpawnLimits; defaults: 10,000
// children per Spawn, nesting depth 8, 16 MiB of children's inputs,
// headers and IDs per Spawn, which with their records and jobs fits the
// queue's 32 MiB transaction) are checked when the step returns, before
// anything is written. A derived run ID over 128 bytes (a parent ID over
// about 115 bytes) is ErrInvalidRunID: name such children.
//
// Signals, timeouts, pause and resume are rows of their own, each one
// transaction that compare-and-puts the run record (so of two that race,
// one commits and the other reads again and finds what the first did):
//
//	call or job                     one transaction does
//	------------------------------  ----------------------------------------------
//	Signal(name), the run awaits    enqueue step n+1 with the payload and
//	that name                       Step.Signal{name}; cancel the timeout job;
//	                                run record -> not waiting
//	Signal(name), otherwise         append the payload to the run's mailbox
//	                                (workflow/mailbox/<run>/<name>/<seq>); the
//	                                record counts it
//	timeout job, the run still      ack the timer; enqueue step n+1 with an
//	waits on it                     empty payload and Step.Signal{name,
//	                                TimedOut}; run record -> not waiting
//	timeout job, otherwise          ack the timer: dropped
//	a schedule's tick job, named    ack the tick; unless the last run has not
//	by its schedule record          ended (then Skipped+1), submit the run
//	                                NAME@TICK (TICK: the latest tick passed;
//	                                its record from absent, index entry and
//	                                step 0, as Submit, with a Concurrency
//	                                a slot or the key's line; not if it
//	                                exists);
//	                                enqueue the next tick's job; schedule
//	                                record -> last run, next tick (see
//	                                Schedules)
//	a tick job, otherwise (its      ack the tick: dropped
//	schedule replaced or deleted)
//	Pause, step queued/scheduled    remove the step; park it (payload, due
//	                                time) under workflow/parked/<run>; run
//	                                record -> paused, parked
//	Pause, otherwise                run record -> paused
//	Resume, a step parked           enqueue it at its due time (now if past);
//	                                delete the parked step; run record ->
//	                                not paused
//	Resume, otherwise               run record -> not paused
//	deadline job, the run has not   ack it; remove the run's queued or
//	ended (RunSpec.Deadline)        scheduled step, timeout job or parked
//	                                step, or cancel its running step's job
//	                                (the step's ctx ends, cause
//	                                ErrRunDeadline); Failed with an error
//	                                wrapping ErrRunDeadline; notification;
//	                                a run waiting for children: their
//	                                pending counters deleted and the
//	                                cascade notice (as Cancel)
//	deadline job, otherwise         ack it: dropped
//
// While a run is paused, every row above that would enqueue its next step
// parks it instead (the step, its payload, its due time and what woke it),
// and a retry of a paused run's step that gets claimed (it came due) is
// acknowledged and parked, not run. So a signal or a timeout
// that wakes a paused run is parked until Resume; a delay or a timeout
// keeps counting while paused and, if it ran out, the step starts at once
// on Resume.
//
// Races. A signal and its await's timeout: whichever commits first wins.
// A signal that loses finds the run no longer waiting and goes to the
// mailbox, where the run's next AwaitSignal of that name consumes it; a
// timeout that loses finds another timer (or none) on the run record and
// is dropped. A Pause and a settlement: if Pause commits first the
// settlement parks the next step; if the settlement does, Pause parks the
// step it enqueued (or lets a step it chained, already claimed, finish).
// Signals in a run's mailbox are consumed oldest first per name; those
// left when the run ends are deleted with its record, after the terminal
// retention (a retried run keeps them).
//
// The retried run's next termination is a new notification (new EndedAt,
// so a new webhook-id) carrying Retries. Retry of a run that is not failed
// or cancelled, or whose payload is no longer kept, is ErrRunNotRetryable;
// of concurrent Retries of one run exactly one commits.
//
// # Per-key concurrency
//
// RunSpec.Concurrency{Key, Limit} bounds how many runs of Key are active
// at once in the whole store: across every Runtime and process on it,
// cluster members included, and across restarts and failovers. A run
// takes a slot of its key when its step 0 would be enqueued, and holds it
// until it ends, whatever ends it: while it runs, waits for a signal or
// for children, is paused, or waits on a delay (ContinueAfter, a retry's
// backoff, StartAt), it keeps its slot. Without a free slot, a run waits
// in its key's line, pending, its step 0 not enqueued (Status: StatePending,
// WaitingFor "waiting for concurrency key tenant-7: 2 of 2", the slots
// held and the limit), and the line is served in submit order (the order
// the submits committed): each run's end passes its slot to the oldest
// waiting run, whose step 0 starts in that transaction. Different keys
// never wait for each other; runs without a key are not counted and cost
// what they did before (no read, write or byte more).
//
//	call                            one transaction does
//	------------------------------  ----------------------------------------------
//	Submit, a slot free             as without a key (run record, index
//	                                entry, step 0); the key's state
//	                                (workflow/conc/<key>: slots held,
//	                                limit) +1
//	Submit, no slot free            run record (ConcLine: its place), index
//	                                entry, line entry workflow/concline/
//	                                <key>/<seq> (step 0's input, StartAt);
//	                                the line's tail (workflow/conctail/
//	                                <key>) +1, the state unchanged; no job
//	Submit raising the Limit        also: the oldest waiting runs start,
//	                                up to the new limit
//	Retry of a run with a key       as Submit, for its final step: a free
//	                                slot (requeued as without a key) or a
//	                                place at the end of the line
//	a run's end                     see the first table's last row
//
// Every one of these compare-and-puts the key's state or tail (or both)
// in the run's own transaction, so the queue's one writer orders them:
// the limit is exact, whichever processes submit and run, and nothing is
// rebuilt after a crash (a SIGKILLed writer's successor reads the state
// as the last commit left it). A transaction that loses a race on them
// reads again and is built again. Joining the line and passing a slot on
// write different keys, so a key with a long line takes both at once.
//
// Choices and limits:
//
//   - The newest submitted run's Limit applies to its key. Runs holding a
//     slot keep it when the limit is lowered (no run is admitted until
//     fewer hold one than the new limit); a raise starts the oldest
//     waiting runs in the raising submit's transaction.
//   - A Key is 1 to 128 bytes of printable ASCII without '/', not starting
//     or ending with a space; Limit 1 to 2^31-1. A Key with a Limit under
//     1, or a Limit without a Key, is ErrInvalidRunSpec, nothing written;
//     re-submitting a run with another Concurrency is ErrSpecMismatch.
//   - StartAt: a run takes its place (a slot, or the line) at submit. With
//     a slot, it holds it while delayed; from the line, its step 0 starts
//     at its StartAt, or at once if that has passed when its turn comes.
//   - Cancel of a run in line removes it from the line; Retry of a run
//     with a key takes a slot or joins the line again, at its end.
//   - Children of a Spawn do not inherit the key: they are not counted
//     (the parent holds its slot while it waits for them).
//   - A run's Deadline counts while it waits in line: past it, the run
//     ends Failed there and leaves the line.
//   - A Schedule's Spec may carry a Concurrency: each tick's run takes a
//     slot or joins the line in the tick's transaction, as a Submit's
//     run does (see Schedules).
//   - A hot key is bounded by its runs' transactions: each run of the key
//     holds its slot across at least one durable commit (the one that
//     passes it on), so one key with Limit L ends at most about L runs
//     per commit latency plus step time; 10,000 one-step runs on a key of
//     Limit 10 ran at 800 to 3,100 runs/s on file:// on a loaded 2-core machine
//     (docs/BENCHMARKS.md). Use keys per tenant, not one global key, for
//     throughput.
//
// # Schedules
//
// SetSchedule makes a durable schedule: each tick submits one run from its
// Spec, named ScheduleRunID(name, tick) ("nightly@20260102T030000Z"). A
// schedule is a record (workflow/schedules/<name>, see internal/runrec)
// and one tick job, a scheduled job due at the next tick on the timers
// queue of the runs' step queue (<step queue>.timers: Spec.Queue, else the
// queue of the Runtime that set it), so the Runtimes that Run on that step
// queue fire it, in any process of the store (cluster members too), and
// nothing ticks while none runs. Each write is one transaction that
// compare-and-puts the record:
//
//	call                            one transaction does
//	------------------------------  ----------------------------------------------
//	SetSchedule, new                schedule record from absent; the tick job
//	                                due at the first tick after now
//	SetSchedule, existing, changed  cancel the old tick job; record replaced
//	                                (last run and skipped count kept); the
//	                                tick job of the first tick after now
//	SetSchedule, as it is           nothing (no transaction): the tick job
//	                                stays, so a service that sets its
//	                                schedules at each start keeps a late
//	                                tick's catch-up
//	DeleteSchedule                  cancel the tick job; delete the record
//
// and a tick is the row of the table above. So the record names its one
// tick job at all times, and a tick job the record no longer names is
// dropped when it fires.
//
// Exactly once per tick. The run's ID is its tick's, and its submission
// commits with the tick job's ack and the next tick's job, so a tick is
// submitted once across processes, restarts and failovers: a tick whose
// settlement did not commit (its process died, its lease ran out) fires
// again and commits once; a tick whose run ID exists already (submitted by
// hand, or by the schedule before it was replaced) is not submitted again.
//
// Ticks. Every ticks at the multiples of Every since the Unix epoch (Every
// 1h: on the hour UTC; 90m: 00:00, 01:30, 03:00 UTC...), so every process
// computes the same ticks whenever the schedule was set, and Location
// does not matter. Cron (robfig/cron's standard parser: 5 fields, or
// @yearly, @monthly, @weekly, @daily, @hourly) ticks in Location (nil:
// UTC): "0 9 * * *" in America/New_York is 9:00 there all year, 13:00 or
// 14:00 UTC. Across daylight-saving changes it does what robfig/cron
// does: a time the change skips does not tick (a 2:30 job skips that
// day), and a time it repeats ticks twice (two ticks, an hour apart in
// UTC, so two runs). The run ID's tick is always UTC.
//
// Catch-up. A tick job that fires late (no Runtime ran its step queue, the
// store was down, every process had stopped) submits one run, for the
// latest tick that has passed when it fires, not one per missed tick;
// the next tick is the one after that. After a night of downtime an hourly
// schedule runs once, for the last hour, and goes on. Missed ticks are not
// counted in Skipped.
//
// Overlap. A tick skips its run (and counts it: ScheduleStatus.Skipped)
// while the run of the schedule's last tick that submitted one has not
// ended (pending, running, waiting, paused, cancelling), as read when the
// tick fires; AllowOverlap submits it anyway.
//
// Concurrency. Spec.Concurrency bounds a schedule's runs as it bounds
// submitted ones (see Per-key concurrency): the tick's transaction
// submits its run with a slot of the key, or, if none is free, with a
// place at the end of the key's line (no step yet), exactly as Submit
// does, and the key's state is compare-and-put in that one transaction.
// "A nightly report per tenant, at most one at a time" is one schedule
// per tenant with Concurrency{Key: tenant, Limit: 1} and AllowOverlap:
// a tick whose previous run still runs is not skipped but waits for it,
// and its run starts when that one ends. Without AllowOverlap such a tick
// is skipped before it reaches the key (a run waiting in line has not
// ended). The key is shared with every other run that names it,
// submitted or scheduled. The record keeps the Concurrency (an appended
// field group: a schedule without one is written as before). Spec.Deadline
// stays refused: it is an absolute time, which the runs of later ticks
// would have passed.
//
// ListSchedules reads every schedule record (from any Runtime, client and
// read-only ones too): the schedule, its next tick, its last run and tick,
// the ticks skipped. The runs are ordinary runs: Status, Cancel, Retry,
// ListRuns see them; deleting a schedule does not touch them.
//
// # Wait
//
// Wait returns a run's final status (its result or error, as Status
// reports them) once the run has ended: at once for an ended run,
// ErrRunNotFound for an unknown one, ctx.Err() if ctx ends first. It
// reads the run record and watches its key (a queue key watch, see
// package queue): the commit that writes the record wakes it, the
// terminal transaction included, and it reads again. No goroutine polls
// per waiter: Wait blocks its caller's goroutine and starts none, and a
// waiter costs a few hundred bytes of heap besides (docs/BENCHMARKS.md,
// BenchmarkWait10k). A waiter is also woken by each settlement of its run
// (they write the record), and reads the record again each time. Wait
// does not wait for the terminal hook (see Runtime.Wait).
//
// Wait works on every Runtime of the store, client Runtimes included: on
// the writer the commit wakes it; in a cluster member the waiters of the
// process share one long-poll to the writer, and after a change of writer
// they read the run again from the next writer and wait there, so a run
// that ended during the switch is seen. On a Queue opened WithReadOnly
// (which learns of no commit as it happens) Wait instead refreshes the
// queue and reads the run every poll interval (WithPollInterval).
//
// # Scheduling
//
// Run executes up to WithMaxConcurrentSteps steps at once, claiming queued
// steps by priority, then FIFO. A step that continues at once (Continue,
// or ContinueAfter with no delay) keeps its slot: its settlement
// transaction also claims step n+1 for this process, which runs next in
// the same slot without a claim commit of its own, unless a step
// of higher priority is waiting. Started runs thus go depth first, and a
// step costs one commit instead of two. WithStepChaining(false) turns this
// off. A chained step that a stopping Run will not start is released
// without counting the attempt. Run also works the timers queue (<step
// queue>.timers: await timeouts, schedule ticks and run deadlines, up to
// 4 at once) and the notices queue (<step queue>.dead: notices of dead
// step jobs, and notifications handed over by Cancel; see Operating).
//
// Submit and the end of a run do the same across goroutines: step 0 and the
// terminal notification are enqueued with dispatch set (the queue's
// internal queuex.API.WithDispatch, which its public API leaves out), so
// when a Run of this process has a slot idle (and nothing else is waiting
// in that queue) the submit's or the last settlement's transaction claims
// the job for it and it starts as soon as that transaction is durable, with
// no claim commit and no wake-up in between. A 3-step run alone thus costs
// four durable writes from Submit to the hook: submit, two chained
// settlements, and the last settlement. This holds in a cluster member too
// (the member's own Run gets the job). A step started this way begins
// with the run record that the transaction wrote, and a step a member
// claims brings the record the writer read with the claim: in a member, a
// step costs one call to the writer, its settlement.
//
// # Queue limits
//
// SetQueueLimit caps one step queue across every process of the store: at
// most MaxRunning of its steps run at once, and steps start at most
// PerSecond a second (a token bucket of Burst; Burst 0 with PerSecond set
// means 1). It suits a model provider's or an API's rate and concurrency
// limits, whatever the number of processes:
//
//	err := rt.SetQueueLimit(ctx, "llm", runtime.QueueLimit{PerSecond: 50, Burst: 10, MaxRunning: 20})
//
// The zero QueueLimit removes it; QueueLimits lists them. The limit is the
// queue's (queue.Queue.SetLimit: see "Queue limits" in package queue),
// enforced where steps are claimed, in the store's writer, so it binds
// every way a step starts: claimed by a Run, dispatched to an idle slot
// by the transaction that enqueues it (Submit, a Signal, Retry, a
// Spawn's children), and chained to the slot of the step before
// it (a chained step takes a token like any other; under MaxRunning it
// takes the place its predecessor's settlement frees, in the same
// transaction). A step the limit holds back stays pending, in its order
// (priority, then FIFO), spends no attempt and holds no slot; Status of
// its run reports WaitingFor "held by the queue limit of <queue>". Only
// steps count: a step queue's <queue>.timers and <queue>.dead queues and
// the notify queue are not limited by it. It survives restarts and
// failovers: the next writer counts the steps still claimed in the store
// (a SIGKILLed process's steps count until their claims expire), and its
// token bucket starts empty, so it never admits more than the limit says.
//
// # Policies
//
// A RunSpec's StepTimeout, Retry and StartAt are kept in the run record
// (so they hold across restarts, on every Runtime that executes the run):
//
//   - StepTimeout (else the executing Runtime's WithStepTimeout; none by
//     default) is each attempt's deadline. The step's ctx ends then with
//     cause steprunner.ErrStepTimeout. The runtime does not wait for a
//     step that ignores it: at the deadline it settles the attempt as
//     failed (the row above), which also ends the job's claim, and
//     discards what the step returns later (logged at WARN), so a late
//     result never settles anything. The abandoned call keeps running in
//     its goroutine until it returns, outside the concurrency limit: a
//     step that never returns leaks its goroutine.
//   - Retry (a steprunner.RetryPolicy) times the retries the runtime
//     settles (errors, timeouts) and bounds every step's attempts; its
//     MaxAttempts wins over MaxAttemptsPerStep. Retries the queue makes on
//     its own (a lease that ran out because the process stalled, a claim
//     left by a crashed process) follow the queue's backoff, as do runs
//     without a policy or whose policy has no InitialBackoff.
//   - StartAt makes step 0 a scheduled job: Status reports the run
//     pending, Scheduled, with DueAt; Cancel removes it at once. Retry of
//     the run later does not wait for StartAt again.
//   - Deadline bounds the whole run. Submit also enqueues a deadline job,
//     due then, on the timers queue of the run's step-0 queue
//     (<queue>.timers; the Runtimes serving that step queue fire it, so a
//     deadline needs one of them running), and the run record keeps the
//     deadline and the job's ID (Status reports Deadline). If the run has
//     not ended when the job comes due, one transaction ends it Failed
//     with an error wrapping ErrRunDeadline (its Error says "run deadline
//     passed" and the deadline; the hook gets it once; Wait returns it),
//     wherever it is: pending, delayed (ContinueAfter, StartAt, a retry's
//     backoff), waiting for a signal or for children, paused (its step
//     parked or not) or running (see the table). A running step's ctx
//     ends with cause ErrRunDeadline, through the queue's cancel of its
//     job, as Cancel reaches it, in another process too; the run is
//     Failed at once, without waiting for the step, and what the step
//     returns later is acknowledged and discarded (as a step ignoring its
//     ctx keeps running, its slot stays busy until it returns). A run
//     being cancelled (its step still running) when its deadline passes
//     ends Failed too. A run that ends otherwise first cancels its
//     deadline job in its ending transaction, so a deadline never ends a
//     run twice. A deadline that has passed at Submit (by the submitting
//     Runtime's clock) is ErrInvalidRunSpec, also when re-submitting a
//     run that exists; a deadline before StartAt fails the run then,
//     unstarted. Children do not inherit a deadline: the parent's
//     deadline fails it while it waits for them, and the cascade (as for
//     Cancel) cancels every child not ended, and theirs, so no child
//     outlives its parent's deadline. Retry of a failed or cancelled run
//     keeps its deadline if it is still ahead (a new deadline job) and
//     drops it if it has passed (a run failed by its deadline is retried
//     without one: Status then reports no Deadline).
//
// Re-submitting a run with another StepTimeout, Retry, StartAt or
// Deadline is ErrSpecMismatch (nil and the zero RetryPolicy are the same);
// an invalid value is ErrInvalidRunSpec, and nothing is written.
//
// # History
//
// Every run keeps a history (Runtime.History, "stepwell run ID"): an
// entry per committed settlement of a step's attempt (HistoryEntry: step,
// attempt, step queue, job, the worker that committed it
// (WithWorkerName, host:pid by default), when the attempt started and
// when it settled, the kind (see HistoryKind), the error text, the sizes
// of the step's payload and of what it returned with a 256-byte preview,
// the signal, and what the settlement scheduled), and an entry per
// control write: signal, await_timeout, join, pause, resume,
// cancel_requested, cancel, retry, deadline, hook_delivered, hook_failed.
// Entry 1, submitted, is the run record itself (SubmittedAt, StartAt):
// runs submitted by Submit, a schedule or a Spawn have it at no cost.
//
// Each entry is written by the transaction that commits what it records,
// under workflow/history/<id>/<seq:010d>, and that transaction
// compare-and-puts the run record with HistorySeq (the last entry's
// number) one more, so entries are numbered in commit order and an
// attempt whose settlement did not commit (a crash, a lost lease) has
// none. The queue records such an attempt in its job's history ("lease
// expired", "worker stopped without settling": constants of
// internal/queuex, which the queue writes and History matches); the
// step's next committed settlement, or the dead letter of its last
// attempt, adds a lease_lost entry for it first. A run's end reserves the next number
// for its hook's delivery (the notification job carries it), which the
// notification's settlement writes without reading the run record.
//
// The newest 1,000 entries are kept: the transaction that writes entry n
// deletes entry n-1,000, and History reports the older ones by the Seq
// of the first entry it returns (Seq-1 dropped). An entry copies at most
// 256 bytes of a payload and 2 KiB of error text (the terminal record
// and the job's attempt history keep the whole text, up to 64 KiB). The
// history is deleted with the run record at expiry, and kept by Retry.
// What it costs: an entry (about 170 bytes, one more key) per settlement,
// see docs/BENCHMARKS.md.
//
// # Records
//
// The run record (kvrecord.Run, under workflow/runs/<id>) holds the input's
// SHA-256, the current step and its job, the cancel flag and the headers,
// and the run-control state: the awaited signal name, deadline and timeout
// job, the pause and parked flags, the mailbox's sequence and count, and
// the run memory's key count and size (MemoKeys, MemoBytes; its entries
// are under workflow/memo/<id>/, see internal/runrec), the current
// step's queue, and the run's deadline and its job (Deadline,
// DeadlineJob; written only by runs that have a deadline).
// Submit writes it with a compare-and-put from absent, in the transaction
// that enqueues step 0, so concurrent submits of one ID from any number of
// goroutines or processes yield one run; later submits with the same input
// report NewlySubmitted=false and a different input is ErrInputMismatch.
// Re-submits that differ only in headers, priority, attempt limit, step
// timeout, retry policy, start time, deadline or Concurrency are
// ErrSpecMismatch. The same transaction writes the run's entry in the
// submitted index (workflow/submitted/<inverted time>/<id>), which
// ListRuns reads newest first; stores written before the index are
// indexed by the first Run of this version, and listed by a full scan
// until then. When a run ends, its record and a terminal record (result,
// error, final step and attempt, end time, and for failed and cancelled
// runs the final step's payload) are kept for the terminal retention (24h
// by default): Status reports the outcome, Retry can restart it, and
// re-submits stay no-ops. Afterwards the run ID may be reused.
//
// Error and reason texts are bounded in every record: a step's error (its
// Error()) and a Fail or Cancel reason are kept up to 64 KiB each in the
// step job's attempt history (queue.Job.History, Status's LastError), the
// terminal record (Status's Error) and the notification (the hook's
// Outcome.Error, a webhook's body). A longer text is cut at a UTF-8
// character boundary and ends with "... (truncated, N bytes)", N its full
// size. The ErrorHandler gets the error itself; logs carry the bounded
// text. The reason of a step the queue dead-lettered ("step n died: ...",
// from queue.HeaderDeadReason) is bounded to 1 KiB.
//
// # Operating
//
// New does no I/O: it checks its arguments and options and touches
// neither the queue nor the store, so it neither blocks nor fails on a
// stalled or closed store; every call that reads or writes takes a ctx.
// New with a nil Runner makes a client Runtime: Submit, Status, ListRuns,
// RunMemo, Cancel, Retry, Signal, Pause and Resume work (they read and
// write the durable records), Run returns ErrNoRunner.
//
// A Runtime with a hook records its notify queue in the store when its Run
// starts, so that runs ended by client Runtimes (Cancel) are notified to
// it. A Cancel that finds none recorded (no Runtime with a hook has Run on
// the store yet, though one may have been made) hands the notification
// over instead of dropping it: the cancelling transaction enqueues it on
// the notices queue of the run's step queue (<step queue>.dead), and the
// first Run of that step queue forwards it to its hook's notify queue, or
// to the one recorded by then, or, with neither, drops it: nobody listens.
// So a run cancelled before the hooked Runtime's Run started is notified
// once it starts, unless a Run without a hook works that step queue first
// while none is recorded: that one drops the notice (logged at DEBUG).
//
// Every failed step attempt is logged (WithLogger, slog.Default() by
// default) once its settlement committed, with run_id, step, attempt,
// max_attempts and job_id: at WARN when the step will be retried, at ERROR
// when the run fails (a permanent error, or the last attempt); a panic is
// logged with its stack. (A step that calls runtime.Goexit instead of
// returning fails its attempt too: with a step timeout, as any failed
// attempt; without one, the step runs on the Work slot's goroutine, which
// ends, and the queue retries the step unseen by the runtime: only the
// job's history says why. An error whose Error method panics, a typed nil
// say, is reported as one that says so.) A failed hook delivery is logged
// the same way.
// So is every settlement that does not commit: at ERROR with its reason
// when it cannot (then the step runs again once its lease runs out, or,
// for a settlement that can never commit, the run fails: see the table),
// and at WARN when the queue refused it because the step's claim was lost
// (its lease ran out: the queue runs the step again, or dead-letters it
// on its last attempt); a claim lost while the step runs is logged at
// WARN too. What the step returned is discarded either way.
// WithErrorHandler hands each failed attempt (a StepError: the error, a
// panic's value and stack, whether it ended the run) to a service's own
// error tracking.
//
// # Observability
//
// The runtime reports to OpenTelemetry through its API only; the service
// supplies the SDK: WithTracerProvider and WithMeterProvider, by default
// otel.GetTracerProvider() and otel.GetMeterProvider() (the global
// providers, no-ops unless the service sets them). Each step attempt is a
// span "stepwell.step" and each hook delivery a span "stepwell.hook", with
// attributes stepwell.run_id, stepwell.step, stepwell.attempt and (steps)
// stepwell.outcome: continue, await, spawn, succeed, fail, cancel, error (the
// attempt failed and will be retried), dead (it failed and so did the
// run) or cancelled (the run was cancelled from outside); a failed
// attempt or delivery records its error with status Error. The step's ctx
// carries its span. All spans of a run belong to the trace of the ctx
// given to Submit: its span context travels in the reserved job header
// HeaderTraceParent (W3C traceparent) from step to step, through retries
// and to the notification, without a change to any record. A step that
// Signal starts (of a waiting run), Resume starts (of a paused run) or
// Retry enqueues afresh joins the trace of that call's ctx instead (none
// if it has no span).
// Metrics: stepwell.step.duration (histogram, seconds; its advised buckets
// run from 1 ms to 1 h, which a View can override) and
// stepwell.step.outcomes (counter), both by attribute outcome; while Run
// runs, stepwell.queue.depth (gauge of the step queue's jobs by state:
// pending, scheduled, claimed, dead) and the store's counters
// stepwell.store.wal_batches, stepwell.store.transactions (their ratio is
// the transactions per WAL write), stepwell.store.wal_write_time (seconds
// spent writing WAL batches, start to durability: divided by the batches,
// the mean WAL write, a commit's latency floor) and stepwell.store.requests (by kind: put, get,
// list, delete, head). A cluster member writes no WAL: its store counters
// stay at zero, and stepwell.cluster.calls counts its calls to the writer
// (queue.StorageStats.ClusterCalls).
//
// # Guarantees
//
//   - Steps run at least once. A process may die after a step returned and
//     before its settlement committed; the step then runs again. Make step
//     side effects idempotent on (RunID, Number).
//   - Settlement is atomic (see the table).
//   - The terminal hook is called at least once for every run whose
//     termination committed, and never for another: the notification job is
//     enqueued in the terminating transaction. A retried run terminates
//     again, so it is notified once per termination (Outcome.Retries tells
//     them apart): a hook that deduplicates on the run ID alone would drop
//     the retried run's outcome. Hook errors are retried with
//     backoff (terminal.RetryAfter honoured); terminal.IsPermanent errors and
//     exhausted attempts dead-letter the notification.
//   - Status, ListRuns, Cancel, Retry, Signal, Pause, Resume and the
//     schedule calls (SetSchedule, DeleteSchedule, ListSchedules) read and
//     write the durable records, so they work from any Runtime on the store
//     (client Runtimes included) and after restarts. A waiting or paused run
//     holds no step slot, no lease and no claimable job (it keeps its slot
//     of a concurrency key, if it has one).
//
// # Cancel
//
// Cancel of a run whose step is queued or scheduled, that waits for a
// signal, or that is paused with its next step parked, removes the step
// (or the timeout job, or the parked step) and ends the run Cancelled in
// one transaction; Retry of it runs that step again with the payload it
// had (a run cancelled while waiting: its next step with an empty payload
// and no Step.Signal). For a running step it sets the
// run's cancel flag durably and cancels the step's context with cause
// steprunner.ErrRunCancelled; the run ends Cancelled (Error "") when the
// step returns, whatever it returns, unless the step itself returned
// Cancel(reason). A run's deadline (Policies) ends it the same ways, but
// Failed, and a running step's at once: its ctx ends with cause
// ErrRunDeadline (the step's Runtime reads the run record to tell the two
// apart: only Cancel sets the cancel flag). A step's context is also cancelled when its lease is lost
// (steprunner.ErrLeaseLost) and when a stopping Run's drain timeout passes
// (steprunner.ErrShutdown; the step is released for another attempt).
//
// # Caveats
//
// One process is the writer of a store; Runtimes in that process share it.
// Runtimes in other processes are refused (queue.ErrStoreLocked) unless
// every process opens the store in cluster mode (queue.WithCluster), where
// they are members that forward to the writer, with the same guarantees.
// A step that runs longer than the queue lease keeps its lease: Run renews
// it (until its step timeout, if it has one). Step payloads and results up
// to the queue's value limit (64 MiB by default) are supported; large ones
// are stored as their own objects. A result or payload over it fails the
// run (see the table); error and reason texts are bounded (see Records).
package runtime
