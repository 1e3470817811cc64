package cluster

import (
	"errors"
	"strings"

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
	// ErrWireVersion: the writer and the member speak different versions
	// of the wire (WireVersion): processes of different releases in one
	// cluster. Nothing was done. Every process of a store must be
	// upgraded together.
	ErrWireVersion = errors.New("cluster: call refused: the writer and the member speak different wire versions (upgrade every process of the store together)")
)

// WireVersion names the wire a process speaks: the messages of its
// methods and the pipe. A writer serves only calls of its own version, and
// a member takes only replies of its own, so that processes of releases
// that do not understand each other refuse each other (ErrWireVersion)
// rather than misread a message. Version 1 is every release before the
// header was sent; 2 added the pipe.
const WireVersion = "2"

// Metadata keys every call carries, and the reply header key.
const (
	mdEpoch  = "stepwell-epoch"
	mdSecret = "stepwell-secret"
	mdWire   = "stepwell-wire"
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
		} else if s != nil && strings.HasPrefix(s.Message(), ErrWireVersion.Error()) {
			return errors.Join(ErrWireVersion, err)
		}
	}
	return err
}
