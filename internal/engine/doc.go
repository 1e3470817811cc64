// Package engine is Stepwell's storage engine: a single-writer,
// transactional, ordered key-value store whose state lives in memory
// (copy-on-write B-trees) and whose durability is a log of group-commit
// batches (wal/<seq> objects, or records of wal/<seq>.log segments on
// buckets that have them: file://) and background snapshots (snap/<seq>)
// in a bucket (internal/objstore). The on-bucket formats are in
// internal/format; the correctness argument (fencing, group commit,
// recovery) is in the package documentation of queue, which is built on
// this package.
//
// # Concurrency
//
// One mutex (Engine.mu) guards the tree, the open batch and the counters.
// Transaction functions (Update, Apply) and reads (View) run with it held;
// an Indexer is called with it held. Transactions are not applied by each
// caller taking the mutex in turn: callers queue them, and one of them,
// the combiner, applies what is queued under one acquisition, each on its
// own (its rollback, its error), and wakes their callers (see Apply); a
// transaction function may run on another caller's goroutine. One
// committer goroutine seals and writes batches with a single write in
// flight (it alone writes into the current WAL segment, each record in
// one write that returns once it is durable: pwritev2 with RWF_DSYNC on
// file://; a background goroutine stages the next); a snapshot goroutine
// serializes a tree clone; a heartbeat goroutine (bucket stores)
// rewrites the owner object. A read-only engine's Refresh calls run one at
// a time (Engine.follow), keeping their place in the segment they follow.
// Stores with an OS lock (objstore.Locker: file://) have no heartbeat: the
// lock keeps other writers out and the open-marker batch fences; a mark
// goroutine records the durable sequence in the owner object at most once
// a second while commits go on (see tail.go), so an idle writer makes no
// requests (beyond at most one switch of a nearly full WAL segment as it
// goes idle, see segLog.rotateIdle).
// Fields are grouped in Engine as immutable after Open and guarded by mu.
//
// # Outages
//
// The committer retries a WAL write that fails transiently until it lands
// (health.go): the store never closes for an outage. Its health (its own
// leaf mutex) tells callers whether the store answers and how long it has
// been stalled in total (StallTime), which the queue subtracts from lease
// time. Update returns ErrOutcomeUnknown when its ctx ends before its
// batch is durable; Apply lets a caller that must learn the outcome keep
// waiting (with a ctx that does not end). Final errors: ErrFenced,
// CorruptionError, WriteError (not retryLater) and ErrClosed.
//
// # Key space
//
// Keys are opaque strings ordered bytewise. The engine reserves the prefix
// "e/" (open-marker epochs); layers above choose their own prefixes (queue:
// "k/", "j/", "p/", "l/"). Values are tagged: inline bytes or a reference to a
// blob object (see Inline, BlobRef, Decode).
package engine
