//go:build linux || darwin

package objstore

import (
	"errors"
	"os"
	"syscall"
)

// fileSupported reports whether this platform has the file driver.
const fileSupported = true

var errNotDir = syscall.ENOTDIR

// syncDir fsyncs a directory, making the entries created, renamed or
// removed in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync() // F_FULLFSYNC on darwin
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// unlinkFile removes a file, never a directory (unlike os.Remove).
func unlinkFile(path string) error {
	err := ignoringEINTR(func() error { return syscall.Unlink(path) })
	if err != nil {
		return &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	return nil
}

// lockFile takes flock(LOCK_EX|LOCK_NB) on f. flock locks belong to the
// open file description, so a second open of the same file, in this
// process or another, conflicts; the kernel drops the lock when the
// description is closed, including at process death. It returns ErrLocked
// if the lock is held elsewhere.
func lockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		lerr = ignoringEINTR(func() error { return syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB) })
	}); err != nil {
		return err
	}
	if errors.Is(lerr, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	if lerr != nil {
		return &os.PathError{Op: "flock", Path: f.Name(), Err: lerr}
	}
	return nil
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }
func isDirErr(err error) bool { return errors.Is(err, syscall.EISDIR) }

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
