package objstore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// anonSupported reports whether this platform may have O_TMPFILE: an
// unnamed file in a directory's file system that linkat(2) can later give
// a name. Whether the file system supports it is learnt at the first write.
func anonSupported() bool {
	// linkat reaches the unnamed file through /proc/self/fd.
	fi, err := os.Stat("/proc/self/fd")
	return err == nil && fi.IsDir()
}

// openAnon creates an unnamed regular file in the file system of dir,
// open for writing. It has no directory entry, so nothing can see it, and
// the kernel frees it when it is closed, or at the next mount after a crash.
func openAnon(dir string) (*os.File, error) {
	var fd int
	err := ignoringEINTR(func() error {
		var err error
		fd, err = unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(fileObjMode))
		return err
	})
	if err != nil {
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed)")), nil
}

// anonUnsupported reports whether err from openAnon means the kernel or the
// file system has no O_TMPFILE (EISDIR from kernels before 3.11, which
// ignore the flag's upper bits and see a directory; EOPNOTSUPP from file
// systems without it; EINVAL from some), so that the named-temp protocol
// must be used instead.
func anonUnsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)
}

// linkAnon gives the unnamed file f the name name in the directory d, failing
// with EEXIST if the name exists. AT_SYMLINK_FOLLOW makes linkat resolve
// /proc/self/fd/N to the open file itself (the inode), which works for an
// O_TMPFILE file opened without O_EXCL and needs no privilege (unlike
// AT_EMPTY_PATH).
func linkAnon(f *os.File, d *os.File, name string) error {
	var lerr error
	err := withFds(f, d, func(fd, dfd int) {
		src := "/proc/self/fd/" + strconv.Itoa(fd)
		lerr = ignoringEINTR(func() error { return unix.Linkat(unix.AT_FDCWD, src, dfd, name, unix.AT_SYMLINK_FOLLOW) })
	})
	if err == nil {
		err = lerr
	}
	if err != nil {
		return &os.LinkError{Op: "linkat", Old: f.Name(), New: filepath.Join(d.Name(), name), Err: err}
	}
	return nil
}

// syncData makes f's data durable together with the metadata needed to read
// it back (its size and block map), but not its timestamps: fdatasync(2).
// A file's name is made durable separately, by syncing its directory.
func syncData(f *os.File) error {
	if err := withFd(f, unix.Fdatasync); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

// writeBack starts writing f's dirty pages in [off, off+n) to the disk and
// waits for the range before it (the previous call's) to be written, so that
// a large write trickles to the disk instead of reaching it all at once at
// its final fdatasync, where it would delay every other sync on the disk
// (the WAL's) behind it. It is only a pacing hint: it makes nothing durable
// (no metadata, no drive cache flush), and errors are ignored (the final
// sync reports them).
func writeBack(f *os.File, prevOff, off, n int64) {
	_ = withFd(f, func(fd int) error {
		if prevOff < off {
			_ = unix.SyncFileRange(fd, prevOff, off-prevOff, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
		}
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}

// writeDsync writes p at off in f with RWF_DSYNC: pwritev2(2) returns
// once the data, and the metadata needed to read it back, are durable,
// as write(2) then fdatasync(2) would, in one system call. A short write
// goes on with the rest (each part durable when its call returns).
func writeDsync(f *os.File, p []byte, off int64) error {
	iov := [][]byte{nil}
	for len(p) > 0 {
		var n int
		err := withFd(f, func(fd int) error {
			iov[0] = p
			var err error
			n, err = unix.Pwritev2(fd, iov, off, unix.RWF_DSYNC)
			return err
		})
		if err != nil {
			return &os.PathError{Op: "pwritev2", Path: f.Name(), Err: err}
		}
		if n <= 0 {
			return &os.PathError{Op: "pwritev2", Path: f.Name(), Err: io.ErrShortWrite}
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// dsyncUnsupported reports whether err from writeDsync means the kernel
// has no pwritev2 (ENOSYS, before Linux 4.6) or no RWF_DSYNC (EOPNOTSUPP,
// before 4.7), or the file system refuses it (ENOTSUP, EINVAL): nothing
// was written, and a write then fdatasync does the same.
func dsyncUnsupported(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL)
}
