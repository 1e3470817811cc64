package format

import (
	"math"
	"strings"
	"time"
)

// ParseTimeKey parses a time-ordered index key: prefix, a time (or its
// inverse) as 20 decimal digits, '/', and an ID, as the runtime's terminal
// and submitted indexes write them. It reports false for a key of another
// form, or digits over MaxInt64.
func ParseTimeKey(key []byte, prefix string) (n int64, id string, ok bool) {
	rest, ok := strings.CutPrefix(string(key), prefix)
	if !ok || len(rest) < 22 || rest[20] != '/' {
		return 0, "", false
	}
	for _, c := range rest[:20] {
		d := int64(c - '0')
		if c < '0' || c > '9' || n > (math.MaxInt64-d)/10 {
			return 0, "", false
		}
		n = n*10 + d
	}
	return n, rest[21:], true
}

// UnixNano is t as records keep times, in int64 nanoseconds since 1970: 0
// (none, or now) for the zero time and for a time before 1970, which has
// passed; math.MaxInt64 for a time after 2262-04-11, the last that int64
// nanoseconds hold (t.UnixNano would wrap around into the past).
func UnixNano(t time.Time) int64 {
	switch {
	case t.IsZero() || !t.After(time.Unix(0, 0)):
		return 0
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}
