// Package queue is Stepwell's durable store: a transactional key-value space
// (and, built on it, a job queue) whose entire state lives in a bucket: S3,
// GCS, Azure Blob, a local directory, or process memory, chosen by URL.
//
// # Basics
//
// One process at a time is the writer of a store. It holds the whole state
// in memory (ordered, copy-on-write B-trees) and makes it durable as a log:
//
//	wal/<seq:020d>    one group-commit batch of transactions, create-only
//	wal/<seq:020d>.log
//	                  a WAL segment (file:// only): batches <seq>, <seq>+1, ...
//	snap/<seq:020d>   the whole state as of <seq>, written in the background
//	blob/<epoch>-<n>  values above the large-value threshold (256 KiB)
//	owner             the writer's heartbeat (bucket stores), and how far
//	                  the log reached (every store but mem://)
//
// The byte layouts are documented in internal/format.
//
// A call that changes state (Put, Commit, ...) returns nil only after the
// WAL batch holding its transaction is durable: on S3 or GCS, after the
// service acknowledged the PUT of its object; on local disk, after the
// batch was written into a WAL segment, a file preallocated (zero-filled
// and synced) in the background, and fdatasynced. Overwriting blocks that
// are already allocated needs no file-system metadata to be made durable,
// so it takes one disk flush, about a quarter of the time a new file (its
// data, its allocation and its name) takes. When no segment is ready a
// batch is written as an object instead. Transactions from concurrent goroutines
// share WAL objects (group commit): while one WAL write is in flight, the
// next batch fills, so throughput grows with concurrency while each object
// store request carries many transactions. Under load (batches of four
// transactions or more) the writer waits up to half a write's duration for
// a batch smaller than the previous one to fill, so that committers that
// each wait for their commit share one write instead of alternating between
// two half-full ones.
//
// Reads (Get, Scan) see every committed transaction, and a read that would
// observe a transaction not yet durable waits until it is.
//
// Key watches (the workflow runtime's Wait; not part of this API, see
// internal/queuex WatchKey and watch.go) learn of a change of a key
// without polling it. They are futexes: a caller reads a key, then
// watches it with what it read; the watch fires at the first commit that
// writes the key, once durable, or at once if the key no longer holds
// what was read, so a change between the read and the watch is never
// lost. The writer keeps one map entry per watched key, no goroutine per
// watch; while nothing is watched a commit pays one atomic load for it. A
// cluster member carries all its watches to the writer in one long-poll
// (CLUSTER.md), and a change of writer fires them all: each caller reads
// again from the next writer. A Queue opened WithReadOnly learns of no
// commit as it happens and refuses watches (ErrReadOnly).
//
// # Jobs
//
// Enqueue (or Txn.Enqueue, with other changes) adds a job to a named
// queue. Work runs a Handler over a queue with up to Concurrency jobs at
// once: it claims jobs as they become ready, renews their leases while
// they run, and settles each by what its handler returns (Ack on nil;
// Nack, retried with backoff up to the attempt limit; DeadLetter for a
// Permanent error). A job's handler context is cancelled where its
// cancel or its claim's loss is signalled (a callback its lease holds: no
// goroutine per job), and one goroutine and timer per Work loop renew the
// leases of the loop's jobs that run long enough to need it. Delivery is
// at least once: a job whose lease runs out
// (its process died or stalled) is claimed again, and its attempt counts.
// Claim pulls jobs by hand instead, for programs with a loop of their
// own; its leases are not renewed, so such a job is settled (Ack, Nack,
// DeadLetter, or in a Txn) within its lease (WithLease, QueueConfig.Lease).
//
// # Queue limits
//
// SetLimit puts a durable Limit on one queue: at most MaxRunning of its
// jobs claimed at once, and claims at most PerSecond a second (a token
// bucket of Burst tokens; Burst 0 with PerSecond set is 1). A zero field
// is no limit of that kind, the zero Limit removes it; Limits lists them
// and Stats reports a queue's Limit and whether it holds jobs back now
// (Throttled). A job the limit holds back stays pending, in its order,
// and spends no attempt.
//
//	err := q.SetLimit(ctx, "emails", queue.Limit{PerSecond: 50, Burst: 10, MaxRunning: 20})
//
// The limit is exact across processes because every claim is decided in
// one place, the writer (a cluster member's claims are the writer's), and
// each of those places checks it: Claim (one job or a batch, waiting or
// not), Work, the claims that ride a member's commit calls, and the jobs
// claimed in the transaction that enqueues them (the workflow runtime's
// step chaining and dispatch). Its record (l/<queue> in the store's key
// space) is written by an ordinary transaction, so it is in the WAL and
// the snapshots, and a member's SetLimit is forwarded like any commit. The
// writer keeps each limit on the queue's in-memory index as its record
// changes, including at recovery, so a writer that restarts or takes over
// has it before its first claim. The running count is the queue's claimed
// jobs as the state records them: claims adopted at a takeover count
// until they are settled or expire, so a SIGKILL never admits more. The
// token bucket is held in integer nanoseconds (rounding never admits more
// than the rate); it starts empty when the limit is created and whenever a
// writer starts (recovery, failover): the first claim after that waits
// 1/PerSecond, rather than the bucket admitting a burst it may already
// have spent before the crash. Changing a limit keeps its tokens, up to
// the new Burst. A queue without a limit pays one nil check per claimed
// job, and a claim at enqueue one check of a counter, for all this.
//
// # Store URLs
//
// Open takes mem://NAME and file:///ABS/DIR stores in every program. The
// cloud stores need their driver, enabled by importing its package for its
// side effect, as gocloud.dev does; a program links only the cloud SDKs it
// imports:
//
//	import _ "github.com/stepwell/stepwell/queue/s3"     // s3://BUCKET?prefix=P/&region=R (also MinIO)
//	import _ "github.com/stepwell/stepwell/queue/gcs"    // gs://BUCKET?prefix=P/
//	import _ "github.com/stepwell/stepwell/queue/azblob" // azblob://CONTAINER?prefix=P/
//
// Without the import, opening such a URL fails with an error wrapping
// ErrInvalidURL that names the package. Each package's documentation lists
// its URL parameters.
//
// # When it fits
//
// Stepwell fits services that want durable multi-step work without running
// a database or broker: the bucket is the only stateful component. It does
// not fit work that needs sub-millisecond commit latency on object storage
// (each commit waits for one durable write: a few hundred microseconds on
// local disk, 10-50 ms on S3), or
// many writer processes on one store: one process writes; in cluster mode
// (see Cluster mode) the others forward their operations to it, so a
// store's throughput is that of its one writer.
//
// # Limits
//
// A key is at most 1 KiB (MaxKeySize), a job's headers 64 KiB in all
// (MaxHeaderBytes), a value or job payload 64 MiB (WithMaxValueSize), and
// a transaction's inline bytes (values below the large-value threshold,
// and keys) 32 MiB (MaxTxnInlineBytes); a transaction over a limit fails
// with a *TooLargeError and changes nothing. A job's history keeps its
// last 16 failed attempts (Job.History), each with its error text: the
// cause of a Nack, the reason of a DeadLetter, or the queue's own ("lease
// expired", "worker stopped without settling": constants of
// internal/queuex, by which the runtime's run history tells an attempt
// that no worker settled). Each text is kept up to
// 64 KiB, and a dead-letter notice's reason (HeaderDeadReason) up to
// 1 KiB: a longer one is cut at a UTF-8 character boundary and ends with
// "... (truncated, N bytes)", N its full size.
//
// # Why it is correct
//
// Claim 1: a transaction reported committed is never lost. It is reported
// only after its batch (object wal/<s>, or record s of a segment) is
// durable. Recovery reads the newest
// valid snapshot snap/<b> and every WAL object b < s' < marker, and fails
// (naming the key) rather than skipping any that is missing or corrupt. WAL
// objects are deleted only after a snapshot at or above their sequence is
// durable, and a snapshot is only written for a sequence this writer made
// durable. A missing tail (the newest batches deleted, a file:// segment
// truncated or deleted) leaves no gap to see, so the writer records how far
// the log reached in the owner object, off the commit path (every
// heartbeat on buckets; on file:// at most once a second while commits go
// on, and at Open and Close), and Open, writer and reader alike, refuses a
// store whose log ends below it with a TailLostError naming the missing
// batches (WithAcceptTailLoss gives them up, logging how many). So does a
// tail lost below the open markers of later Opens (a marker is a WAL
// object, never a segment record): a gap with only markers above it. The
// record lags the log by up to one interval: a loss confined to that
// interval, or one that takes the owner object too, is not seen. An owner
// object that is there but does not decode was damaged (objects appear
// atomically): a writer's Open refuses it, naming it, as opening would
// rewrite it and hide a loss for good (WithAcceptTailLoss opens without
// the check). On file:// an Open whose recovery fails deletes its marker
// again (the lock kept every other writer out: it fenced no one), leaving
// the store as it found it.
//
// Claim 2: at most one writer's batches are accepted for each sequence. WAL
// objects are written create-only (If-None-Match: * on S3,
// ifGenerationMatch=0 on GCS, link(2) on local disk). A writer writes
// sequences in order without gaps, one write in flight. A new writer first
// lists the bucket and writes empty open-marker batches create-only at the
// next free sequences: one, or, when a live writer may be appending
// (WithTakeover, or after losing a race), a range top+1 .. top+w in
// parallel, widening on each lost attempt (a writer committing faster than a
// List and a PUT take would win a single marker every time). The earlier
// writer stops at the first sequence it finds taken, so once every marker
// write is resolved the range holds a prefix of its batches and a suffix of
// ours; if what we hold is not such a suffix (two openers raced) we list
// again. An opener that dies, or fails, before every write of its range is
// resolved leaves holes below the markers that landed; the next opener's
// recovery, if the lowest hole is above the owner object's durable mark and
// nothing but markers lies above it, writes a marker of its own into each
// hole, create-only (a late write that lands there first, the dead opener's
// or the earlier writer's next batch, stays), and lists again; otherwise the
// lowest hole is a lost batch (claim 1). An opener that finds, as it
// recovers, a snapshot above its own markers was replaced by a newer writer
// (whose collection may have made room for its late marker writes), and
// fails with ErrFenced. Each filler has an epoch key, which keeps its object
// from collection; pruning keeps, of the 64 writers that opened last (every
// Open whose markers landed counts, dead or failed ones too), the first key
// of each run of one writer's markers (the others are nobody's next
// sequence), and the pruning writer's own epoch. A marker that finds its
// sequence taken, and the object gone when read back (collected: a snapshot
// covers it), lost that sequence. With our lowest marker m in place, every
// earlier writer's next write targets a sequence <= m that is taken, so it
// fails. A failed create-only write is resolved by reading the object back:
// byte-equal means our own earlier attempt landed (batches carry the
// writer's random identity, so two writers never produce equal bytes);
// anything else means this writer is fenced, and it fails every pending and
// later call with ErrFenced without acknowledging them. A WAL segment
// (file:// only) is published create-only like an object, but its records
// are then written in place, which no marker can fence: segments are used
// only where an OS lock (flock(2), see Ownership) keeps any other writer out
// while they are written, so on file:// stores claim 2 rests on that lock,
// and a file system that does not honour it (NFS mounted with nolock or
// local_lock) is not a safe place for a store.
//
// Claim 3: the state a new writer recovers is exactly the committed state.
// The marker makes the WAL below m final (claim 2); recovery replays all of
// it, and the batches record physical effects (put key/value, delete key),
// so replay needs no clock, randomness or validation.
//
// Claim 4: nothing unacknowledged is reported done. A transaction's changes
// are applied to memory when it is accepted, but its caller waits for the
// batch. Transient failures (network errors, timeouts, throttling, 5xx
// answers, a full or read-only disk) are retried with the same bytes, with
// capped backoff, for as long as they last, which claim 2's read-back
// makes safe: an outage delays commits but closes nothing, and if another
// writer took over meanwhile the next write finds its sequence taken and
// this writer is fenced. A caller whose ctx ends first gets
// ErrOutcomeUnknown: its transaction may still commit, and is never
// reported done before it has. If the batch write fails for good (fencing,
// an error retrying cannot fix) the whole store closes: every caller in
// that batch and the next one gets the error, and so does every reader
// that saw their changes. On file:// a failed segment write or sync is
// not retried in place (after a failed fsync the file's content is
// unknown): the segment is abandoned and the batch written as a WAL
// object, which recovery reads before any record the abandoned segment
// may hold for the same sequence.
//
// # Outages
//
// While a WAL write fails, or has been in flight for over a second, the
// store is unhealthy (Queue.Health): the writer retries, logging one
// warning per 30s; no new jobs are claimed (claims wait); the reaper
// expires no lease; a lease does not run before its claim is durable, and
// the time the store spends unhealthy extends every lease, so an outage of
// any length spends no attempt. Once the store answers, everything resumes
// by itself. Snapshots that fail are retried after a backoff (1s doubling
// to 5 minutes). Cloud requests time out (connect 10s, response headers
// 30s, idle connections 90s; the URL parameters connect_timeout,
// response_timeout and idle_timeout of s3:// and gs:// stores set them).
// Final, closing the store: ErrFenced, a CorruptionError, a WriteError (an
// error retrying cannot fix: permission denied, EIO) and Close.
//
// Claim 5: a crash at any point leaves a store that opens. Objects appear
// atomically. A crash during a segment write leaves a torn record that ends
// the log (it was never acknowledged; records are 4 KiB-aligned, so it
// cannot damage the one before it, and each carries the random nonce of
// its use of the file, so bytes left by an earlier use, job payloads
// included, never pass for a record); the next writer syncs the segments a
// crashed writer may have left in the page cache before it builds on them,
// and refuses to open, naming the segment, if an unreadable record is
// followed by a valid one (damage, not a torn write). Damage to the last
// record of the log cannot be told from a torn write: a segment's newest
// record is protected by its checksum and the disk, as an object is by the
// store, but a damaged one ends the log one batch early instead of
// stopping Open. A snapshot is created before the objects it supersedes are
// deleted, so a crash during collection leaves extra objects that recovery
// ignores. Large values are uploaded before the transaction referring to
// them; uploads of a transaction that never committed are swept at the next
// Open (only blobs of earlier writers, so the sweep never races uploads).
//
// # Ownership
//
// A file:// store is locked with flock(2) on its directory: a second process
// gets ErrStoreLocked at once (WithTakeover cannot break the lock), and the
// lock dies with its process. Such a store has no heartbeat (its owner
// object only records how far the log reached, and in cluster mode where
// the writer serves), so an idle writer makes no requests (beyond, at most
// once as it goes idle under light load, a switch to a new WAL segment when
// the current one is nearly full). A bucket store has no
// such lock, so the writer rewrites the small owner object
// every heartbeat (WithHeartbeat, 2s by default); Open watches it for 2.5
// intervals and refuses with ErrStoreLocked if it changed. Liveness is
// judged by change, never by comparing clocks. WithTakeover skips the check
// and fences the current writer, even one committing at full speed (the
// marker range of claim 2). The check is advisory: safety rests on the WAL
// sequence alone (claim 2).
//
// # Cluster mode
//
// Without WithCluster nothing in this section applies: one process opens a
// store, and a second one gets ErrStoreLocked or, with WithTakeover on a
// bucket store, fences the first.
//
// With WithCluster, any number of processes open the same URL, and each
// gets a Queue that works as usual, in a role (Queue.Role): one process is
// the writer (RoleWriter), as above, and serves the others over gRPC on
// ClusterConfig.Listen; every other process is a member (RoleMember),
// which loads nothing and forwards every operation to the writer. A call
// returns after the writer's commit is durable, and a read sees every
// write acknowledged before it, so the guarantees above hold in every
// role. A Runtime on a member claims steps from the writer and runs them
// locally; a Cancel from any process reaches the step wherever it runs.
// Use WithCluster, with the same options, in every process of a store:
// any of them may become the writer.
//
//	q, err := queue.Open(ctx, url, queue.WithCluster(queue.ClusterConfig{
//		Listen:    ":7420", // served while this process is the writer
//		Advertise: net.JoinHostPort(os.Getenv("POD_IP"), "7420"), // what members dial
//	}))
//
// Members find the writer through the store (its owner object), so there
// is no other service to run. A member takes over when the store says the
// writer is gone (its heartbeat stopped for 2.25 to 3 intervals, its
// file:// lock freed, or a clean Close), never on a failed call, and the
// claims of running steps survive the switch. A call that the switch
// interrupted is retried with the next writer when it cannot apply twice,
// and otherwise returns ErrOutcomeUnknown. A mem:// store refuses
// WithCluster; WithTakeover has no effect in cluster mode.
//
// Security: bucket access is cluster access. The owner object holds the
// writer's address and its epoch's secret, and whoever can read it can
// call the writer and change the store. Without ClusterConfig.TLS, calls
// are plaintext HTTP/2 and the secret can be read off the network: use it
// on a trusted network only, or require client certificates.
//
// The design (roles, batching and costs, failover, the wire, partitions)
// is described in CLUSTER.md beside this package's code
// (https://github.com/stepwell/stepwell/blob/main/queue/CLUSTER.md).
//
// # Caveats
//
//   - A fenced writer that makes no writes (bucket stores) may serve stale
//     reads until its heartbeat check notices the newer owner: every third
//     beat it reads, in turn, the owner object (for a newer epoch) and the
//     WAL at its own next sequence (where the newer writer's open marker
//     stands), so within six beats unless both miss: the marker once 64
//     more writers have opened the store (an Open whose markers landed
//     counts even if it died or failed), the owner object when the
//     store's latency nears the heartbeat interval.
//   - Cancelling the context of a call whose transaction was already
//     accepted does not withdraw it: the call returns ErrOutcomeUnknown
//     and the transaction commits if its batch lands. Retry only what is
//     idempotent or guarded (see ErrOutcomeUnknown). Reads whose ctx ends
//     while they wait for durability return ctx's error.
//   - Health reflects WAL writes: an idle writer notices an outage only at
//     its next commit (or, on bucket stores, by its failing heartbeat,
//     which is logged; on file://, during an idle segment switch).
//   - The local-disk store pays one disk flush per batch (its WAL segment
//     record), so a lone committer is bound by the disk's flush rate;
//     throughput comes from concurrent committers sharing batches. Each
//     record takes at least a 4 KiB block, and segments are zero-filled
//     before use, so the disk writes several times the WAL's own bytes
//     (about 30 KiB per transition for a lone committer, 5 KiB under load);
//     segments are up to 64 MiB and deleted once a snapshot covers them.
//   - Formats are read forward only: a version reads every store an older
//     one wrote, not the other way round. Do not open a store with an older
//     version than the one that last wrote it: versions before the WAL
//     segment header (November 2026) would take its segments for empty
//     ones and lose the batches in them, and versions before job payloads
//     moved into job records refuse those records as corrupt.
//   - A read-only Queue on a file:// store reads WAL segments in place: it
//     opens by reading each segment's records and a piece past them (not
//     the zeros after), and each Refresh reads the records written since,
//     from where the last one stopped. It may see a batch whose sync has
//     not completed: if that sync then fails, the writer stops without
//     acknowledging it, and a power failure could still take it away.
package queue
