package runtime

import (
	"github.com/oklog/ulid/v2"
)

func newJobID() string { return ulid.Make().String() }
