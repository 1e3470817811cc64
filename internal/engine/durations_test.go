package engine

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// Quantiles read from the buckets are within 10% of the durations they
// stand for, at every scale, and Sub leaves what happened between two
// readings.
func TestDurations(t *testing.T) {
	var h Durations
	if h.Count() != 0 || h.Quantile(0.5) != 0 {
		t.Fatalf("empty: count %d, median %v", h.Count(), h.Quantile(0.5))
	}
	for _, d := range []time.Duration{3 * time.Microsecond, 170 * time.Microsecond, 2 * time.Millisecond, 7 * time.Second} {
		var one Durations
		one.Add(d)
		for _, q := range []float64{0, 0.5, 1} {
			if got := one.Quantile(q); got < d*9/10 || got > d*11/10 {
				t.Errorf("%v alone: quantile %v is %v", d, q, got)
			}
		}
	}
	// 90 writes of 100µs, 9 of 1ms, 1 of 50ms.
	for i := range 100 {
		switch {
		case i < 90:
			h.Add(100 * time.Microsecond)
		case i < 99:
			h.Add(time.Millisecond)
		default:
			h.Add(50 * time.Millisecond)
		}
	}
	near := func(got, want time.Duration) bool { return got >= want*9/10 && got <= want*11/10 }
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{0, 100 * time.Microsecond}, {0.5, 100 * time.Microsecond}, {0.9, 100 * time.Microsecond},
		{0.905, time.Millisecond}, // rank 91: the nearest rank rounds up
		{0.91, time.Millisecond}, {0.99, time.Millisecond},
		{0.995, 50 * time.Millisecond}, {1, 50 * time.Millisecond}, {math.NaN(), 50 * time.Millisecond},
	} {
		if got := h.Quantile(c.q); !near(got, c.want) {
			t.Errorf("quantile %v: %v, want about %v", c.q, got, c.want)
		}
	}
	before := h
	h.Add(time.Hour) // past the last bucket's bound: counted in it
	h.Add(0)
	d := h.Sub(&before)
	if d.Count() != 2 || h.Count() != 102 {
		t.Fatalf("counts: %d since, %d in all", d.Count(), h.Count())
	}
	if got := d.Quantile(1); got < 15*time.Minute {
		t.Errorf("an hour's write reads as %v", got)
	}
	if got := d.Quantile(0.5); got > 1100*time.Nanosecond {
		t.Errorf("a zero duration reads as %v, want about 1µs (the first bucket)", got)
	}
	// Counts that restarted between two readings (a store reopened): a
	// bucket below its earlier count gives none, not a wrapped-around
	// count; one above it, the difference.
	var restarted Durations
	restarted.Add(time.Millisecond) // 9 earlier
	for range 3 {
		restarted.Add(2 * time.Second) // none earlier
	}
	if r := restarted.Sub(&h); r.Count() != 3 || r.Quantile(0) < time.Second {
		t.Errorf("a reading after a restart counts %d since the earlier one, the least %v", r.Count(), r.Quantile(0))
	}
}

// Every WAL batch write is counted, by its duration.
func TestStatsCountWALWrites(t *testing.T) {
	b, _ := memBucket(t)
	e := mustOpen(t, Options{Bucket: b})
	defer e.Close(context.Background())
	before := e.Stats()
	for i := range 5 {
		put(t, e, fmt.Sprint("k", i), "v")
	}
	st := e.Stats()
	w := st.WALWrites.Sub(&before.WALWrites)
	if n := st.Batches - before.Batches; w.Count() != n || n != 5 {
		t.Fatalf("%d writes counted for %d batches (5 puts one after another)", w.Count(), n)
	}
	// One more write alone: the histogram counts the duration WALWriteTime
	// adds, in its bucket.
	before = e.Stats()
	put(t, e, "one", "v")
	st = e.Stats()
	if d := st.WALWriteTime - before.WALWriteTime; d >= 2*time.Microsecond {
		one := st.WALWrites.Sub(&before.WALWrites)
		if got := one.Quantile(0.5); got < d*9/10 || got > d*11/10 {
			t.Errorf("a write of %v reads as %v", d, got)
		}
	}
}
