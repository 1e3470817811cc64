package runtime

import (
	"log/slog"

	"github.com/oklog/ulid/v2"
)

func newJobID() string { return ulid.Make().String() }

func slogWarn(msg string, err error) { slog.Warn(msg, "err", err) }
