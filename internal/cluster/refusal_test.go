package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// recordsTo is a slog.Handler that sends each record's "refused" count.
type recordsTo chan int64

func (h recordsTo) Enabled(context.Context, slog.Level) bool { return true }
func (h recordsTo) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordsTo) WithGroup(string) slog.Handler            { return h }
func (h recordsTo) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "refused" {
			h <- a.Value.Int64()
		}
		return true
	})
	return nil
}

// TestRefusalBurstIsLogged: the refusals of a burst that follow its first
// line are logged by themselves about a second later, though no refusal
// comes after them (they do not wait for the next refusal, which may
// never come); Stop logs what is still pending.
func TestRefusalBurstIsLogged(t *testing.T) {
	lines := make(recordsTo, 16)
	r := &refusalLog{log: slog.New(lines)}
	next := func() int64 {
		t.Helper()
		select {
		case n := <-lines:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no line logged")
			return 0
		}
	}
	start := time.Now()
	for range 5 {
		r.note("/m", "wrong secret")
	}
	if n := next(); n != 1 {
		t.Fatalf("first line counts %d refusals, want 1", n)
	}
	if n := next(); n != 4 {
		t.Fatalf("the rest of the burst: a line of %d refusals, want 4", n)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("the rest of the burst was logged after %v: more than one line a second", d)
	}
	// Stop logs what is pending at once.
	r.note("/m", "wrong secret")
	if n := next(); n != 1 {
		t.Fatalf("a refusal a second later: a line of %d, want 1", n)
	}
	r.note("/m", "wrong secret")
	r.note("/m", "wrong secret")
	r.stop()
	select {
	case n := <-lines:
		if n != 2 {
			t.Fatalf("Stop logged a line of %d refusals, want 2", n)
		}
	default:
		t.Fatal("Stop did not log the pending refusals")
	}
}
