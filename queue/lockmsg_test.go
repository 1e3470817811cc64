package queue

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
)

// TestLockMessageOnce: the error of opening a store that another writer
// holds says "store is locked by another writer" once, not once per layer
// (the file lock, the engine, this package), and is still ErrStoreLocked
// and engine.ErrLocked. cmd/stepwell's
// TestWriteCommandsWhileLocked checks a real second process's Open.
func TestLockMessageOnce(t *testing.T) {
	fileLock := fmt.Errorf("%w: %v", engine.ErrLocked, &objstore.OpError{Op: "lock",
		Err: fmt.Errorf("%w: /srv/app/LOCK (pid of last holder: 4242)", objstore.ErrLocked)})
	heartbeat := fmt.Errorf("%w: its heartbeat is live (open with takeover to fence it)", engine.ErrLocked)
	for _, tc := range []struct {
		in   error
		want string
		is   []error
	}{
		{fileLock, "queue: store is locked by another writer: /srv/app/LOCK (pid of last holder: 4242)",
			[]error{ErrStoreLocked, engine.ErrLocked}},
		{heartbeat, "queue: store is locked by another writer: its heartbeat is live (open with takeover to fence it)",
			[]error{ErrStoreLocked, engine.ErrLocked}},
		{engine.ErrLocked, "queue: store is locked by another writer", []error{ErrStoreLocked, engine.ErrLocked}},
	} {
		err := mapErr(tc.in)
		if err.Error() != tc.want {
			t.Errorf("mapErr(%q) = %q, want %q", tc.in, err, tc.want)
		}
		if n := strings.Count(err.Error(), "locked"); n != 1 {
			t.Errorf("mapErr(%q) = %q says %q %d times", tc.in, err, "locked", n)
		}
		for _, target := range tc.is {
			if !errors.Is(err, target) {
				t.Errorf("mapErr(%q) is not %v", tc.in, target)
			}
		}
		if again := mapErr(err); again != err {
			t.Errorf("mapErr of its own result changed it: %q", again)
		}
		wrapped := fmt.Errorf("%w: cluster: ...", ErrStoreLocked)
		if n := strings.Count(wrapped.Error(), "locked"); n != 1 {
			t.Errorf("%q", wrapped)
		}
	}
}
