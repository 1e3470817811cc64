package format

import (
	"math"
	"testing"
)

func TestParseTimeKey(t *testing.T) {
	for _, c := range []struct {
		key  string
		n    int64
		id   string
		want bool
	}{
		{"p/00000000000000000042/run-1", 42, "run-1", true},
		{"p/09223372036854775807/x", math.MaxInt64, "x", true},
		{"p/09223372036854775808/x", 0, "", false}, // over MaxInt64
		{"p/0000000000000000004a/x", 0, "", false},
		{"p/00000000000000000042-x", 0, "", false},
		{"p/00000000000000000042/", 0, "", false}, // no ID
		{"q/00000000000000000042/x", 0, "", false},
		{"p/42/x", 0, "", false},
	} {
		n, id, ok := ParseTimeKey([]byte(c.key), "p/")
		if ok != c.want || n != c.n || id != c.id {
			t.Errorf("ParseTimeKey(%q) = %d, %q, %v; want %d, %q, %v", c.key, n, id, ok, c.n, c.id, c.want)
		}
	}
}
