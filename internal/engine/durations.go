package engine

import (
	"math"
	"time"
)

// Durations counts durations (the WAL writes', see Stats.WALWrites) in
// buckets a quarter of a power of two wide, each about 19% wider than the
// one before: bucket i holds durations from 2^(i/4) µs up to the next
// bound. A quantile read from them is the geometric middle of its bucket:
// within 10% of the durations it stands for from 1 µs to about 18
// minutes. Shorter ones read as about 1.1 µs (the first bucket holds
// them), and from about 15 minutes on as about 16 (the last).
type Durations [durationBuckets]uint64

const (
	durationsPerOctave = 4
	durationBuckets    = 30 * durationsPerOctave
)

// durationBucket returns the bucket of d.
func durationBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(math.Log2(us)*durationsPerOctave), durationBuckets-1)
}

// Add counts d.
func (h *Durations) Add(d time.Duration) { h[durationBucket(d)]++ }

// Count returns how many durations h counts.
func (h *Durations) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Sub returns the durations counted in h and not in earlier, an earlier
// reading of the same counts. A bucket that counts fewer in h than in
// earlier (counts that restarted in between) counts none.
func (h *Durations) Sub(earlier *Durations) Durations {
	var d Durations
	for i := range h {
		if h[i] > earlier[i] { // else counts restarted since: none
			d[i] = h[i] - earlier[i]
		}
	}
	return d
}

// Quantile returns the duration that a fraction q (0 to 1; below is 0,
// above or NaN is 1) of the counted durations do not exceed, as the
// geometric middle of its bucket; 0 if h counts none.
func (h *Durations) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	if !(q <= 1) {
		q = 1
	}
	rank := min(max(uint64(math.Ceil(max(q, 0)*float64(n))), 1), n) // nearest rank, 1..n
	var seen uint64
	for i, c := range h {
		seen += c
		if seen >= rank {
			mid := math.Exp2((float64(i) + 0.5) / durationsPerOctave)
			return time.Duration(mid * float64(time.Microsecond))
		}
	}
	return 0 // not reached: seen ends at n >= rank
}
