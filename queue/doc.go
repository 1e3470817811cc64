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
// batches (WithAcceptTailLoss gives them up, logging how many). The record
// lags the log by up to one interval: a loss confined to that interval, or
// one that takes the owner object too, is not seen.
//
// Claim 2: at most one writer's batches are accepted for each sequence.
// WAL objects are written create-only (If-None-Match: * on S3,
// ifGenerationMatch=0 on GCS, link(2) on local disk). A writer writes
// sequences in order without gaps, one write in flight. A new writer first
// lists the bucket and writes empty open-marker batches create-only at the
// next free sequences: one, or, when a live writer may be appending
// (WithTakeover, or after losing a race), a range top+1 .. top+w in
// parallel, widening on each lost attempt (a writer committing faster than
// a List and a PUT take would win a single marker every time). The earlier
// writer stops at the first sequence it finds taken, so once every marker
// write is resolved the range holds a prefix of its batches and a suffix of
// ours; if what we hold is not such a suffix (two openers raced) we list
// again. With our lowest marker m in place, every earlier writer's next
// write targets a sequence <= m that is taken, so it fails. A failed create-only write is resolved by reading the
// object back: byte-equal means our own earlier attempt landed (batches
// carry the writer's random identity, so two writers never produce equal
// bytes); anything else means this writer is fenced, and it fails every
// pending and later call with ErrFenced without acknowledging them. A WAL
// segment (file:// only) is published create-only like an object, but its
// records are then written in place, which no marker can fence: segments
// are used only where an OS lock (flock(2), see Ownership) keeps any other
// writer out while they are written, so on file:// stores claim 2 rests on
// that lock, and a file system that does not honour it (NFS mounted with
// nolock or local_lock) is not a safe place for a store.
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
// the writer serves), so an idle writer makes no requests. A bucket store has no
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
// Without WithCluster nothing in this section applies, and nothing changes:
// one process opens a store, and a second one gets ErrStoreLocked or, with
// WithTakeover on a bucket store, fences the first.
//
// With WithCluster, any number of processes open the same URL, and each
// gets a Queue that works as usual, in one of these roles (Queue.Role):
//
//   - RoleWriter: exactly one process is the writer, as above. It holds
//     the state, makes every commit durable, and serves the other
//     processes over gRPC (HTTP/2) on ClusterConfig.Listen.
//   - RoleMember: every other process is a member. It loads nothing and
//     forwards every operation (transactions, enqueues, claims and Work
//     loops with lease renewal, settlements, KV reads and scans, stats,
//     dead letters) to the writer, which applies it with the same
//     guarantees: a call returns after the writer's commit is durable, and
//     a read sees every write acknowledged before it, as the writer
//     answers it. A Runtime on a member claims steps from the writer and
//     runs them locally, and a Cancel from any process reaches the step
//     running in any other: the writer tells the member that holds the
//     claim, whose step's context is cancelled.
//   - RoleReadOnly: a Queue opened WithReadOnly, cluster mode or not. It
//     reads the store itself, as of Open or Refresh, and calls no writer.
//
// A member's role becomes RoleWriter when it takes over; a writer fenced by
// another process becomes a member of the new writer. The API is the same
// in every role. Use WithCluster in every process of a store (a writer
// not in cluster mode serves no members, and requeues the claims that
// members hold when it opens), with the same WithHeartbeat.
//
// Enabling it:
//
//	q, err := queue.Open(ctx, url, queue.WithCluster(queue.ClusterConfig{
//		Listen:    ":7420", // served while this process is the writer
//		Advertise: net.JoinHostPort(os.Getenv("POD_IP"), "7420"), // what members dial
//	}))
//
// Listen is required: the address a process serves members on while it is
// the writer ("127.0.0.1:0", any free port, for processes on one host:
// members read the port from the store). Advertise is the address members
// dial, written into the store; it defaults to the address bound, with the
// host name in place of an unspecified host (":7420" advertises
// "HOSTNAME:7420"): set it where host names do not resolve. A set
// Advertise must name a host and a port (":7420", from an unset POD_IP
// above, is ErrInvalidOption). DialTimeout
// (default 2s) bounds how long a member waits for the writer named in the
// store to answer before it looks again. TLS is described below. A mem://
// store cannot be shared and refuses WithCluster. WithTakeover has no
// effect in cluster mode: only the store decides who writes.
//
// Open in cluster mode returns as the writer if the store is free, or as a
// member once the writer answers. A live writer that is not in cluster
// mode makes it fail with ErrStoreLocked once it has seen that writer serve
// no members for two heartbeat intervals (2s at least). A writer in
// cluster mode that this process cannot reach makes it look again until
// ctx ends: give it a deadline.
//
// Discovery goes through the store: the writer writes its advertised
// address and a random secret drawn for its epoch into the owner object
// (on file:// the file "owner" in the store's directory, beside the lock),
// and members read them there. There is no other service to run.
//
// What a member costs: every operation is a call to the writer, one round
// trip on top of the writer's own work (a commit still waits for the
// writer's WAL write). Calls are batched and long-polled, so that a member
// is not bound by round trips: transactions from concurrent goroutines
// share a commit call (each with up to 512 transactions or 16 MiB), as
// transactions share a WAL write on the writer; a second call goes while
// one is in flight only for a full batch (12 transactions). The writer
// applies a call's transactions from one goroutine. A Work loop that wants
// a job while a commit call is in flight adds its claim to the next one
// (the writer claims after the call's transactions, without waiting), and a
// settlement made in a Work handler that frees its slot (it claims no next
// job) claims the slot's next job in the same call; otherwise a claim waits
// on the writer for a job (a long-poll of up to 10s) instead of polling.
// One standing long-poll brings the cancels and losses of the member's
// claims. EnqueueOptions.Dispatch works in a member too: the member takes
// an idle slot of its own Work loop before it sends the commit, and the
// writer claims the job for it in the transaction (no claim call). The
// runtime's steps bring their run record with them (the transaction that
// started a step wrote it, or the writer reads it with the claim), so a
// member's step costs one call, its settlement: about 0.12 calls per step
// transition at saturation (docs/BENCHMARKS.md). Lease renewals share calls
// too (as do reads), and a renewal makes none while the writer confirmed
// the lease less than a quarter lease ago. A member makes no object-store
// requests for its operations and holds no state. To watch the writer, a
// member reads the owner object every quarter heartbeat interval on bucket
// stores (two GETs a second with the default heartbeat); on file:// it
// tries to take the lock every 2s, and as soon as its connection to the
// writer breaks. The writer does the work of every member: its commits,
// memory and object-store requests are those of one process doing all of
// it.
//
// Options: a member's calls carry its queue settings (WithLease,
// WithMaxAttempts, WithRetryBackoff, WithQueueConfig), and the writer
// applies each call with them, as the member's own process would. A
// transaction's limits (WithMaxValueSize, MaxTxnInlineBytes) are checked
// by the process that commits it, before any call. How the store is
// written is the writer's alone (WithLargeValueThreshold,
// WithSnapshotThreshold, WithHeartbeat, WithWriteRetry). Give every
// process of a store the same options: any of them may become the writer.
//
// Failover: a member takes over only when the store says the writer is
// gone, and opens the store as a new writer does (fencing, claim 2):
//
//   - bucket stores: when a member, reading the owner object every quarter
//     heartbeat interval, has seen its heartbeat unchanged for 2.25
//     intervals, and after a random pause of up to a quarter of an
//     interval that keeps members from racing: 2.25 to 3 intervals after
//     the writer's last beat (4.5 to 6s with the default 2s heartbeat),
//     then it loads the state. Having won its open markers, a new writer
//     names its epoch in the owner object before it loads the state, so
//     that members that judged the old writer dead at the same moment see
//     it, look again, and join it rather than fence it. Measured on MinIO with the default
//     heartbeat: a member was the writer 3.6 to 3.8s after the writer
//     stopped.
//   - file:// stores: as soon as the lock is free, which is when the
//     writer's process exits, however it exits. Members see their
//     connection to the writer break and try at once (then every 200ms
//     while it stays broken; every 2s in any case).
//   - a clean Close: the writer ends its members' long-polls, then closes
//     the store, which marks it free (on bucket stores, a closed owner
//     object): a member takes over at once. Measured in tests: a member
//     was the writer 5 to 60ms after Close returned (file://, MinIO).
//
// Claims survive the switch. A job record carries the token of its claim,
// so claims are part of the committed state: a writer that opens the store
// in cluster mode adopts every recorded claim instead of requeueing it,
// until a lease after the claim was made (the record's time), or, if that
// has passed, for a short grace (a second, or half a heartbeat if longer;
// never more than the lease). The members holding them confirm them as
// they join the new writer (they list their claims to it at once), which
// gives each a lease from then; they renew and settle them with the same
// tokens, and their steps go on undisturbed, as do those of a member that
// becomes the writer. A claim that no one confirms (the steps the dead
// writer ran itself) expires, and its job runs again, within a lease of
// its claim however many writers take over in between (or within the
// grace of the first writer to outlive the grace, if one took over after
// the lease had run): after a crash such jobs wait up to one lease
// (WithLease, 30s by default) longer than without cluster mode, where Open
// requeues them at once. A process that does not reach the new writer
// within the grace (a member cut off from it, or a deposed writer that
// lives on, paused or cut off from the bucket, until it rejoins) loses
// those of its claims made over a lease ago, as renewals are not recorded:
// their jobs run again, and their steps' contexts end once it reaches the
// writer (a ClaimLostError). A call that a change of writer interrupted
// is sent again to the next writer when it cannot apply twice: when one
// of its operations fails if applied a second time (a settlement, by its
// claim token; a compare-and-put or -delete that changes its key; an
// enqueue with a JobID; a RequeueDead), since a transaction applies whole
// or not at all. Any other returns ErrOutcomeUnknown. Nothing
// acknowledged is lost: every acknowledgement is a writer's, after its
// commit was durable.
//
// Sizes: a call is at most 512 MiB and carries a transaction's values,
// large ones too (which a writer stores outside its WAL, so that in one
// process they do not count towards MaxTxnInlineBytes): a member's
// transaction that would not fit is refused before it is sent, with a
// *TooLargeError. A member's claims take fewer jobs rather than carry more
// than 128 MiB of payloads in the reply of one call (the first claim takes
// at least one job).
//
// Ports and TLS: members dial the writer; the writer never dials a member.
// Every process's Listen port must be reachable from the others, as any of
// them may become the writer. Without ClusterConfig.TLS, calls are
// plaintext HTTP/2, each authenticated by the epoch's secret, which an
// observer of the network can read: use it on a trusted network only.
// With TLS, a process serves with the config while it is the writer
// (Certificates; ClientAuth and ClientCAs for mutual TLS) and dials with it
// as a member (RootCAs; Certificates for mutual TLS), so give every process
// both halves: a certificate valid for the name it advertises (usable for
// client authentication too, with mutual TLS), and the CA of the others'.
// The epoch's secret is checked with TLS as without.
//
// Permissions: bucket access is cluster access. Whoever can read the
// owner object (the bucket and prefix, or the file:// directory) learns the
// writer's address and its epoch's secret, and can call the writer: make
// any change to the store. Read access to a store thus grants write access
// through its writer, wherever the writer's port is reachable: give read
// access only to processes you would let write, or require client
// certificates (mutual TLS), which a caller must hold as well. Calls
// without the secret, with a wrong one, or for another epoch are refused
// before anything runs, and logged at WARN (at most one line a second).
// Each writer draws a new secret, and a member never acts on a reply from
// a writer of another epoch.
//
// Network partitions: takeover is decided by the store alone, never by a
// failed call, so a member that cannot reach a live writer waits and never
// fences it.
//
//   - A member cut off from the writer (not from the store): its calls wait
//     and go out again once a writer answers, or end with their ctx
//     (ErrOutcomeUnknown when the writer may have applied one). Its running
//     steps go on while their claims' leases, as the writer last confirmed
//     them, last: a renewal it cannot send is not a loss until then. Once
//     a lease has run out, the next renewal reports the claim lost and the
//     step's context ends (a ClaimLostError). The writer, getting no
//     renewals, has requeued the job by then, and it runs elsewhere: the
//     step may run twice, as with any expired lease. A settlement of such a
//     claim is refused (ErrClaimLost) when it reaches a writer: none
//     settles twice.
//   - A writer cut off from its bucket stops beating: a member that can
//     read the bucket takes over, as above, and fences it; the old
//     writer acknowledges nothing more (its next write fails with
//     ErrFenced) and joins the new writer as a member. On file:// the
//     writer keeps the lock as long as its process lives.
//   - Processes that reach neither the writer nor the store wait: nothing
//     is acknowledged meanwhile.
//
// Toward several writers: one writer's CPU bounds a store. The way past it
// is shards, each a store of its own (a prefix of the bucket) with its own
// writer, and runs routed by a hash of the run ID; a member would keep a
// map of the shards' owner objects. Nothing in cluster mode assumes one
// writer per process: a member's backend talks to one writer epoch,
// claim tokens and member IDs are per writer, and every call names the
// epoch it is meant for. Shards are not built.
//
// # Caveats
//
//   - A fenced writer that makes no writes (bucket stores) may serve stale
//     reads until its heartbeat check notices the newer owner: every third
//     beat it reads, in turn, the owner object (for a newer epoch) and the
//     WAL at its own next sequence (where the newer writer's open marker
//     stands), so within six beats unless both miss: the marker once 64
//     more writers have opened the store, the owner object when the
//     store's latency nears the heartbeat interval.
//   - Cancelling the context of a call whose transaction was already
//     accepted does not withdraw it: the call returns ErrOutcomeUnknown
//     and the transaction commits if its batch lands. Retry only what is
//     idempotent or guarded (see ErrOutcomeUnknown). Reads whose ctx ends
//     while they wait for durability return ctx's error.
//   - Health reflects WAL writes: an idle writer notices an outage only at
//     its next commit (or, on bucket stores, by its failing heartbeat,
//     which is logged).
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
