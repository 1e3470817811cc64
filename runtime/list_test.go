package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// tick is a clock that advances a second per reading.
func tick() func() time.Time {
	var n atomic.Int64
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { return base.Add(time.Duration(n.Add(1)) * time.Second) }
}

func ids(runs []runtime.RunStatus) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.RunID
	}
	return out
}

// TestListRunsPaging: ListRuns lists newest first, a page at a time, with
// a cursor that is stable while runs are added, and filters by state and
// submit time. Fails without the submitted index or with a cursor that
// moves when runs are added.
func TestListRunsPaging(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), nil, runtime.WithClock(tick()))
	ctx := context.Background()
	for i := range 25 {
		mustSubmit(t, rt, runtime.RunSpec{RunID: fmt.Sprintf("r%02d", i)})
	}
	p1, err := rt.ListRuns(ctx, runtime.ListOptions{Limit: 10})
	if err != nil || len(p1.Runs) != 10 || p1.Runs[0].RunID != "r24" || p1.Runs[9].RunID != "r15" || p1.Next == "" {
		t.Fatalf("page 1 = %v, next %q, %v", ids(p1.Runs), p1.Next, err)
	}
	if r := p1.Runs[0]; r.State != runtime.StatePending || r.SubmittedAt.IsZero() || r.UpdatedAt.IsZero() {
		t.Errorf("listed run = %+v", r)
	}
	// Runs added meanwhile do not shift the listing.
	mustSubmit(t, rt, runtime.RunSpec{RunID: "new"})
	p2, err := rt.ListRuns(ctx, runtime.ListOptions{Limit: 10, Cursor: p1.Next})
	if err != nil || len(p2.Runs) != 10 || p2.Runs[0].RunID != "r14" || p2.Next == "" {
		t.Fatalf("page 2 = %v, %v", ids(p2.Runs), err)
	}
	p3, err := rt.ListRuns(ctx, runtime.ListOptions{Limit: 10, Cursor: p2.Next})
	if err != nil || len(p3.Runs) != 5 || p3.Runs[4].RunID != "r00" || p3.Next != "" {
		t.Fatalf("page 3 = %v, next %q, %v", ids(p3.Runs), p3.Next, err)
	}
	all, err := rt.ListRuns(ctx, runtime.ListOptions{})
	if err != nil || len(all.Runs) != 26 || all.Runs[0].RunID != "new" || all.Next != "" {
		t.Fatalf("default page = %v, %v", ids(all.Runs), err)
	}
	// Time bounds (exclusive): r10 .. r05 are submitted at seconds 11 .. 6.
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	win, err := rt.ListRuns(ctx, runtime.ListOptions{SubmittedAfter: base.Add(5 * time.Second), SubmittedBefore: base.Add(12 * time.Second)})
	if err != nil || fmt.Sprint(ids(win.Runs)) != "[r10 r09 r08 r07 r06 r05]" {
		t.Fatalf("time window = %v, %v", ids(win.Runs), err)
	}
	// State filters.
	startRun(t, rt)
	for i := range 25 {
		waitTerminal(t, rt, fmt.Sprintf("r%02d", i))
	}
	waitTerminal(t, rt, "new")
	ok, err := rt.ListRuns(ctx, runtime.ListOptions{States: []runtime.State{runtime.StateSucceeded}, Limit: 30})
	if err != nil || len(ok.Runs) != 26 || ok.Runs[0].EndedAt.IsZero() {
		t.Fatalf("succeeded = %d runs, %v", len(ok.Runs), err)
	}
	none, err := rt.ListRuns(ctx, runtime.ListOptions{States: []runtime.State{runtime.StatePending, runtime.StateFailed}})
	if err != nil || len(none.Runs) != 0 || none.Next != "" {
		t.Fatalf("pending or failed = %v, %v", ids(none.Runs), err)
	}
	// Bad options.
	for _, o := range []runtime.ListOptions{{Limit: -1}, {Cursor: "garbage"}, {Cursor: "c1.!!"}} {
		if _, err := rt.ListRuns(ctx, o); !errors.Is(err, runtime.ErrInvalidOption) {
			t.Errorf("ListRuns(%+v) = %v, want ErrInvalidOption", o, err)
		}
	}
}

