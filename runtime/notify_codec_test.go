package runtime

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/format/codectest"
)

func randNotification(r *rand.Rand, multi bool) *notification {
	return &notification{RunID: codectest.String(r), Status: uint8(r.UintN(5)), Result: codectest.Bytes(r),
		Error: codectest.String(r), Headers: codectest.Map(r, multi), FinalStep: r.Uint32(), EndedAt: codectest.Int64(r),
		Retries: r.Uint32()}
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
		n := randNotification(r, false)
		f.Add(n.encode())
		v1, _ := format.Marshal(v1Of(n))
		f.Add(v1)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		codectest.AgreeWith(t, b, readNotification, unmarshalNotification)
		decodeNotification(b)
	})
}

func v1Of(n *notification) *notificationV1 {
	return &notificationV1{RunID: n.RunID, Status: n.Status, Result: n.Result, Error: n.Error,
		Headers: n.Headers, FinalStep: n.FinalStep, EndedAt: n.EndedAt}
}

// TestNotificationCodecReadsV1: a notification enqueued before Retries (7
// fields) still decodes, with Retries 0, so that an upgrade does not
// dead-letter the notifications in flight. Fails if the reader insists on
// 8 fields.
func TestNotificationCodecReadsV1(t *testing.T) {
	r := codectest.New(t)
	for range 500 {
		n := randNotification(r, false)
		b, err := format.Marshal(v1Of(n))
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeNotification(b)
		want := *n
		want.Retries = 0
		if err != nil || !reflect.DeepEqual(got, &want) {
			t.Fatalf("decodeNotification(v1) = %+v, %v; want %+v", got, err, want)
		}
		codectest.AgreeWith(t, b, readNotification, unmarshalNotification)
	}
}
