package objstore

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"
)

// TestTimeoutParams: the timeout parameters are accepted on s3 and gs URLs
// (not azblob, whose SDK keeps its own), parsed as positive durations with
// the documented defaults, and not passed on to the driver. (Opening with
// them works: see s3drv's tests.)
func TestTimeoutParams(t *testing.T) {
	q := url.Values{"response_timeout": {"2s"}, "connect_timeout": {"500ms"}, "region": {"x"}}
	got, err := takeTimeouts(q)
	if err != nil {
		t.Fatal(err)
	}
	want := Timeouts{Connect: 500 * time.Millisecond, Response: 2 * time.Second, Idle: defaultTimeouts.Idle}
	if got != want || len(q) != 1 || q.Get("region") != "x" {
		t.Fatalf("takeTimeouts = %+v, left %v; want %+v and only region", got, q, want)
	}
	if defaultTimeouts.Connect != 10*time.Second || defaultTimeouts.Response != 30*time.Second || defaultTimeouts.Idle != 90*time.Second {
		t.Fatalf("defaults %+v differ from the documented 10s, 30s, 90s", defaultTimeouts)
	}
	for _, u := range []string{"s3://b?idle_timeout=soon", "s3://b?response_timeout=0s", "gs://b?connect_timeout=-1s", "azblob://c?connect_timeout=1s"} {
		if b, err := Open(context.Background(), u); !errors.Is(err, ErrInvalidURL) {
			if b != nil {
				b.Close()
			}
			t.Errorf("Open(%s) = %v, want ErrInvalidURL", u, err)
		}
	}
}
