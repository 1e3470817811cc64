package testenv

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// ScaleEnv names the environment variable that multiplies every timeout
// passed to Scale (and so to Eventually): a positive decimal such as 2 or
// 0.5. Unset, the factor is 2 when CI=true (a loaded machine running the
// race detector) and 1 otherwise.
const ScaleEnv = "STEPWELL_TEST_TIMEOUT_SCALE"

var scale = sync.OnceValue(readScale)

func readScale() float64 {
	if s := os.Getenv(ScaleEnv); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
			return f
		}
		fmt.Fprintf(os.Stderr, "testenv: ignoring %s=%q: not a positive number\n", ScaleEnv, s)
	}
	if os.Getenv("CI") == "true" {
		return 2
	}
	return 1
}

// Scale returns d multiplied by the timeout factor (see ScaleEnv). Use it
// for deadlines that bound how long something that must happen may take,
// never for how long to wait to see that something does not happen.
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * scale())
}

// pollInterval is the pause between two looks at a condition that is cheap
// to evaluate; a slower one waits as long as it took, so that it uses at most
// half a core.
const pollInterval = 2 * time.Millisecond

// Eventually polls cond until it returns true and returns how long that
// took. If cond is still false after Scale(timeout), it fails t (with
// Fatalf, so call it from the test's goroutine) saying what it waited for
// and for how long.
//
// Eventually is for waiting on something that must happen. To check that
// something does not happen, first wait for evidence that the code path
// that would do it has run (a counter, a hook, the fake clock), then assert.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	limit := Scale(timeout)
	start := time.Now()
	for {
		began := time.Now()
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("timed out after %v waiting for %s", time.Since(start).Round(time.Millisecond), what)
		}
		time.Sleep(max(pollInterval, time.Since(began)))
	}
}
