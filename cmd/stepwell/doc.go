// Command stepwell is the operator CLI of a Stepwell store: it shows queues,
// runs, jobs and dead letters; cancels, retries, signals, pauses and
// resumes runs; requeues dead jobs; and sets queue limits, on any store URL the queue package
// opens (mem://, file://, s3://, gs://, azblob://).
//
// # Usage
//
//	stepwell [--store URL] [--json] COMMAND [flags] [ARG]
//
// The store comes from --store (accepted before or after the command) or,
// when that is absent, from the STEPWELL_STORE environment variable.
// Flags may appear before or after a command's argument; "--" ends the
// flags (for a run ID that starts with "-").
//
// What it prints quotes what services stored (run errors, headers, queue
// names), so it never passes them to the terminal raw: a carriage return
// shows as \r, other control characters but newline and tab, and
// bidirectional formatting characters, as \u escapes (\u001b, \u202e),
// and invalid UTF-8 as \xHH. An escape sequence a service stored cannot
// recolor the screen, hide a line or write the clipboard. --json output
// keeps its meaning (those escapes are JSON's).
//
// # Commands
//
// Read commands open the store read-only (queue.WithReadOnly): they load
// the state as it is durable in the bucket, write nothing, and never fence
// or block the live writer, so they are safe to run against a production
// store at any time. What they show is a snapshot as of the command's start.
// A store they cannot read fails them within seconds with the store's own
// error (exit 1): requests it refuses (wrong credentials) are not retried,
// and other failures (an endpoint that refuses connections) for 5s only. A
// URL where no store is (a directory, bucket or prefix that holds none:
// a typo) is exit 4. What makes a store is its own objects (its WAL,
// snapshots or owner object), not other files: a directory of other files,
// or one that holds a store only in a subdirectory, is no store. Looking
// for them lists only where they would be, so a URL naming a big
// directory tree fails at once.
//
//	stats   [--queue Q] [--all]  per-queue counts (pending, scheduled,
//	                             claimed, dead, done) and the age of the
//	                             oldest pending job; a storage summary line;
//	                             the writer as the store's owner object
//	                             names it (ID, epoch, age of its last
//	                             heartbeat, cluster address)
//	queues  [--all]              queue names
//	runs    [--state S] [--limit N]
//	                             runs, newest first, with state, current
//	                             step and submit time; S is pending,
//	                             running, cancelling, succeeded, failed or
//	                             cancelled (runtime.Runtime.ListRuns)
//	run     RUN_ID               one run: record, outcome (result, error),
//	                             the signal a waiting run awaits and its
//	                             deadline, whether it is paused, its
//	                             history as a timeline (each committed
//	                             attempt, signal, pause, cancel, retry and
//	                             hook delivery, with its start, duration,
//	                             worker and error; runtime.Runtime.History),
//	                             its step job with attempt history
//	dead    [--queue Q] [--limit N]
//	                             dead-lettered jobs of one queue or all
//	job     JOB_ID               one job: fields, headers, payload preview,
//	                             attempt history
//	schedules                    the schedules (runtime.Runtime.ListSchedules):
//	                             Every or Cron and its zone, the runs'
//	                             concurrency key, step queue,
//	                             next tick, last run, ticks skipped
//	limits                       queue limits (queue.Queue.Limits): per
//	                             queue, its rate, burst and most jobs
//	                             running at once, with its jobs running
//	                             and pending
//
// stats and queues leave out a Runtime's internal queues beside its step
// queue: its notices queue ("workflow-steps.dead" beside "workflow-steps":
// dead-step notices, and notifications of cancelled runs not yet
// forwarded) and its timers queue ("workflow-steps.timers": signal
// timeouts and schedules' ticks); --all shows them.
// A run's step_dead (and "(step dead)" in text) says that its step job is
// dead: for a pending or cancelling run, the run is stuck until the job is
// requeued or a Runtime settles it; for a failed or cancelled run, the step
// that ended it was dead-lettered and its job is kept for inspection.
//
// Write commands change the store through its writer. They never create
// a store: on a URL where no store is they exit 4, as the read commands
// do, before opening anything for writing, and write nothing there (a
// store is created by the first queue.Open that writes it: its
// service's):
//
//	cancel  RUN_ID [--wait D] [--takeover]
//	                             cancel a run (runtime.Runtime.Cancel)
//	requeue JOB_ID [--wait D] [--takeover]
//	                             make a dead job pending again with a fresh
//	                             attempt budget (queue.Queue.RequeueDead)
//	retry   RUN_ID [--wait D] [--takeover]
//	                             run a failed or cancelled run again from
//	                             the step that ended it
//	                             (runtime.Runtime.Retry)
//	signal  RUN_ID NAME [--payload STR | --payload-file F] [--wait D] [--takeover]
//	                             send a signal to a run
//	                             (runtime.Runtime.Signal): a run waiting
//	                             for NAME goes on with the payload; else
//	                             the signal waits in the run's mailbox
//	pause   RUN_ID [--wait D] [--takeover]
//	                             stop a run from starting its next step
//	                             (runtime.Runtime.Pause)
//	resume  RUN_ID [--wait D] [--takeover]
//	                             let a paused run go on
//	                             (runtime.Runtime.Resume)
//	schedules delete NAME [--wait D] [--takeover]
//	                             delete a schedule and its tick job
//	                             (runtime.Runtime.DeleteSchedule); the runs
//	                             it submitted are kept
//	limits  set QUEUE [--per-second F] [--burst N] [--max-running N]
//	                             limit a queue's claims in every process
//	                             of the store (queue.Queue.SetLimit,
//	                             runtime.Runtime.SetQueueLimit); fields
//	                             not given are 0 (none), all 0 removes it
//	limits  remove QUEUE         remove a queue's limit
//
// ui serves the web UI (package ui) until interrupted: runs, each run's
// history as a timeline, queues and dead letters, the writer; and the
// write commands' actions from a browser. By default it never becomes the
// store's writer, so it never keeps a service from opening the store:
// while a service runs the store in cluster mode it joins it as a member
// (its actions go to that writer); otherwise (no process writes the
// store, or its writer is not in cluster mode or does not answer) it
// opens the store read-only, brings it up to date as pages load, and says
// on every page why actions are off and how to turn them on; a service in
// cluster mode started later is joined as pages load. With --write
// and no process writing the store it becomes the writer, in cluster
// mode (a service started later must use queue.WithCluster, and joins
// it); --read-only opens the store read-only whatever runs. Like the read
// and write commands it does not create a store, --write or not: on a URL
// where none is it exits 4. It listens on
// 127.0.0.1:8080, and there answers only requests addressed to localhost
// or a loopback IP (421 otherwise: a page of another site that its DNS
// points at 127.0.0.1, which the browser deems same-origin, is refused;
// a reverse proxy in front of it must send Host: localhost, or the UI be
// served with --auth-token);
// another --listen needs --auth-token (or $STEPWELL_UI_AUTH_TOKEN),
// --basic-auth USER:PASS or --insecure-no-auth.
//
//	ui      [--listen ADDR] [--auth-token T | --basic-auth U:P | --insecure-no-auth]
//	        [--write | --read-only] [--base-path P]
//
// bench runs a synthetic workload through a real Runtime and reports what
// it achieved and cost (see "stepwell help bench" and docs/BENCHMARKS.md);
// point it at a store or prefix of its own. "stepwell help COMMAND" (or
// "stepwell COMMAND --help") prints a command's flags.
//
// Only one process at a time writes a store. A write command opens the
// store in cluster mode (queue.WithCluster), as the processes of a service
// in cluster mode do: while such a service runs, the command joins its
// writer as a member (it dials the address the writer advertises in the
// store, with the secret of its epoch) and the writer does the write, as
// it does for the service's own members: a cancel reaches the step
// running in any of the service's processes. With no process on the
// store, or once the store says its writer died (its file:// lock free,
// its bucket heartbeat stopped, or a clean Close), the command becomes
// the writer for a moment; --listen (default 127.0.0.1:0) is where it
// then serves members that join meanwhile. A service NOT in cluster mode
// keeps the store to itself: the command exits 3 once it has seen that
// writer serve no members for two heartbeats (4s by default; about 10s on
// a bucket store, where telling a live writer from a dead one takes 2.5
// heartbeats each time): do the operation from inside that service (for
// example an admin endpoint calling Runtime.Cancel), after it stops, or
// run the service in cluster mode. --wait (default 20s) bounds all this:
// a writer in cluster mode that does not answer (an address this host
// cannot reach, or TLS flags that do not match the cluster's), and does
// not look dead, is exit 3 too, with the address it advertises. For a
// cluster that uses TLS (queue.ClusterConfig.TLS), give the command the
// cluster's files: --tls-cert and --tls-key (its certificate, required:
// a writer with mutual TLS asks for it, and the command serves with it if
// it becomes the writer), --tls-ca (the CA certificates, PEM; default the
// system's roots), and --tls-mutual to require members' certificates
// meanwhile.
// mem:// stores cannot be shared: the command opens them as their writer.
//
// On bucket stores (s3://, gs://, azblob://) --takeover makes the command
// the writer where it would exit 3, not in cluster mode, which FENCES the
// live service: its next write fails with queue.ErrFenced, its store
// closes and it must be restarted to reopen the store (a service in
// cluster mode rejoins by itself, and takes the store back once the
// command has closed it). Nothing it acknowledged is lost, but its
// in-flight steps are retried later. Use it only on a stuck or unreachable
// writer. file:// stores cannot be taken over: their lock dies with the
// process holding it. Opening a bucket store as its writer first watches
// its owner object for 2.5 heartbeats (5s by default) to tell a live
// writer from a crashed one.
//
// cancel, retry, signal, pause and resume use a client Runtime
// (runtime.New without a runner), which never runs steps. When cancel ends a queued run,
// it enqueues the terminal notification where the service's Runtime recorded
// it in the store; the service's hook delivers it once the service runs.
//
// requeue of the dead final step of a failed or cancelled run retries the
// run (as retry does), which goes on from that step; requeue of the dead
// current step of an active run (its worker died on the last attempt) lets
// the run go on. Other step jobs (of a run that moved on, ended otherwise or
// expired) would never run and are refused. Requeue is otherwise meant for
// plain queue jobs and for dead terminal notifications (which re-delivers
// them to the hook).
//
// # Output
//
// By default commands print aligned tables and key-value lists for people.
// With --json each command prints exactly one JSON document on stdout, with
// snake_case field names that are kept stable: times are RFC 3339 in UTC,
// byte strings (payloads, results) are standard base64 with a *_text
// companion that holds the text when it is printable UTF-8 (null otherwise),
// and absent values are null. A failure prints, instead of the result, one
// JSON document on stdout too, and nothing on stderr:
//
//	{"error": "run \"order-99\" not found (...)", "code": 4}
//
// where error is the message the text form prints (without its "stepwell
// COMMAND: " prefix) and code is the exit code. Without --json, errors go
// to stderr as text and stdout is then empty.
//
// # Exit codes
//
//	0  ok
//	1  the operation failed (store error, corrupt record, job not dead, ...)
//	2  usage error: unknown command or flag, missing argument, no store,
//	   invalid store URL
//	3  a live writer holds the store and this command cannot join it: it
//	   is not in cluster mode, or does not answer within --wait (write
//	   commands)
//	4  not found: the run or job does not exist, or there is no store at
//	   the URL (a directory or bucket prefix that holds none)
//
// # Examples
//
//	export STEPWELL_STORE='s3://acme-jobs?prefix=orders/&region=eu-west-1'
//	stepwell stats
//	stepwell runs --state failed --limit 20
//	stepwell run order-1042
//	stepwell dead --queue workflow-steps --json | jq -r '.dead_jobs[].id'
//	stepwell job 01J9Z3Q4X8T6S7R5P2N0M1K3H4
//	stepwell --store file:///var/lib/app/stepwell cancel order-1042   # joins the service in cluster mode
//	stepwell requeue 01J9Z3Q4X8T6S7R5P2N0M1K3H4
package main
