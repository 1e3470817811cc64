package objstore

import (
	"errors"
	"os"
)

// macOS has no O_TMPFILE: every write stages a named temporary file.
func anonSupported() bool                       { return false }
func openAnon(string) (*os.File, error)         { return nil, errors.ErrUnsupported }
func anonUnsupported(err error) bool            { return errors.Is(err, errors.ErrUnsupported) }
func linkAnon(*os.File, *os.File, string) error { return errors.ErrUnsupported }

// syncData uses F_FULLFSYNC (os.File.Sync): fdatasync on macOS does not
// flush the drive's cache.
func syncData(f *os.File) error { return f.Sync() }

// writeBack is a no-op on macOS, which has no sync_file_range.
func writeBack(*os.File, int64, int64, int64) {}

// writeDsync is not available here: segment records are written, then
// synced (see fileSegment.WriteAtSync).
func writeDsync(*os.File, []byte, int64) error { return errors.ErrUnsupported }

func dsyncUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
