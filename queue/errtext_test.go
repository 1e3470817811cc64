package queue

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestHugeErrorTextsAreBounded: the error of a Nack and the reason of a
// DeadLetter go into the job's history bounded to 64 KiB, and the reason
// into a dead-letter notice's header bounded to 1 KiB, each cut at a
// character boundary and ending with the original size: a 32 MiB error
// is not kept whole in every history entry, nor cut mid-character in the
// header.
func TestHugeErrorTextsAreBounded(t *testing.T) {
	const size = 32 << 20
	// A cut at an even byte offset splits an "é".
	huge := "x" + strings.Repeat("é", (size-2)/2) + "y"
	note := "... (truncated, 33554432 bytes)"
	check := func(what, text string, limit int) {
		t.Helper()
		if len(text) > limit || len(text) < limit-64 || !strings.HasPrefix(text, "xéé") ||
			!strings.HasSuffix(text, note) || !utf8.ValidString(text) {
			t.Errorf("%s: %d bytes (valid UTF-8 %v), ending %.40q; want at most %d, ending %q",
				what, len(text), utf8.ValidString(text), text[max(0, len(text)-40):], limit, note)
		}
	}
	q, clk := openJobs(t, WithMaxAttempts(2))
	r := mustEnqueue(t, q, "q", "p", EnqueueOptions{DeadLetterQueue: "q.dead"})
	if err := q.Nack(t0ctx, mustClaim(t, q, "q"), errors.New(huge), 0); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if err := q.DeadLetter(t0ctx, mustClaim(t, q, "q"), huge); err != nil {
		t.Fatal(err)
	}
	j, err := q.GetJob(t0ctx, r.JobID)
	if err != nil || j.State != JobDead || len(j.History) != 2 {
		t.Fatalf("GetJob = %+v, %v; want dead with 2 attempts", j, err)
	}
	for _, a := range j.History {
		check("history", a.Error, 64<<10)
	}
	n := mustClaim(t, q, "q.dead")
	if n == nil {
		t.Fatal("no dead-letter notice")
	}
	check("notice reason header", n.Headers[HeaderDeadReason], 1<<10)
}