// TestListRunsUnindexedStore: runs whose records were written before the
// submitted index (no index entries, no "indexed" mark) are listed all the
// same, and Run's janitor indexes them. Fails if ListRuns relies on the
// index alone.
func TestListRunsUnindexedStore(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	ctx := context.Background()
	for i, id := range []string{"b", "a", "c"} {
		rec := &kvrecord.Run{RunID: id, SubmittedAt: int64(i + 1), State: kvrecord.StateActive, CurrentJob: "none"}
		if err := q.Put(ctx, kvrecord.RunKey(id), runrec.EncodeRun(rec)); err != nil {
			t.Fatal(err)
		}
	}
	client := newRuntime(t, q, nil, nil)
	p, err := client.ListRuns(ctx, runtime.ListOptions{Limit: 2})
	if err != nil || fmt.Sprint(ids(p.Runs)) != "[c a]" || p.Next == "" {
		t.Fatalf("unindexed page 1 = %v, %q, %v", ids(p.Runs), p.Next, err)
	}
	p, err = client.ListRuns(ctx, runtime.ListOptions{Limit: 2, Cursor: p.Next})
	if err != nil || fmt.Sprint(ids(p.Runs)) != "[b]" {
		t.Fatalf("unindexed page 2 = %v, %v", ids(p.Runs), err)
	}
	startRun(t, newRuntime(t, q, succeedRunner(nil), nil))
	testenv.Eventually(t, waitTimeout, "the store to be indexed", func() bool {
		_, err := q.Get(ctx, []byte("workflow/config/submitted_index"))
		return err == nil
	})
	p, err = client.ListRuns(ctx, runtime.ListOptions{})
	if err != nil || fmt.Sprint(ids(p.Runs)) != "[c a b]" {
		t.Fatalf("indexed = %v, %v", ids(p.Runs), err)
	}
}

// TestListRunsSkipsExpired: expiry deletes a run's index entry with its
// record.
func TestListRunsSkipsExpired(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), nil, runtime.WithTerminalRetention(time.Millisecond))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "gone"})
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "the run to expire", func() bool {
		_, err := rt.Status(context.Background(), "gone")
		return errors.Is(err, runtime.ErrRunNotFound)
	})
	testenv.Eventually(t, waitTimeout, "its index entry to go", func() bool {
		page, err := q.Scan(context.Background(), []byte(runrec.SubmittedPrefix), queue.ScanOptions{})
		return err == nil && len(page.Items) == 0
	})
}

// TestStateText: State marshals as its String name, in text and JSON, and
// parses back; other values are errors.
func TestStateText(t *testing.T) {
	for s := runtime.StatePending; s <= runtime.StateCancelled; s++ {
		b, err := json.Marshal(s)
		if err != nil || string(b) != `"`+s.String()+`"` {
			t.Fatalf("json.Marshal(%v) = %s, %v", s, b, err)
		}
		var back runtime.State
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Fatalf("json.Unmarshal(%s) = %v, %v", b, back, err)
		}
	}
	var s runtime.State
	if err := s.UnmarshalText([]byte("done")); err == nil {
		t.Error("UnmarshalText(done): no error")
	}
	if _, err := runtime.State(0).MarshalText(); err == nil {
		t.Error("MarshalText(0): no error")
	}

}

