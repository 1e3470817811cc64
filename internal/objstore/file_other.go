//go:build !linux && !darwin

package objstore

import (
	"errors"
	"os"
)

// fileSupported reports whether this platform has the file driver. The
// driver needs link(2), flock(2) and directory fsync; openFile fails with
// errors.ErrUnsupported elsewhere, and the functions below are never called.
const fileSupported = false

var errNotDir = errors.ErrUnsupported

func syncDir(string) error                            { return errors.ErrUnsupported }
func openDir(string) (*os.File, error)                { return nil, errors.ErrUnsupported }
func syncDirFile(*os.File) error                      { return errors.ErrUnsupported }
func placeNamed(string, *os.File, string, bool) error { return errors.ErrUnsupported }
func anonSupported() bool                             { return false }
func openAnon(string) (*os.File, error)               { return nil, errors.ErrUnsupported }
func anonUnsupported(error) bool                      { return true }
func linkAnon(*os.File, *os.File, string) error       { return errors.ErrUnsupported }
func syncData(*os.File) error                         { return errors.ErrUnsupported }
func unlinkFile(string) error                         { return errors.ErrUnsupported }
func lockFile(*os.File) error                         { return errors.ErrUnsupported }
func isNotDir(error) bool                             { return false }
func isDirErr(error) bool                             { return false }
func writeBack(*os.File, int64, int64, int64)         {}

// writeDsync is not available here: segment records are written, then
// synced (see fileSegment.WriteAtSync).
func writeDsync(*os.File, []byte, int64) error { return errors.ErrUnsupported }

func dsyncUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
