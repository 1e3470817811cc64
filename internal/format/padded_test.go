package format

import (
	"fmt"
	"math"
	"testing"
)

func TestAppendPaddedIsFmt(t *testing.T) {
	for _, v := range []int64{0, 1, 9, 10, 1234567890, math.MaxInt64, -1, -42, math.MinInt64, 1 << 62} {
		if got, want := string(AppendPadded([]byte("p/"), v)), "p/"+fmt.Sprintf("%020d", v); got != want {
			t.Errorf("AppendPadded(%d) = %q, want %q", v, got, want)
		}
	}
}