// TestListRunsTimeBoundsToTheNanosecond: SubmittedAfter and
// SubmittedBefore are exclusive bounds at the nanosecond, as documented: a
// run submitted 1ns after SubmittedAfter is listed, one submitted at it is
// not. Before the fix, the index scan stopped at the first key of the
// nanosecond after the bound, which left that nanosecond's runs out.
func TestListRunsTimeBoundsToTheNanosecond(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var at atomic.Int64 // the next Submit's time, in ns after base
	clock := func() time.Time { return base.Add(time.Duration(at.Load())) }
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil, runtime.WithClock(clock))
	ctx := context.Background()
	for i, id := range []string{"a0", "b1", "c2", "d3"} { // submitted at base + i ns
		at.Store(int64(i))
		mustSubmit(t, rt, runtime.RunSpec{RunID: id})
	}
	for _, tc := range []struct {
		after, before int64 // ns after base; -1: unbounded
		want          string
	}{
		{0, -1, "[d3 c2 b1]"},
		{1, -1, "[d3 c2]"},
		{2, -1, "[d3]"},
		{3, -1, "[]"},
		{-1, 3, "[c2 b1 a0]"},
		{-1, 1, "[a0]"},
		{0, 3, "[c2 b1]"},
		{1, 2, "[]"},
	} {
		var opts runtime.ListOptions
		if tc.after >= 0 {
			opts.SubmittedAfter = base.Add(time.Duration(tc.after))
		}
		if tc.before >= 0 {
			opts.SubmittedBefore = base.Add(time.Duration(tc.before))
		}
		page, err := rt.ListRuns(ctx, opts)
		if got := fmt.Sprint(ids(page.Runs)); err != nil || got != tc.want {
			t.Errorf("after %dns, before %dns: %s, %v; want %s", tc.after, tc.before, got, err, tc.want)
		}
	}
}

// TestListRunsBoundsOutsideNanoRange: bounds before 1970 or after
// 2262-04-11, which int64 nanoseconds do not hold, keep their meaning
// (before, they wrapped around: SubmittedAfter 1969 listed nothing).
func TestListRunsBoundsOutsideNanoRange(t *testing.T) {
	t.Parallel()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil)
	ctx := context.Background()
	mustSubmit(t, rt, runtime.RunSpec{RunID: "r1"})
	mustSubmit(t, rt, runtime.RunSpec{RunID: "r2"})
	past, future := time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		opts runtime.ListOptions
		want string
	}{
		{runtime.ListOptions{SubmittedAfter: past}, "[r2 r1]"},
		{runtime.ListOptions{SubmittedBefore: future}, "[r2 r1]"},
		{runtime.ListOptions{SubmittedAfter: past, SubmittedBefore: future}, "[r2 r1]"},
		{runtime.ListOptions{SubmittedAfter: future}, "[]"},
		{runtime.ListOptions{SubmittedBefore: past}, "[]"},
	} {
		page, err := rt.ListRuns(ctx, tc.opts)
		if got := fmt.Sprint(ids(page.Runs)); err != nil || got != tc.want {
			t.Errorf("ListRuns(after %v, before %v) = %s, %v; want %s", tc.opts.SubmittedAfter, tc.opts.SubmittedBefore, got, err, tc.want)
		}
	}
}

// TestExpiryKeepsAnUnreadableRun: a finished run whose record cannot be
// read keeps its terminal record (so a later pass expires both, instead of
// leaving a run record nothing expires), and does not hold up the expiry
// of the runs that ended after it.
func TestExpiryKeepsAnUnreadableRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, succeedRunner(nil), nil, runtime.WithTerminalRetention(time.Hour))
	mustSubmit(t, rt, runtime.RunSpec{RunID: "broken"})
	r := startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "run broken to end", func() bool {
		st, err := rt.Status(ctx, "broken")
		return err == nil && st.State.Terminal()
	})
	r.stop()
	if err := q.Put(ctx, []byte(kvrecord.RunKey("broken")), []byte("not a run record")); err != nil {
		t.Fatal(err)
	}
	rt2 := newRuntime(t, q, succeedRunner(nil), nil, runtime.WithTerminalRetention(time.Millisecond))
	mustSubmit(t, rt2, runtime.RunSpec{RunID: "later"})
	startRun(t, rt2)
	testenv.Eventually(t, waitTimeout, "run later, which ended after broken, to expire", func() bool {
		_, err := rt2.Status(ctx, "later")
		return errors.Is(err, runtime.ErrRunNotFound)
	})
	page, err := q.Scan(ctx, []byte(kvrecord.TerminalPrefix), queue.ScanOptions{})
	if err != nil || len(page.Items) != 1 || !strings.Contains(string(page.Items[0].Key), "broken") {
		t.Fatalf("terminal records left: %v, %v; want broken's alone", page.Items, err)
	}
}
