package queuex

import "strings"

// The error texts that the queue records in a job's history
// (queue.Attempt.Error) for an attempt that no worker settled: package
// queue writes them (its reaper, and Open for the claims a stopped
// process left), and the runtime's run history recognises such an
// attempt by them (LostAttempt). They are the one copy of those texts:
// both sides use these constants. Job histories keep them on the bucket
// across versions: never change them.
const (
	// LeaseExpired: the attempt's lease ran out (its worker died or
	// stalled); the job was requeued, or dead-lettered at its limit.
	LeaseExpired = "lease expired"
	// WorkerStopped: Open found the attempt claimed by a process that
	// stopped without settling it; the job was made pending again.
	WorkerStopped = "worker stopped without settling"
	// WorkerStoppedLast is WorkerStopped on the job's last attempt: the
	// job was dead-lettered with it.
	WorkerStoppedLast = WorkerStopped + " (last attempt)"
)

// LostAttempt reports whether an attempt that failed with errText
// (queue.Attempt.Error) was ended by the queue, not by its worker: its
// lease expired or its process stopped without settling it.
func LostAttempt(errText string) bool {
	return errText == LeaseExpired || strings.HasPrefix(errText, WorkerStopped)
}
