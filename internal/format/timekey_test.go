package format

import (
	"math"
	"testing"
	"time"
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

// UnixNano keeps every time a record can hold, and clamps the others
// instead of wrapping around.
func TestUnixNano(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		t    time.Time
		want int64
	}{
		{time.Time{}, 0},
		{time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), 0},
		{time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Unix(0, 0), 0},
		{time.Unix(0, 1), 1},
		{now, now.UnixNano()},
		{time.Unix(0, math.MaxInt64), math.MaxInt64},
		{time.Unix(0, math.MaxInt64).Add(time.Nanosecond), math.MaxInt64},
		{time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), math.MaxInt64},
	} {
		if got := UnixNano(tc.t); got != tc.want {
			t.Errorf("UnixNano(%v) = %d, want %d", tc.t, got, tc.want)
		}
	}
}
