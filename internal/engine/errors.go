package engine

import (
	"errors"
	"fmt"
)

var (
	// ErrFenced means another writer has taken over the store: this engine
	// found its next WAL object already written. Not retryable on this
	// engine; reopen (which waits for or takes over from the new writer).
	ErrFenced = errors.New("store was taken over by another writer (fenced)")
	// ErrLocked means another live writer holds the store. Retryable later,
	// or open with takeover on a bucket store.
	ErrLocked = errors.New("store is locked by another writer")
	// ErrClosed means the engine was closed.
	ErrClosed = errors.New("store is closed")
	// ErrReadOnly means a write was attempted through a read-only engine.
	ErrReadOnly = errors.New("store is open read-only")
	// ErrOutcomeUnknown means a call stopped waiting (its ctx ended, or the
	// store was closed while unreachable) after its transaction was
	// accepted but before its batch was durable: the transaction may or
	// may not commit. It is wrapped with the cause (ctx's error).
	ErrOutcomeUnknown = errors.New("outcome unknown: the transaction may or may not have committed")
)

// CorruptionError reports an object that failed validation. Never retryable:
// the object's bytes are wrong and reading them again will not help.
type CorruptionError struct {
	Key string // object key, relative to the store
	Err error  // wraps format.ErrCorrupt
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("corrupt object %q: %v", e.Key, e.Err)
}

func (e *CorruptionError) Unwrap() error { return e.Err }

// WriteError reports a write that failed for good. For a WAL write that
// means an error that retrying cannot fix (not retryLater: permission
// denied, a failing disk); transient ones are retried until the write
// lands. The engine is closed after a WAL WriteError; no caller whose
// transaction was in the failed batch was told it committed. Open and
// large-value uploads report one after Options.WriteRetry of transient
// failures, and then only their call fails.
type WriteError struct {
	Key string
	Err error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("writing %q failed: %v", e.Key, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }
