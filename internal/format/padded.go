package format

import (
	"fmt"
	"strconv"
)

// AppendPadded appends v to b as fmt's %020d does (at least 20
// characters, zero-padded after the sign), without fmt's allocations for
// the usual non-negative v: keys that sort by a number.
func AppendPadded(b []byte, v int64) []byte {
	if v < 0 {
		return fmt.Appendf(b, "%020d", v)
	}
	var d [20]byte
	digits := strconv.AppendInt(d[:0], v, 10)
	for range 20 - len(digits) {
		b = append(b, '0')
	}
	return append(b, digits...)
}
