package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"gocloud.dev/gcerrors"
)

// Sentinel errors. Every error a Bucket returns is an *OpError; test for
// these with errors.Is. None of them is fixed by retrying the same request.
var (
	// ErrNotFound means the object does not exist. Retrying does not help
	// (unless another writer is expected to create the object).
	ErrNotFound = errors.New("objstore: object not found")
	// ErrExists means a create-only (ifNotExist) write found the key already
	// present and changed nothing. Retrying does not help. On cloud
	// stores the object found may be this caller's own earlier attempt: see
	// the package documentation on ambiguous writes.
	ErrExists = errors.New("objstore: object already exists")
	// ErrLocked means the store's lock is held by another process or by
	// another open Bucket in this process. Retrying helps only once the
	// holder has closed its Bucket or died.
	ErrLocked = errors.New("objstore: store is locked by another writer")
	// ErrInvalidURL means the store URL is malformed, has an unknown scheme,
	// a missing bucket name, an unsupported query parameter, or a relative
	// file path. Retrying does not help.
	ErrInvalidURL = errors.New("objstore: invalid store URL")
	// ErrInvalidKey means a key breaks the key rules in the package
	// documentation, or (file driver only) collides with a directory that
	// holds other keys. Retrying does not help.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrClosed means the Bucket or Writer was used after Close. Retrying
	// does not help.
	ErrClosed = errors.New("objstore: bucket closed")
)

// OpError is the error type every Bucket operation returns. It names the
// operation and key; Err holds the cause, which wraps a sentinel error where
// one applies (errors.Is sees through OpError).
type OpError struct {
	// Op is the operation: "open", "get", "read", "put", "write", "close",
	// "delete", "list" or "lock".
	Op string
	// Key is the object key (the prefix, for "list"; the URL, for "open";
	// empty for "lock").
	Key string
	// Err is the underlying error.
	Err error
}

// Error implements error.
func (e *OpError) Error() string {
	msg := "<nil>"
	if e.Err != nil {
		msg = strings.TrimPrefix(e.Err.Error(), "objstore: ")
	}
	if e.Key == "" {
		return "objstore: " + e.Op + ": " + msg
	}
	return fmt.Sprintf("objstore: %s %q: %s", e.Op, e.Key, msg)
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }

func opErr(op, key string, err error) error {
	return &OpError{Op: op, Key: key, Err: err}
}

// transientError marks an error a driver has classified as transient.
type transientError struct{ err error }

func (e *transientError) Error() string   { return e.err.Error() }
func (e *transientError) Unwrap() error   { return e.err }
func (e *transientError) Retryable() bool { return true }

// permanentError marks an error that retrying the same request must not be
// trusted to fix, whatever its cause (see IsRetryable on syncs).
type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Retryable() bool { return false }

// IsRetryable reports whether err is a transient failure that retrying the
// same request may fix: service unavailability, throttling, internal and
// unknown service errors, timeouts (context.DeadlineExceeded, which for a
// caller's own deadline is moot), network errors, connection resets,
// truncated responses (io.ErrUnexpectedEOF), and a full disk or quota
// (syscall.ENOSPC, syscall.EDQUOT): a file-driver write that fails so
// leaves nothing behind (its staged file is discarded, nothing is
// published), and the same request succeeds once space is freed, by an
// operator or by the caller's own garbage collection. Retry with backoff.
//
// It reports false for nil, for the package's sentinel errors (ErrNotFound,
// ErrExists, ErrLocked, ErrInvalidURL, ErrInvalidKey, ErrClosed), for
// context.Canceled, for permission and invalid-argument errors, for other
// local file-system errors (a read-only file system, syscall.EROFS, which
// stays so until an operator remounts it, usually after repairing what
// made the kernel remount it; EIO and other failing-disk errors), for any
// failure of Segment.WriteAt, Segment.Sync or Segmenter.SyncPrefix, or of
// the file driver's directory sync after it made a name, whatever its
// cause, and for any error it does not recognise. Syncs are never
// retryable: after a failed fsync the kernel may have dropped the dirty
// pages it could not write and marked them clean, so a second fsync can
// succeed without the data being durable; write the data anew instead.
//
// An error in whose chain some error has a method
//
//	Retryable() bool
//
// is classified by that method; fault injectors use this.
//
// Ambiguity: after a retryable error from Put or Writer.Close the object may
// or may not have been written. A caller that retries a create-only write and
// gets ErrExists must read the object back and compare it with what it sent
// to learn whether the earlier attempt succeeded.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	for _, permanent := range []error{ErrNotFound, ErrExists, ErrLocked, ErrInvalidURL, ErrInvalidKey, ErrClosed, errors.ErrUnsupported} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	var r interface{ Retryable() bool }
	if errors.As(err, &r) {
		return r.Retryable()
	}
	for _, transient := range []error{
		context.DeadlineExceeded, io.ErrUnexpectedEOF,
		syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.ETIMEDOUT,
		syscall.ENOSPC, syscall.EDQUOT,
	} {
		if errors.Is(err, transient) {
			return true
		}
	}
	// syscall.Errno satisfies net.Error too; errno values from the file
	// system (EROFS, EIO) are not network errors.
	var ne net.Error
	if errors.As(err, &ne) {
		_, isErrno := ne.(syscall.Errno)
		return !isErrno
	}
	switch gcerrors.Code(err) {
	case gcerrors.DeadlineExceeded, gcerrors.ResourceExhausted, gcerrors.Internal:
		return true
	}
	return false
}
