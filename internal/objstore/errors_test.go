package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

type retryableErr bool

func (e retryableErr) Error() string   { return "custom" }
func (e retryableErr) Retryable() bool { return bool(e) }

func TestIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrNotFound, false},
		{opErr("get", "k", ErrNotFound), false},
		{opErr("put", "k", ErrExists), false},
		{opErr("lock", "", ErrLocked), false},
		{opErr("open", "x", ErrInvalidURL), false},
		{opErr("put", "", ErrInvalidKey), false},
		{opErr("get", "k", ErrClosed), false},
		{context.Canceled, false},
		{opErr("put", "k", fmt.Errorf("request: %w", context.Canceled)), false},
		{errors.New("something unrecognised"), false},
		{os.ErrPermission, false},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, false},
		{opErr("sync", "k", &permanentError{&fs.PathError{Op: "fdatasync", Path: "/x", Err: syscall.ENOSPC}}), false},
		{&fs.PathError{Op: "fsync", Path: "/x", Err: syscall.EIO}, false},
		{errors.ErrUnsupported, false},
		{retryableErr(false), false},

		{context.DeadlineExceeded, true},
		{io.ErrUnexpectedEOF, true},
		{opErr("get", "k", fmt.Errorf("body: %w", io.ErrUnexpectedEOF)), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{&url.Error{Op: "Put", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, true},
		{&net.DNSError{Err: "timeout", IsTimeout: true}, true},
		{opErr("put", "k", &transientError{errors.New("HTTP 503")}), true},
		{retryableErr(true), true},
		{opErr("put", "k", retryableErr(true)), true},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, true},
		{opErr("put", "k", &fs.PathError{Op: "write", Path: "/x", Err: syscall.EDQUOT}), true},
	} {
		if got := IsRetryable(tc.err); got != tc.want {
			t.Errorf("IsRetryable(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

func TestOpErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{opErr("get", "wal/1", ErrNotFound), `objstore: get "wal/1": object not found`},
		{opErr("lock", "", fmt.Errorf("%w: /d/.lock", ErrLocked)), `objstore: lock: store is locked by another writer: /d/.lock`},
		{opErr("put", "k", errors.New("disk on fire")), `objstore: put "k": disk on fire`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q; want %q", got, tc.want)
		}
	}
}

// TestGocloudErrorMapping checks the mapping against errors memblob really
// returns.
func TestGocloudErrorMapping(t *testing.T) {
	ctx := t.Context()
	mb := memblob.OpenBucket(nil)
	defer mb.Close()
	if err := mb.WriteAll(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}

	// A create-only conflict is ErrExists only for create-only writes.
	conflict := mb.WriteAll(ctx, "k", []byte("w"), &blob.WriterOptions{IfNotExist: true})
	if conflict == nil {
		t.Fatal("memblob accepted a create-only write over an existing key")
	}
	if err := mapGocloudErr("put", "k", conflict, true); !errors.Is(err, ErrExists) || IsRetryable(err) {
		t.Errorf("create-only conflict mapped to %v", err)
	}
	if err := mapGocloudErr("put", "k", conflict, false); errors.Is(err, ErrExists) || IsRetryable(err) {
		t.Errorf("FailedPrecondition on a plain write mapped to %v", err)
	}

	_, missing := mb.ReadAll(ctx, "nope")
	if err := mapGocloudErr("get", "nope", missing, false); !errors.Is(err, ErrNotFound) || IsRetryable(err) {
		t.Errorf("NotFound mapped to %v", err)
	}

	_, invalid := mb.ReadAll(ctx, "bad\xff") // InvalidArgument
	if err := mapGocloudErr("get", "bad", invalid, false); IsRetryable(err) || errors.Is(err, ErrNotFound) {
		t.Errorf("InvalidArgument mapped to %v (retryable %v)", err, IsRetryable(err))
	}

	// Unknown-coded errors (HTTP 5xx, connection failures) are transient.
	if err := mapGocloudErr("get", "k", errors.New("HTTP 503"), false); !IsRetryable(err) {
		t.Errorf("unknown gocloud error mapped to non-retryable %v", err)
	}
	if err := mapGocloudErr("get", "k", fmt.Errorf("op: %w", context.Canceled), false); IsRetryable(err) {
		t.Errorf("cancellation mapped to retryable %v", err)
	}

	var oe *OpError
	if err := mapGocloudErr("get", "nope", missing, false); !errors.As(err, &oe) || oe.Op != "get" || oe.Key != "nope" {
		t.Errorf("mapped error %#v does not name op and key", err)
	}
}
