package objstore

import "os"

// Test hooks into the file driver. b must be a file bucket.

// FileStagesUnnamed reports whether create-only writes to b stage unnamed
// O_TMPFILE files (rather than named temporary files).
func FileStagesUnnamed(b Bucket) bool { return b.(*fileBucket).anon.Load() }

// SetFileStagesUnnamed forces the staging mode of create-only writes.
func SetFileStagesUnnamed(b Bucket, on bool) { b.(*fileBucket).anon.Store(on) }

// SetFileOpenAnon replaces how b creates unnamed files, for example to
// simulate a file system without O_TMPFILE. Call it before using b.
func SetFileOpenAnon(b Bucket, fn func(dir string) (*os.File, error)) {
	b.(*fileBucket).openAnon = fn
}

// FileCachedDirs returns how many directories b keeps open.
func FileCachedDirs(b Bucket) int { return b.(*fileBucket).dirs.len() }

// MaxCachedDirs is the bound on FileCachedDirs.
const MaxCachedDirs = maxCachedDirs

// SetFileWriteDsync replaces how b writes a segment record with
// RWF_DSYNC, for example to simulate a kernel without it. Call it before
// using b.
func SetFileWriteDsync(b Bucket, fn func(f *os.File, p []byte, off int64) error) {
	b.(*fileBucket).writeDsync = fn
}

// FileWritesDsync reports whether b still writes segment records with
// RWF_DSYNC (false once the kernel refused it).
func FileWritesDsync(b Bucket) bool { return !b.(*fileBucket).noDsync.Load() }
