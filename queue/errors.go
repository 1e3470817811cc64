package queue

import (
	"errors"
	"fmt"
	"strings"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// Errors. Each says whether retrying can help.
var (
	// ErrStoreLocked: another live writer holds the store (a process with
	// the file store's lock, or a bucket writer whose heartbeat is live).
	// Retry once that process has stopped, or open a bucket store with
	// WithTakeover to fence it.
	ErrStoreLocked = fmt.Errorf("queue: %w", engine.ErrLocked)
	// ErrFenced: another writer took over the store after this Queue opened
	// it. The Queue is closed; every call fails with ErrFenced. Retrying on
	// this Queue cannot help; reopen instead. (In cluster mode a fenced
	// writer becomes a member of the new writer instead: see WithCluster.)
	ErrFenced = fmt.Errorf("queue: %w", engine.ErrFenced)
	// ErrClosed: the Queue was closed. Not retryable.
	ErrClosed = fmt.Errorf("queue: %w", engine.ErrClosed)
	// ErrCorrupt is wrapped by every CorruptionError. Not retryable.
	ErrCorrupt = format.ErrCorrupt
	// ErrInvalidURL: the store URL is malformed, relative, or of an unknown
	// scheme, or names a cloud store whose driver the program does not
	// import (queue/s3, queue/gcs, queue/azblob). Not retryable.
	ErrInvalidURL = objstore.ErrInvalidURL
	// ErrReadOnly: a write through a Queue opened WithReadOnly. Not
	// retryable on that Queue.
	ErrReadOnly = fmt.Errorf("queue: %w", engine.ErrReadOnly)
	// ErrKeyNotFound: Get found no value for the key.
	ErrKeyNotFound = errors.New("queue: key not found")
	// ErrEmptyKey: a KV key was empty. Not retryable.
	ErrEmptyKey = errors.New("queue: empty key")
	// ErrConditionFailed is wrapped by ConditionFailedError. Retry after
	// re-reading the key.
	ErrConditionFailed = errors.New("queue: compare-and-put condition failed")
	// ErrTooLarge is wrapped by TooLargeError. Not retryable.
	ErrTooLarge = errors.New("queue: too large")
	// ErrInvalidOption: an Option had an invalid value. Not retryable.
	ErrInvalidOption = errors.New("queue: invalid option")
	// ErrOutcomeUnknown: a call that changes state returned because its
	// ctx ended (or the Queue was closed while the store was unreachable)
	// after its transaction was accepted but before it was durable. The
	// transaction may or may not commit: it commits if its WAL batch lands,
	// which the writer keeps trying to do. The error also wraps ctx's
	// error (errors.Is(err, context.DeadlineExceeded) holds). Retrying is
	// safe where the transaction is idempotent or guarded: a compare-and-put
	// fails with ConditionFailedError if the first attempt committed, an
	// enqueue with a JobID with ErrJobExists, a runtime Submit with the
	// same run ID and input reports the run as already submitted. A plain
	// Put or an enqueue without a JobID or DedupKey may apply twice.
	ErrOutcomeUnknown = engine.ErrOutcomeUnknown
)

// CorruptionError reports an object in the store that failed validation
// (checksum, framing, sequence). Key names the object. Not retryable: the
// store needs an operator; nothing was dropped silently.
type CorruptionError = engine.CorruptionError

// ErrTailLost is wrapped by TailLostError, as ErrCorrupt is, so
// IsCorruption reports true for it. Not retryable: see TailLostError.
var ErrTailLost = engine.ErrTailLost

// TailLostError reports a store whose log ends below the highest WAL
// sequence its writer recorded as durable (in the owner object): the
// newest WAL objects were deleted, or a file:// WAL segment was truncated
// or deleted, and with them acknowledged transactions. Open refuses such a
// store, writer and reader alike, and changes nothing. End, Durable and
// the message name what is missing. Not retryable: put the missing
// objects back, or open with WithAcceptTailLoss to give them up.
type TailLostError = engine.TailLostError

// WriteError reports a write to the store that failed for good; the Queue
// closes after it. No transaction in the failed batch was reported done.
// Transient failures (network errors, timeouts, throttling, 5xx answers, a
// full or read-only disk) are never final: the writer retries them until
// the store answers (see Queue.Health). A WriteError is an error retrying
// cannot fix (permission denied, a failing disk: EIO). Not retryable on
// this Queue; reopen once the cause is fixed. (A large-value upload that
// fails for WithWriteRetry also returns one; only that call fails.)
type WriteError = engine.WriteError

// IsCorruption reports whether err is (or wraps) a corruption error.
func IsCorruption(err error) bool { return errors.Is(err, ErrCorrupt) }

// TooLargeError reports a key, value or transaction over its limit.
type TooLargeError struct {
	What string // "key", "value" or "transaction"
	Size int
	Max  int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("queue: %s of %d bytes exceeds the limit of %d", e.What, e.Size, e.Max)
}

// Unwrap makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// ConditionFailedError reports which compare-and-put failed. The whole
// transaction was rolled back.
type ConditionFailedError struct {
	Key []byte
}

func (e *ConditionFailedError) Error() string {
	return fmt.Sprintf("queue: compare-and-put condition failed for key %q", e.Key)
}

// Unwrap makes errors.Is(err, ErrConditionFailed) true.
func (e *ConditionFailedError) Unwrap() error { return ErrConditionFailed }

// mapErr turns engine errors into this package's sentinels.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrOutcomeUnknown):
		return err // wraps ctx's error or ErrClosed: keep both
	case errors.Is(err, ErrStoreLocked), errors.Is(err, ErrFenced), errors.Is(err, ErrClosed), errors.Is(err, ErrReadOnly):
		return err
	case errors.Is(err, engine.ErrReadOnly):
		return ErrReadOnly
	case errors.Is(err, engine.ErrLocked):
		return &storeLockedError{err}
	case errors.Is(err, engine.ErrFenced):
		return fmt.Errorf("%w (%v)", ErrFenced, err)
	case errors.Is(err, engine.ErrClosed):
		return ErrClosed
	}
	return err
}

