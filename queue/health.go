package queue

import (
	"time"

	"github.com/stepwell/stepwell/internal/engine"
)

// Health says whether the store answers the writer. While it does not (a
// WAL write keeps failing with a transient error, or has been in flight
// for over a second), commits wait and the writer retries with backoff,
// logging a warning at most every 30s; no new jobs are claimed; leases do
// not run out; and once the store answers, everything resumes by itself.
// An outage of any length closes nothing (see Err for what does).
type Health struct {
	// Healthy is false while the store is stalled.
	Healthy bool
	// Since is when Healthy last changed: when the stall began, or when
	// the last one ended (the Open time if none).
	Since time.Time
	// LastError is the last failed WAL write attempt's error (kept after
	// the store heals); nil if none failed since Open.
	LastError error
	// Stalled is how long the current stall has lasted (0 when healthy).
	Stalled time.Duration
}

// Health reports whether the store answers this process's writes. A
// read-only Queue, which writes nothing, is always healthy.
func (q *Queue) Health() Health { return q.be.health() }

// StorageStats counts the object-store requests this process has made on
// the store since it was opened, and the engine's work.
type StorageStats struct {
	Puts, Gets, Lists, Deletes, Heads int64
	BytesWritten, BytesRead           int64

	WALBatches uint64 // WAL batches written (including the open markers)
	// WALSegmentBatches counts the WAL batches written as records of WAL
	// segments (file:// stores) rather than as objects of their own.
	WALSegmentBatches uint64
	Transactions      uint64 // transactions committed
	Mutations         uint64 // key changes committed
	WALBytes          uint64
	Snapshots         uint64 // snapshots written
	Keys              int    // keys in the state (all spaces)
	// WALWriteTime sums how long WAL batch writes took, each from its start
	// to its durability: WALWriteTime / WALWrites.Count() is their mean,
	// the floor of a commit's latency (a commit may also wait for the write
	// in flight when it came).
	WALWriteTime time.Duration
	// WALWrites counts the same writes by duration: its quantiles are the
	// floor of a commit's latency, what the store itself takes. Like the
	// other counters, it counts from the store's Open in this process; in
	// cluster mode only the writer counts (a member's are zero, see
	// ClusterCalls), from when it became the writer.
	WALWrites DurationHistogram
	// WALPreallocBytes counts the bytes of the WAL segments staged new
	// (file://: zero-filled files the WAL is then written into), and
	// SnapshotBytes the bytes of the snapshots written: both are part of
	// BytesWritten, beside the WAL's own records.
	WALPreallocBytes, SnapshotBytes uint64
	// Health is the store's health, as Queue.Health reports it.
	Health Health
	// ClusterCalls counts the calls this process made to the cluster's
	// writer as a member (see WithCluster). A member makes no object-store
	// requests of its own: the counts above are zero for it.
	ClusterCalls int64
}

// StorageStats returns the store's request and commit counters.
func (q *Queue) StorageStats() StorageStats { return q.be.storageStats() }

func (l *local) storageStats() StorageStats {
	c := l.counting.Counts()
	s := l.eng.Stats()
	return StorageStats{
		Puts: c.Puts, Gets: c.Gets, Lists: c.Lists, Deletes: c.Deletes, Heads: c.Heads,
		BytesWritten: c.BytesWritten, BytesRead: c.BytesRead,
		WALBatches: s.Batches, WALSegmentBatches: s.SegmentBatches, Transactions: s.Txns, Mutations: s.Mutations,
		WALBytes: s.WALBytes, Snapshots: s.Snapshots, Keys: s.Keys, WALWriteTime: s.WALWriteTime, WALWrites: DurationHistogram{s.WALWrites},
		Health:           l.health(),
		WALPreallocBytes: s.SegmentBytes, SnapshotBytes: s.SnapshotBytes,
	}
}

// DurationHistogram counts durations (StorageStats.WALWrites) in buckets
// each spanning a factor of about 1.19 (4 per doubling). A quantile read
// from it is within 10% of the durations it stands for, from 1 µs to
// about 18 minutes. The zero value counts none.
type DurationHistogram struct{ h engine.Durations }

// Count returns how many durations d counts.
func (d DurationHistogram) Count() uint64 { return d.h.Count() }

// Quantile returns the duration that a fraction q (0 to 1) of the counted
// durations do not exceed (0.5: the median; 1: the longest), to within
// 10%; 0 if d counts none.
func (d DurationHistogram) Quantile(q float64) time.Duration { return d.h.Quantile(q) }

// Sub returns the durations counted in d and not in earlier, an earlier
// reading of the same counter: what happened between the two. If the
// counts restarted in between (see StorageStats.WALWrites), a bucket that
// counts fewer than before counts none: the result never wraps around, but
// is then only approximate.
func (d DurationHistogram) Sub(earlier DurationHistogram) DurationHistogram {
	return DurationHistogram{d.h.Sub(&earlier.h)}
}

func (l *local) health() Health {
	h := l.eng.Health()
	return Health{Healthy: h.Healthy, Since: h.Since, LastError: h.LastError, Stalled: h.Stalled}
}
