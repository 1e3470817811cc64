package objstore

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for _, key := range []string{
		"a", "wal/00000000000000000001", "snap/x", "payload/01HZY/part", "a.b", "a/.hidden",
		"a..b", "ü/ñ", "with space", "a-b_c~d", strings.Repeat("k", maxSegmentLen),
		strings.Repeat("d/", 449) + "k",
	} {
		if err := validateKey(key); err != nil {
			t.Errorf("validateKey(%q) = %v; want nil", key, err)
		}
	}
	for _, key := range []string{
		"", "/a", "a/", "a//b", ".", "..", "./a", "a/./b", "a/..", "../a", ".tmp/x", ".lock",
		"a\x00b", "a\nb", "a\x7fb", `a\b`, "a\xff", strings.Repeat("k", maxSegmentLen+1),
		strings.Repeat("d/", 450) + "k",
	} {
		if err := validateKey(key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("validateKey(%q) = %v; want ErrInvalidKey", key, err)
		}
	}
}