// storeLockedError is ErrStoreLocked for an engine error that wraps
// engine.ErrLocked. Each layer below (the file lock, the engine) says
// "store is locked by another writer" before its detail: the message says
// it once, with the innermost detail.
type storeLockedError struct{ err error }

func (e *storeLockedError) Error() string {
	const phrase = "store is locked by another writer"
	detail := e.err.Error()
	if i := strings.LastIndex(detail, phrase); i >= 0 {
		detail = detail[i+len(phrase):]
	}
	if detail = strings.TrimLeft(detail, ": "); detail != "" {
		return ErrStoreLocked.Error() + ": " + detail
	}
	return ErrStoreLocked.Error()
}

// Is makes errors.Is(err, ErrStoreLocked) true; Unwrap keeps the engine's
// error in the chain.
func (e *storeLockedError) Is(target error) bool { return target == ErrStoreLocked }
func (e *storeLockedError) Unwrap() error        { return e.err }

// Job errors.
var (
	// ErrClaimLost is wrapped by ClaimLostError: the claim's lease expired
	// (and the job was requeued or dead-lettered), or the job was settled
	// already. Nothing was changed. Not retryable with this claim.
	ErrClaimLost = errors.New("queue: claim lost")
	// ErrJobNotFound: no job with that ID (it may have completed and been
	// deleted).
	ErrJobNotFound = errors.New("queue: job not found")
	// ErrJobCancelled is the context cause a worker's handler sees when its
	// job is cancelled.
	ErrJobCancelled = errors.New("queue: job cancelled")
	// ErrEmptyQueueName: a queue name was empty. Not retryable.
	ErrEmptyQueueName = errors.New("queue: empty queue name")
	// ErrJobExists: an enqueue named a JobID that is taken. Not retryable
	// with that ID.
	ErrJobExists = errors.New("queue: job ID already exists")
	// ErrInvalidJobID: an EnqueueOptions.JobID has characters or a length
	// outside the rules. Not retryable.
	ErrInvalidJobID = errors.New("queue: invalid job ID")
	// ErrInvalidCursor: a page cursor was not one this package returned.
	ErrInvalidCursor = errors.New("queue: invalid page cursor")
	// ErrNotDead: RequeueDead was called on a job that is not dead.
	ErrNotDead = errors.New("queue: job is not dead")
	// ErrInvalidLimit: a Limit given to SetLimit has a field out of range
	// (see Limit). Nothing was written. Not retryable.
	ErrInvalidLimit = errors.New("queue: invalid limit")
)

// ClaimLostError reports which job's claim was lost.
type ClaimLostError struct {
	JobID string
}

func (e *ClaimLostError) Error() string {
	return fmt.Sprintf("queue: claim on job %s lost (lease expired or already settled)", e.JobID)
}

// Unwrap makes errors.Is(err, ErrClaimLost) true.
func (e *ClaimLostError) Unwrap() error { return ErrClaimLost }
