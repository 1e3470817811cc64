package cluster

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// ErrUnauthenticated: the writer refused a call without the epoch's
	// secret. Retrying with the same secret cannot help; read the owner
	// object again (the writer may have changed).
	ErrUnauthenticated = errors.New("cluster: call refused: not authenticated for this writer")
	// ErrStaleEpoch: the call and the writer that received it are of
	// different epochs (a member's view of the owner object is out of
	// date, or a deposed writer answered). Nothing was done. Read the owner
	// object again, then retry.
	ErrStaleEpoch = errors.New("cluster: call refused: writer epoch differs")
)

// Metadata keys every call carries, and the reply header key.
const (
	mdEpoch  = "stepwell-epoch"
	mdSecret = "stepwell-secret"
)

// mapErr turns a refused call's status into this package's errors; other
// errors pass through as gRPC status errors.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	switch status.Code(err) {
	case codes.Unauthenticated:
		return errors.Join(ErrUnauthenticated, err)
	case codes.FailedPrecondition:
		if s, _ := status.FromError(err); s != nil && s.Message() == ErrStaleEpoch.Error() {
			return errors.Join(ErrStaleEpoch, err)
		}
	}
	return err
}
