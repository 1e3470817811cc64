package runtime

import "errors"

// Errors returned by the runtime. None is retryable with the same input.
var (
	// ErrInputMismatch: Submit of a known run ID with a different input.
	ErrInputMismatch = errors.New("runtime: run already submitted with a different input")
	// ErrReservedHeader: a RunSpec header starts with "workflow.".
	ErrReservedHeader = errors.New(`runtime: header keys starting "workflow." are reserved`)
	// ErrInvalidRunID: empty after trimming spaces, over 128 bytes, not
	// printable ASCII, or containing '/'.
	ErrInvalidRunID = errors.New("runtime: invalid run ID")
	// ErrRunNotFound: no run with that ID in the store (never submitted, or
	// finished longer ago than the terminal retention).
	ErrRunNotFound = errors.New("runtime: run not found")
	// ErrInvalidOption: an Option had an invalid value.
	ErrInvalidOption = errors.New("runtime: invalid option")
)
