package runtime

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/oklog/ulid/v2"
)

// newJobID returns the ID of a new job: a ULID of the current time with
// 80 random bits from math/rand/v2's per-thread generator. ulid.Make
// takes a process-wide lock (its monotonic entropy) and allocates the ID
// before its string; this allocates the string alone. Job IDs need to be
// unique, not ordered within a millisecond: the queue orders jobs by its
// own sequence.
func newJobID() string {
	var id ulid.ULID
	_ = id.SetTime(ulid.Now()) // always valid until the year 10889
	binary.BigEndian.PutUint16(id[6:8], uint16(rand.Uint32()))
	binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	return id.String()
}
