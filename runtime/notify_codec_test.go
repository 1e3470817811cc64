package runtime

import (
	"math/rand/v2"
	"testing"

	"github.com/stepwell/stepwell/internal/format/codectest"
)

func randNotification(r *rand.Rand, multi bool) *notification {
	return &notification{RunID: codectest.String(r), Status: uint8(r.UintN(5)), Result: codectest.Bytes(r),
		Error: codectest.String(r), Headers: codectest.Map(r, multi), FinalStep: r.Uint32(), EndedAt: codectest.Int64(r)}
}

// TestNotificationCodec holds the notification codec to the bytes of
// format.Marshal and to the reflective decoder.
func TestNotificationCodec(t *testing.T) {
	r := codectest.New(t)
	for i := range 2000 {
		multi := i%2 == 1
		n := randNotification(r, multi)
		codectest.Check(t, n.encode(), n, !multi, readNotification)
	}
}

// FuzzDecodeNotification: a notification payload is read from the bucket;
// the fast reader agrees with the reflective decoder and never panics.
func FuzzDecodeNotification(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 3 {
		f.Add(randNotification(r, false).encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		codectest.Agree(t, b, readNotification)
		decodeNotification(b)
	})
}
