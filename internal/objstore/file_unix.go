//go:build linux || darwin

package objstore

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
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

// openDir opens a directory for syncDirFile and for the *at calls below,
// failing with ENOTDIR if dir is not one.
func openDir(dir string) (*os.File, error) {
	return os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// syncDirFile fsyncs an open directory (see syncDir).
func syncDirFile(d *os.File) error { return d.Sync() }

// withFds runs fn with the descriptors of a and b, which stay open (and
// are not closed by a concurrent Close) until fn returns.
func withFds(a, b *os.File, fn func(afd, bfd int)) error {
	ra, err := a.SyscallConn()
	if err != nil {
		return err
	}
	rb, err := b.SyscallConn()
	if err != nil {
		return err
	}
	var inner error
	if err := ra.Control(func(afd uintptr) {
		inner = rb.Control(func(bfd uintptr) { fn(int(afd), int(bfd)) })
	}); err != nil {
		return err
	}
	return inner
}

// placeNamed gives the file at path src the name name in the directory d:
// with linkat(2) when exclusive, which fails with EEXIST if the name exists,
// atomically across processes (src keeps its name too); otherwise with
// renameat(2), which atomically replaces.
func placeNamed(src string, d *os.File, name string, exclusive bool) error {
	op := "renameat"
	if exclusive {
		op = "linkat"
	}
	err := withFd(d, func(dfd int) error {
		if exclusive {
			return unix.Linkat(unix.AT_FDCWD, src, dfd, name, 0)
		}
		return unix.Renameat(unix.AT_FDCWD, src, dfd, name)
	})
	if err != nil {
		return &os.LinkError{Op: op, Old: src, New: filepath.Join(d.Name(), name), Err: err}
	}
	return nil
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
	err := withFd(f, func(fd int) error { return syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) })
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	if err != nil {
		return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	return nil
}

// withFd runs the system call fn with f's descriptor, which stays open (and
// is not closed by a concurrent Close) until fn returns, retrying it on
// EINTR. It returns fn's error, or why the descriptor was unavailable.
func withFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		ferr = ignoringEINTR(func() error { return fn(int(fd)) })
	}); err != nil {
		return err
	}
	return ferr
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
