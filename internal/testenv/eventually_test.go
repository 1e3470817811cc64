package testenv

import (
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
)

// fatalRecorder records a Fatalf and ends the goroutine, as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	goruntime.Goexit()
}

// runRecorded calls f with a fatalRecorder on a goroutine of its own and
// returns the failure message, if any.
func runRecorded(t *testing.T, f func(tb testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestEventually(t *testing.T) {
	n := 0
	msg := runRecorded(t, func(tb testing.TB) {
		Eventually(tb, time.Minute, "the third look", func() bool { n++; return n == 3 })
	})
	if msg != "" || n != 3 {
		t.Fatalf("Eventually failed (%q) or looked %d times; want success at the third look", msg, n)
	}

	start := time.Now()
	msg = runRecorded(t, func(tb testing.TB) {
		Eventually(tb, 20*time.Millisecond, "the impossible", func() bool { return false })
	})
	if !strings.Contains(msg, "waiting for the impossible") || !strings.Contains(msg, "timed out after") {
		t.Fatalf("failure message %q; want what was waited for and for how long", msg)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("gave up after %v, before the 20ms timeout", took)
	}
}

func TestScale(t *testing.T) {
	for _, c := range []struct {
		env, ci string
		want    time.Duration
	}{
		{"", "", time.Second},
		{"", "true", 2 * time.Second},
		{"3", "true", 3 * time.Second},
		{"0.5", "", 500 * time.Millisecond},
		{"nonsense", "", time.Second},
		{"-1", "", time.Second},
	} {
		t.Setenv(ScaleEnv, c.env)
		t.Setenv("CI", c.ci)
		if got := time.Duration(float64(time.Second) * readScale()); got != c.want {
			t.Errorf("%s=%q CI=%q: scale of 1s = %v, want %v", ScaleEnv, c.env, c.ci, got, c.want)
		}
	}
}

func TestMemURL(t *testing.T) {
	a, b := MemURL("TestX/sub"), MemURL("TestX/sub")
	if a == b || !strings.HasPrefix(a, "mem://TestX_sub-") || strings.Count(a, "/") != 2 {
		t.Fatalf("MemURL: %q, %q; want two distinct mem:// URLs without a path", a, b)
	}
}
