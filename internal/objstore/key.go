package objstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Key length limits, in bytes. maxKeyLen is the S3 limit (1024) less room
// for a prefix; maxSegmentLen is the usual file-name limit (NAME_MAX).
const (
	maxKeyLen     = 900
	maxSegmentLen = 255
)

// validateKey checks key against the key rules in doc.go. It returns nil or
// an error wrapping ErrInvalidKey.
func validateKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrInvalidKey, why) }
	switch {
	case key == "":
		return bad("empty key")
	case len(key) > maxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxKeyLen))
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	case key[0] == '.':
		return bad("keys starting with '.' are reserved")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return bad("control character or backslash")
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return bad("empty path segment (leading, trailing or double '/')")
		case ".", "..":
			return bad("'.' or '..' path segment")
		}
		if len(seg) > maxSegmentLen {
			return bad(fmt.Sprintf("path segment longer than %d bytes", maxSegmentLen))
		}
	}
	return nil
}
