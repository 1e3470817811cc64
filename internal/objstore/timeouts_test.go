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
// the documented defaults, and not passed on to gocloud.
func TestTimeoutParams(t *testing.T) {
	q := url.Values{"response_timeout": {"2s"}, "connect_timeout": {"500ms"}, "region": {"x"}}
	got, err := takeTimeouts(q)
	if err != nil {
		t.Fatal(err)
	}
	want := timeouts{connect: 500 * time.Millisecond, response: 2 * time.Second, idle: defaultTimeouts.idle}
	if got != want || len(q) != 1 || q.Get("region") != "x" {
		t.Fatalf("takeTimeouts = %+v, left %v; want %+v and only region", got, q, want)
	}
	if defaultTimeouts.connect != 10*time.Second || defaultTimeouts.response != 30*time.Second || defaultTimeouts.idle != 90*time.Second {
		t.Fatalf("defaults %+v differ from the documented 10s, 30s, 90s", defaultTimeouts)
	}
	for _, u := range []string{"s3://b?idle_timeout=soon", "s3://b?response_timeout=0s", "azblob://c?connect_timeout=1s"} {
		if b, err := Open(context.Background(), u); !errors.Is(err, ErrInvalidURL) {
			if b != nil {
				b.Close()
			}
			t.Errorf("Open(%s) = %v, want ErrInvalidURL", u, err)
		}
	}
	b, err := Open(context.Background(), "s3://b?region=us-east-1&endpoint=http://127.0.0.1:1&use_path_style=true&response_timeout=1s")
	if err != nil {
		t.Fatalf("Open with a timeout parameter: %v", err)
	}
	b.Close()
}
