package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

var t0ctx = context.Background()

// jobsStore returns the store URL of the job tests: memory by default;
// backends_test.go runs them on MinIO and the GCS emulator too.
var jobsStore = func(t testing.TB) string { return testenv.MemURL(t.Name()) }

func openJobs(t *testing.T, opts ...Option) (*Queue, *fakeClock) {
	clk := newFakeClock()
	q := openT(t, jobsStore(t), append([]Option{withClock(clk), WithRetryBackoff(time.Second, time.Minute), WithLease(30 * time.Second)}, opts...)...)
	return q, clk
}

func mustEnqueue(t *testing.T, q *Queue, queue, payload string, o EnqueueOptions) EnqueueResult {
	t.Helper()
	r, err := q.Enqueue(t0ctx, queue, []byte(payload), o)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return r
}

func mustClaim(t *testing.T, q *Queue, queue string) *Job {
	t.Helper()
	j, err := q.claimOne(t0ctx, queue)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return j
}

func TestEnqueueClaimAck(t *testing.T) {
	q, _ := openJobs(t)
	r := mustEnqueue(t, q, "q", "hello", EnqueueOptions{Headers: map[string]string{"h": "v"}})
	if r.JobID == "" || r.Duplicate {
		t.Fatalf("Enqueue = %+v", r)
	}
	j := mustClaim(t, q, "q")
	if j == nil || j.ID != r.JobID || string(j.Payload) != "hello" || j.Headers["h"] != "v" || j.Attempt != 1 || j.MaxAttempts != 5 {
		t.Fatalf("claimed %+v", j)
	}
	if again := mustClaim(t, q, "q"); again != nil {
		t.Fatalf("claimed a claimed job twice: %+v", again)
	}
	if s, _ := q.Stats(t0ctx, "q"); s.Claimed != 1 || s.Pending != 0 {
		t.Fatalf("stats while claimed: %+v", s)
	}
	if err := q.Ack(t0ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(t0ctx, j); !IsClaimLost(err) {
		t.Fatalf("second Ack = %v, want claim lost", err)
	}
	if _, err := q.GetJob(t0ctx, j.ID); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("acked job still stored: %v", err)
	}
	if s, _ := q.Stats(t0ctx, "q"); s != (Stats{}) {
		t.Fatalf("stats after ack: %+v", s)
	}
}

func TestPriorityThenFIFO(t *testing.T) {
	q, _ := openJobs(t)
	for i, p := range []int32{0, 5, 0, 5, -1} {
		mustEnqueue(t, q, "q", fmt.Sprint(i), EnqueueOptions{Priority: p})
	}
	var got []string
	for {
		j := mustClaim(t, q, "q")
		if j == nil {
			break
		}
		got = append(got, string(j.Payload))
	}
	if strings.Join(got, ",") != "1,3,0,2,4" {
		t.Fatalf("claim order %v, want 1,3,0,2,4", got)
	}
}

func TestDedup(t *testing.T) {
	q, _ := openJobs(t)
	a := mustEnqueue(t, q, "q", "a", EnqueueOptions{DedupKey: "k"})
	before := q.StorageStats()
	b := mustEnqueue(t, q, "q", "b", EnqueueOptions{DedupKey: "k"})
	if !b.Duplicate || b.JobID != a.JobID {
		t.Fatalf("dedup hit = %+v, want duplicate of %s", b, a.JobID)
	}
	if after := q.StorageStats(); after.Mutations != before.Mutations {
		t.Fatalf("dedup hit wrote %d mutations", after.Mutations-before.Mutations)
	}
	other := mustEnqueue(t, q, "other", "c", EnqueueOptions{DedupKey: "k"})
	if other.Duplicate {
		t.Fatal("dedup keys must be per queue")
	}
	// Not even a queue and key that spell the other's with a NUL moved
	// across (the index once joined them with one).
	nul := mustEnqueue(t, q, "emails\x00eu", "d", EnqueueOptions{DedupKey: "user-1"})
	if r := mustEnqueue(t, q, "emails", "e", EnqueueOptions{DedupKey: "eu\x00user-1"}); r.Duplicate || r.JobID == nul.JobID {
		t.Fatalf("another queue's key hit %+v, want a new job", r)
	}
	if s, _ := q.Stats(t0ctx, "emails"); s.Pending != 1 {
		t.Fatalf("emails: %+v, want its job pending", s)
	}
	// Once claimed, the key no longer holds: a new job may be enqueued.
	j := mustClaim(t, q, "q")
	c := mustEnqueue(t, q, "q", "c", EnqueueOptions{DedupKey: "k"})
	if c.Duplicate || c.JobID == a.JobID {
		t.Fatalf("dedup while claimed = %+v, want a new job", c)
	}
	q.Ack(t0ctx, j)
	// Batch: the second enqueue of a key in one transaction hits the first.
	res, err := q.EnqueueBatch(t0ctx, []EnqueueRequest{{Queue: "b", Payload: []byte("1"), Options: EnqueueOptions{DedupKey: "x"}}, {Queue: "b", Payload: []byte("2"), Options: EnqueueOptions{DedupKey: "x"}}})
	if err != nil || res[0].Duplicate || !res[1].Duplicate || res[1].JobID != res[0].JobID {
		t.Fatalf("batch dedup = %+v, %v", res, err)
	}
}

func TestScheduledAndBackoff(t *testing.T) {
	q, clk := openJobs(t, WithMaxAttempts(3))
	mustEnqueue(t, q, "q", "later", EnqueueOptions{Delay: time.Minute})
	if j := mustClaim(t, q, "q"); j != nil {
		t.Fatalf("claimed a scheduled job early")
	}
	if s, _ := q.Stats(t0ctx, "q"); s.Scheduled != 1 || s.Pending != 0 {
		t.Fatalf("stats: %+v", s)
	}
	clk.Advance(time.Minute)
	j := mustClaim(t, q, "q")
	if j == nil {
		t.Fatal("due job not claimable")
	}
	// Nack: retried after backoff (1s base, jittered to [0.5s, 1s]).
	if err := q.Nack(t0ctx, j, errors.New("boom 1"), 0); err != nil {
		t.Fatal(err)
	}
	if mustClaim(t, q, "q") != nil {
		t.Fatal("nacked job claimable before its backoff")
	}
	clk.Advance(time.Second)
	j = mustClaim(t, q, "q")
	if j == nil || j.Attempt != 2 || len(j.History) != 1 || j.History[0].Error != "boom 1" {
		t.Fatalf("retry: %+v", j)
	}
	// An explicit retry-after overrides the backoff.
	q.Nack(t0ctx, j, errors.New("boom 2"), time.Hour)
	clk.Advance(59 * time.Minute)
	if mustClaim(t, q, "q") != nil {
		t.Fatal("retry-after not honoured")
	}
	clk.Advance(time.Minute)
	j = mustClaim(t, q, "q")
	// Third attempt of three: a nack dead-letters.
	if err := q.Nack(t0ctx, j, errors.New("boom 3"), 0); err != nil {
		t.Fatal(err)
	}
	s, _ := q.Stats(t0ctx, "q")
	if s.Dead != 1 || s.Pending+s.Scheduled+s.Claimed != 0 {
		t.Fatalf("stats after last attempt: %+v", s)
	}
	page, err := q.DeadJobs(t0ctx, "q", "", 10)
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].State != JobDead || len(page.Jobs[0].History) != 3 || string(page.Jobs[0].Payload) != "later" {
		t.Fatalf("DeadJobs = %+v, %v", page, err)
	}
	if err := q.RequeueDead(t0ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.RequeueDead(t0ctx, j.ID); !errors.Is(err, ErrNotDead) {
		t.Fatalf("RequeueDead of a pending job = %v", err)
	}
	if j := mustClaim(t, q, "q"); j == nil || j.Attempt != 1 {
		t.Fatalf("requeued job: %+v", j)
	}
}

// Due times outside what a job's int64 nanoseconds since 1970 hold: a
// RunAt before 1970 has passed (due now), and a RunAt, Delay or retry
// after 2262-04-11 is due then, not wrapped around into the past (which
// made such a job claimable at once, and one from 1969 an hour late).
func TestDueTimesOutsideNanoRange(t *testing.T) {
	q, clk := openJobs(t, WithMaxAttempts(3))
	never := time.Unix(0, math.MaxInt64)
	mustEnqueue(t, q, "past", "1969", EnqueueOptions{RunAt: time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC)})
	if j := mustClaim(t, q, "past"); j == nil || string(j.Payload) != "1969" {
		t.Fatalf("a job due in 1969: claimed %+v, want it at once", j)
	}
	far := map[string]EnqueueOptions{
		"runat":    {RunAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		"max":      {RunAt: never},
		"delay":    {Delay: 250 * 365 * 24 * time.Hour},
		"maxdelay": {Delay: math.MaxInt64},
	}
	for name, o := range far {
		id := mustEnqueue(t, q, name, name, o).JobID
		if j, err := q.GetJob(t0ctx, id); err != nil || j.State != JobScheduled || !j.RunAt.Equal(never) {
			t.Errorf("%s: job %+v, %v; want scheduled at %v", name, j, err, never)
		}
		if j := mustClaim(t, q, name); j != nil {
			t.Errorf("%s: claimed now", name)
		}
	}
	mustEnqueue(t, q, "nack", "n", EnqueueOptions{})
	j := mustClaim(t, q, "nack")
	if err := q.Nack(t0ctx, j, errors.New("later"), math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if j, err := q.GetJob(t0ctx, j.ID); err != nil || !j.RunAt.Equal(never) || mustClaim(t, q, "nack") != nil {
		t.Errorf("a retry after the longest delay: %+v, %v; want scheduled at %v", j, err, never)
	}
}

// The backoff doubles up to its cap however large the cap: with
// math.MaxInt64 (no cap, in effect) it used to wrap around past attempt
// 34, and retries came due decades in the past.
func TestBackoffUnderAHugeCap(t *testing.T) {
	cfg := QueueConfig{BackoffBase: time.Second, BackoffMax: math.MaxInt64}
	want := time.Second // the backoff before jitter: [want/2, want]
	for n := uint32(1); n <= 100; n++ {
		if got := backoff(cfg, n); got < want/2 || got > want {
			t.Fatalf("attempt %d: backoff %v, want within [%v, %v]", n, got, want/2, want)
		}
		if want > cfg.BackoffMax/2 {
			want = cfg.BackoffMax
		} else {
			want *= 2
		}
	}
}

func TestLeaseExpiryAndPoisonJobs(t *testing.T) {
	q, clk := openJobs(t, WithMaxAttempts(2))
	mustEnqueue(t, q, "q", "p", EnqueueOptions{})
	j1 := mustClaim(t, q, "q")
	clk.Advance(29 * time.Second)
	if err := q.renew(j1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(29 * time.Second)
	q.reapNow()
	if s, _ := q.Stats(t0ctx, "q"); s.Claimed != 1 {
		t.Fatalf("renewed lease reaped: %+v", s)
	}
	clk.Advance(2 * time.Second)
	q.reapNow()
	if err := q.Ack(t0ctx, j1); !IsClaimLost(err) {
		t.Fatalf("Ack after lease expiry = %v, want claim lost", err)
	}
	if err := q.renew(j1); !IsClaimLost(err) {
		t.Fatalf("Renew after lease expiry = %v", err)
	}
	clk.Advance(time.Second)
	j2 := mustClaim(t, q, "q")
	if j2 == nil || j2.Attempt != 2 {
		t.Fatalf("expired claim not requeued: %+v", j2)
	}
	// The second (last) attempt also expires: dead, not requeued.
	clk.Advance(31 * time.Second)
	q.reapNow()
	if s, _ := q.Stats(t0ctx, "q"); s.Dead != 1 || s.Pending+s.Scheduled != 0 {
		t.Fatalf("poison job after its last lease: %+v", s)
	}
}

func TestCancelJob(t *testing.T) {
	q, _ := openJobs(t)
	a := mustEnqueue(t, q, "q", "a", EnqueueOptions{})
	b := mustEnqueue(t, q, "q", "b", EnqueueOptions{})
	if c, err := q.CancelJob(t0ctx, a.JobID); err != nil || c != CancelRemoved {
		t.Fatalf("cancel pending = %v, %v", c, err)
	}
	j := mustClaim(t, q, "q")
	if j.ID != b.JobID {
		t.Fatalf("claimed %s, want %s", j.ID, b.JobID)
	}
	ctx, stop := q.claimContext(t0ctx, j)
	defer stop()
	if c, err := q.CancelJob(t0ctx, b.JobID); err != nil || c != CancelRequested {
		t.Fatalf("cancel claimed = %v, %v", c, err)
	}
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrJobCancelled) {
		t.Fatalf("claim context cause = %v", context.Cause(ctx))
	}
	if got, _ := q.GetJob(t0ctx, b.JobID); !got.CancelRequested {
		t.Fatal("cancel request not recorded")
	}
	if c, _ := q.CancelJob(t0ctx, "nope"); c != CancelNotFound {
		t.Fatalf("cancel unknown = %v", c)
	}
	// Cancel racing a settle: the settle still works, then cancel finds nothing.
	if err := q.Ack(t0ctx, j); err != nil {
		t.Fatal(err)
	}
	if c, _ := q.CancelJob(t0ctx, b.JobID); c != CancelNotFound {
		t.Fatalf("cancel after ack = %v", c)
	}
}

func TestTxnSettleEnqueueKVAtomic(t *testing.T) {
	q, _ := openJobs(t)
	mustEnqueue(t, q, "q", "step0", EnqueueOptions{})
	j := mustClaim(t, q, "q")
	// A failing condition rolls back the ack and the enqueue.
	bad := new(Txn).Ack(j).Enqueue("q", []byte("step1"), EnqueueOptions{}).CompareAndPut([]byte("rec"), []byte("x"), []byte("y"))
	if _, err := q.Commit(t0ctx, bad); !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("Commit = %v", err)
	}
	if s, _ := q.Stats(t0ctx, "q"); s.Claimed != 1 || s.Pending != 0 {
		t.Fatalf("failed transaction changed jobs: %+v", s)
	}
	good := new(Txn).Ack(j).Enqueue("q", []byte("step1"), EnqueueOptions{DedupKey: "run:1:1"}).Put([]byte("rec"), []byte("1"))
	res, err := q.Commit(t0ctx, good)
	if err != nil || len(res.Enqueued) != 1 {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	next := mustClaim(t, q, "q")
	if next == nil || string(next.Payload) != "step1" || next.ID != res.Enqueued[0].JobID {
		t.Fatalf("next step: %+v", next)
	}
	if v, _ := q.Get(t0ctx, []byte("rec")); string(v) != "1" {
		t.Fatalf("KV write of the transaction: %q", v)
	}
}

func TestRestartRequeuesClaimsAndKeepsSchedule(t *testing.T) {
	restartRequeuesClaims(t, "file://"+t.TempDir())
}

func restartRequeuesClaims(t *testing.T, url string) {
	clk := newFakeClock()
	q, err := Open(t0ctx, url, withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, "q", "claimed", EnqueueOptions{})
	mustEnqueue(t, q, "q", "later", EnqueueOptions{Delay: time.Hour})
	big := bytes.Repeat([]byte("B"), 300<<10)
	q.Enqueue(t0ctx, "q", big, EnqueueOptions{Priority: -1})
	j := mustClaim(t, q, "q")
	if string(j.Payload) != "claimed" {
		t.Fatalf("claimed %q", j.Payload)
	}
	q.Close(t0ctx) // the claim is never settled
	q2 := openT(t, url, withClock(clk))
	s, _ := q2.Stats(t0ctx, "q")
	if s.Pending != 2 || s.Scheduled != 1 || s.Claimed != 0 {
		t.Fatalf("after restart: %+v", s)
	}
	j2 := mustClaim(t, q2, "q")
	if j2.ID != j.ID || j2.Attempt != 2 || len(j2.History) != 1 {
		t.Fatalf("requeued claim: %+v", j2)
	}
	j3 := mustClaim(t, q2, "q")
	if !bytes.Equal(j3.Payload, big) {
		t.Fatalf("large payload after restart: %d bytes", len(j3.Payload))
	}
	clk.Advance(time.Hour)
	if j4 := mustClaim(t, q2, "q"); j4 == nil || string(j4.Payload) != "later" {
		t.Fatalf("scheduled job across restart: %+v", j4)
	}
}

// ClaimWait on an empty queue blocks until an enqueue signals it, not until
// its next poll. In a synctest bubble, synctest.Wait proves ClaimWait has
// found nothing and is blocked before the enqueue, and the bubble's clock
// proves the wake-up did not come from the (hour-long) poll timer.
func TestClaimWaitWakesOnEnqueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openT(t, testenv.MemURL(t.Name()), WithPollInterval(time.Hour))
		wctx, stop := context.WithCancel(t0ctx)
		defer stop()
		got := make(chan *Job, 1)
		go func() {
			jobs, err := q.claimWait(wctx, "q", 1)
			if err != nil {
				if wctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			got <- jobs[0]
		}()
		synctest.Wait() // ClaimWait found no job and is blocked
		select {
		case j := <-got:
			t.Fatalf("ClaimWait returned %+v before anything was enqueued", j)
		default:
		}
		mustEnqueue(t, q, "q", "x", EnqueueOptions{})
		select {
		case j := <-got:
			if string(j.Payload) != "x" {
				t.Fatalf("woke with %q", j.Payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("ClaimWait did not wake on enqueue (poll interval is an hour)")
		}
		ctx, cancel := context.WithCancel(t0ctx)
		cancel()
		if _, err := q.claimWait(ctx, "q", 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("ClaimWait with a done ctx = %v", err)
		}
	})
}

// TestClaimOptions: Claim takes one job by default and up to Max, returns
// none at once without Wait, waits for one with Wait (until ctx ends), and
// refuses a negative Max and an empty queue name.
func TestClaimOptions(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()), WithPollInterval(time.Hour))
	if jobs, err := q.Claim(t0ctx, "q", ClaimOptions{}); err != nil || len(jobs) != 0 {
		t.Fatalf("Claim of an empty queue = %v, %v", jobs, err)
	}
	for i := range 4 {
		mustEnqueue(t, q, "q", fmt.Sprint(i), EnqueueOptions{})
	}
	if jobs, err := q.Claim(t0ctx, "q", ClaimOptions{}); err != nil || len(jobs) != 1 || string(jobs[0].Payload) != "0" {
		t.Fatalf("Claim with no Max = %v, %v; want job 0 alone", jobs, err)
	}
	jobs, err := q.Claim(t0ctx, "q", ClaimOptions{Max: 2})
	if err != nil || len(jobs) != 2 || string(jobs[0].Payload) != "1" || string(jobs[1].Payload) != "2" {
		t.Fatalf("Claim Max 2 = %v, %v; want jobs 1 and 2", jobs, err)
	}
	if jobs, err := q.Claim(t0ctx, "q", ClaimOptions{Max: 5, Wait: true}); err != nil || len(jobs) != 1 || string(jobs[0].Payload) != "3" {
		t.Fatalf("Claim Max 5 with Wait and one job ready = %v, %v; want job 3", jobs, err)
	}
	got := make(chan []*Job)
	go func() {
		jobs, err := q.Claim(t0ctx, "q", ClaimOptions{Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- jobs
	}()
	time.Sleep(10 * time.Millisecond) // let it block
	mustEnqueue(t, q, "q", "late", EnqueueOptions{})
	select {
	case jobs := <-got:
		if len(jobs) != 1 || string(jobs[0].Payload) != "late" {
			t.Fatalf("Claim with Wait woke with %v", jobs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Claim with Wait did not wake on enqueue (poll interval is an hour)")
	}
	ctx, cancel := context.WithTimeout(t0ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := q.Claim(ctx, "q", ClaimOptions{Wait: true}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim with Wait of an empty queue until ctx ends = %v", err)
	}
	if _, err := q.Claim(t0ctx, "q", ClaimOptions{Max: -1}); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("Claim Max -1 = %v, want ErrInvalidOption", err)
	}
	if _, err := q.Claim(t0ctx, "", ClaimOptions{}); !errors.Is(err, ErrEmptyQueueName) {
		t.Fatalf("Claim of queue \"\" = %v, want ErrEmptyQueueName", err)
	}
}

func TestWorkerLoop(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()), WithRetryBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	for i := 0; i < 20; i++ {
		mustEnqueue(t, q, "w", fmt.Sprint(i), EnqueueOptions{})
	}
	mustEnqueue(t, q, "w", "panic", EnqueueOptions{})
	mustEnqueue(t, q, "w", "permanent", EnqueueOptions{})
	ctx, cancel := context.WithCancel(t0ctx)
	seen := make(chan string, 100)
	errc := make(chan error)
	go func() {
		errc <- q.Work(ctx, "w", func(ctx context.Context, j *Job) error {
			seen <- string(j.Payload)
			switch string(j.Payload) {
			case "panic":
				panic("kaboom")
			case "permanent":
				return Permanent(errors.New("bad input"))
			}
			return nil
		}, WorkOptions{Concurrency: 4})
	}()
	testenv.Eventually(t, 10*time.Second, "the worker to finish: 2 dead jobs, none left", func() bool {
		s, _ := q.Stats(t0ctx, "w")
		return s.Dead == 2 && s.Pending+s.Scheduled+s.Claimed == 0
	})
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Work = %v", err)
	}
	page, _ := q.DeadJobs(t0ctx, "w", "", 10)
	reasons := map[string]string{}
	for _, j := range page.Jobs {
		reasons[string(j.Payload)] = j.History[len(j.History)-1].Error
	}
	if !strings.Contains(reasons["panic"], "panic: kaboom") || reasons["permanent"] != "bad input" {
		t.Fatalf("dead reasons: %v", reasons)
	}
	if n := len(seen); n != 20+2+1 { // the panicking job ran twice
		t.Fatalf("handler ran %d times, want 23", n)
	}
}

// brokenErr is an error type whose Error reads its receiver: a nil
// *brokenErr returned as an error panics when read.
type brokenErr struct{ msg string }

func (e *brokenErr) Error() string { return e.msg }

// A handler that calls runtime.Goexit (t.FailNow does) or returns an
// error that panics when read (a typed nil) fails its attempt, and the
// loop goes on with its slots. Before, Goexit lost the slot for good
// (with one slot the loop stopped, and Work did not return after its ctx
// ended), and a broken error crashed the process where its text was read.
func TestWorkHandlerGoexitAndBrokenError(t *testing.T) {
	q := openT(t, testenv.MemURL(t.Name()), WithRetryBackoff(time.Millisecond, time.Millisecond), WithMaxAttempts(2))
	for _, p := range []string{"goexit", "typed-nil", "ok"} {
		mustEnqueue(t, q, "w", p, EnqueueOptions{})
	}
	ctx, cancel := context.WithCancel(t0ctx)
	var mu sync.Mutex
	runs := map[string]int{}
	errc := make(chan error)
	go func() {
		errc <- q.Work(ctx, "w", func(ctx context.Context, j *Job) error {
			mu.Lock()
			runs[string(j.Payload)]++
			n := runs[string(j.Payload)]
			mu.Unlock()
			switch {
			case string(j.Payload) == "goexit" && n == 1:
				runtime.Goexit()
			case string(j.Payload) == "typed-nil":
				var e *brokenErr
				return e
			}
			return nil
		}, WorkOptions{Concurrency: 1})
	}()
	testenv.Eventually(t, 10*time.Second, "goexit done at its second attempt, typed-nil dead, ok done", func() bool {
		s, _ := q.Stats(t0ctx, "w")
		mu.Lock()
		defer mu.Unlock()
		return s.Dead == 1 && s.Pending+s.Scheduled+s.Claimed == 0 && runs["goexit"] == 2 && runs["ok"] == 1
	})
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Work = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Work did not return after its ctx ended")
	}
	page, _ := q.DeadJobs(t0ctx, "w", "", 10)
	if len(page.Jobs) != 1 || string(page.Jobs[0].Payload) != "typed-nil" ||
		!strings.Contains(page.Jobs[0].History[0].Error, "Error method panicked") {
		t.Fatalf("dead jobs: %+v", page.Jobs)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["goexit"] != 2 {
		t.Errorf("the Goexit job ran %d times, want 2", runs["goexit"])
	}
}

func TestDeadJobsPaging(t *testing.T) {
	q, clk := openJobs(t, WithMaxAttempts(1))
	for i := 0; i < 7; i++ {
		mustEnqueue(t, q, "q", fmt.Sprint(i), EnqueueOptions{})
		j := mustClaim(t, q, "q")
		q.Nack(t0ctx, j, errors.New("x"), 0)
		clk.Advance(time.Millisecond)
	}
	var got []string
	cursor := ""
	for {
		page, err := q.DeadJobs(t0ctx, "q", cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			got = append(got, string(j.Payload))
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if strings.Join(got, "") != "0123456" {
		t.Fatalf("dead pages: %v", got)
	}
	if _, err := q.DeadJobs(t0ctx, "q", "garbage", 3); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestReadOnlyReader(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openT(t, url, WithSnapshotThreshold(1<<20, 5))
	w.Put(t0ctx, []byte("k"), []byte("1"))
	mustEnqueue(t, w, "q", "a", EnqueueOptions{})
	before := w.StorageStats()
	r := openT(t, url, WithReadOnly())
	if v, err := r.Get(t0ctx, []byte("k")); err != nil || string(v) != "1" {
		t.Fatalf("reader Get = %q, %v", v, err)
	}
	if s, _ := r.Stats(t0ctx, "q"); s.Pending != 1 {
		t.Fatalf("reader stats: %+v", s)
	}
	if err := r.Put(t0ctx, []byte("k"), []byte("2")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("reader Put = %v, want ErrReadOnly", err)
	}
	// A large value would be uploaded before its transaction: refused too,
	// and nothing is written to the bucket.
	if err := r.Put(t0ctx, []byte("big"), make([]byte, 300<<10)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("reader Put of a large value = %v, want ErrReadOnly", err)
	}
	if s := r.StorageStats(); s.Puts != 0 || s.Deletes != 0 {
		t.Fatalf("reader wrote to the bucket: %+v", s)
	}
	if _, err := r.claimOne(t0ctx, "q"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("reader Claim = %v, want ErrReadOnly", err)
	}
	// The writer is not fenced by the reader and keeps going; enough
	// commits that snapshots collect WAL objects the reader has not seen.
	for i := 0; i < 30; i++ {
		if err := w.Put(t0ctx, []byte(fmt.Sprint("n", i)), []byte("v")); err != nil {
			t.Fatalf("writer after a reader opened: %v", err)
		}
	}
	// Snapshot now: collection then deletes WAL objects the reader has not read.
	if err := w.be.(*local).eng.Snapshot(t0ctx); err != nil {
		t.Fatal(err)
	}
	if w.StorageStats().Snapshots == before.Snapshots {
		t.Fatal("test setup: no snapshot was written")
	}
	if _, err := r.Get(t0ctx, []byte("n29")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("reader saw a write before Refresh: %v", err)
	}
	if err := r.Refresh(t0ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Get(t0ctx, []byte("n29")); err != nil || string(v) != "v" {
		t.Fatalf("after Refresh Get = %q, %v", v, err)
	}
	w.Put(t0ctx, []byte("n30"), []byte("v"))
	if err := r.Refresh(t0ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(t0ctx, []byte("n30")); err != nil {
		t.Fatalf("incremental Refresh: %v", err)
	}
}

// An idle writer on a file:// store makes no object-store requests: its
// directory lock keeps other writers out, so it keeps no heartbeat. With a
// pending job and the lease reaper running every heartbeat, 3 seconds
// (hundreds of reaper and heartbeat intervals, and three of the engine's
// once-a-second recording of the WAL's end) pass without a request. The
// bubble's clock makes that time pass for every ticker involved, at no
// cost: a real-clock window short enough for a test would see no mark
// tick at all, and on a loaded machine maybe no reaper tick either.
func TestIdleFileStoreMakesNoRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hb = 5 * time.Millisecond
		// The reaper runs every lease/4.
		q := openT(t, "file://"+t.TempDir(), WithHeartbeat(hb), WithLease(4*hb))
		mustEnqueue(t, q, "q", "job", EnqueueOptions{})
		requests := func() StorageStats {
			s := q.StorageStats()
			return StorageStats{Puts: s.Puts, Gets: s.Gets, Lists: s.Lists, Deletes: s.Deletes, Heads: s.Heads}
		}
		// Open's blob sweep (a List) and the staging of the next WAL segment
		// (the enqueue took the first) are not idling.
		testenv.Eventually(t, 10*time.Second, "the engine to settle", q.be.(*local).eng.Settled)
		before := requests()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if after := requests(); after != before {
			t.Errorf("idle file store: requests went from %+v to %+v", before, after)
		}
	})
}

func TestTakeoverFencesFirstWriter(t *testing.T) { takeoverFences(t, testenv.MemURL(t.Name())) }

// takeoverFences: a second writer opened WithTakeover fences the first; no
// commit the first acknowledged is lost and its later calls fail.
func takeoverFences(t *testing.T, url string) {
	a, err := Open(t0ctx, url, WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Outside cluster mode the fenced Queue is done for: its Close
		// says why (a cluster writer's would not: it is a member).
		if err := a.Close(t0ctx); !errors.Is(err, ErrFenced) {
			t.Errorf("Close of the fenced writer: %v, want ErrFenced", err)
		}
	}()
	if err := a.Put(t0ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	r := mustEnqueue(t, a, "q", "job", EnqueueOptions{})
	b := openT(t, url, WithTakeover(), WithHeartbeat(50*time.Millisecond))
	if err := a.Put(t0ctx, []byte("late"), []byte("x")); !errors.Is(err, ErrFenced) {
		t.Fatalf("first writer after takeover: %v, want ErrFenced", err)
	}
	if v, err := b.Get(t0ctx, []byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("acknowledged commit after takeover: %q, %v", v, err)
	}
	if _, err := b.Get(t0ctx, []byte("late")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("fenced write visible: %v", err)
	}
	if j := mustClaim(t, b, "q"); j == nil || j.ID != r.JobID {
		t.Fatalf("job after takeover: %+v", j)
	}
}

// A job with a DeadLetterQueue leaves a notice there whenever it dies,
// including when the queue itself dead-letters it (lease expired on the
// last attempt) and at a restart that finds its last claim abandoned.
func TestDeadLetterNotice(t *testing.T) {
	q, clk := openJobs(t, WithMaxAttempts(1))
	r := mustEnqueue(t, q, "q", "p", EnqueueOptions{DeadLetterQueue: "q.dead", Headers: map[string]string{"run": "7"}})
	mustClaim(t, q, "q")
	clk.Advance(31 * time.Second)
	q.reapNow()
	n := mustClaim(t, q, "q.dead")
	if n == nil || string(n.Payload) != r.JobID || n.Headers[HeaderDeadJob] != r.JobID ||
		n.Headers[HeaderDeadReason] != "lease expired" || n.Headers["run"] != "7" {
		t.Fatalf("notice = %+v", n)
	}
	// Dead-lettered by its worker: a notice too; acked normally: none.
	r2 := mustEnqueue(t, q, "q", "p2", EnqueueOptions{DeadLetterQueue: "q.dead"})
	j := mustClaim(t, q, "q")
	q.DeadLetter(t0ctx, j, "bad")
	if n := mustClaim(t, q, "q.dead"); n == nil || string(n.Payload) != r2.JobID || n.Headers[HeaderDeadReason] != "bad" {
		t.Fatalf("notice after DeadLetter = %+v", n)
	}
	mustEnqueue(t, q, "q", "p3", EnqueueOptions{DeadLetterQueue: "q.dead"})
	q.Ack(t0ctx, mustClaim(t, q, "q"))
	if n := mustClaim(t, q, "q.dead"); n != nil {
		t.Fatalf("notice for an acked job: %+v", n)
	}
}

// A store reopened from a snapshot (whose pending jobs enter the indexes in
// bulk) claims in the same order as the store that wrote it: priority, then
// FIFO, scheduled jobs when due, and dedup keys still held.
func TestReopenFromSnapshotKeepsOrder(t *testing.T) {
	clk := newFakeClock()
	url := testenv.MemURL(t.Name())
	q, err := Open(t0ctx, url, withClock(clk), WithSnapshotThreshold(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		prio  int32
		n     int
		hours int // delay
	}
	rng := rand.New(rand.NewPCG(7, 7))
	jobs := map[string][]job{}
	for n := range 600 {
		queue := fmt.Sprint("q", n%3)
		j := job{prio: int32(rng.IntN(3)), n: n}
		if rng.IntN(4) == 0 {
			j.hours = 1 + rng.IntN(2)
		}
		mustEnqueue(t, q, queue, fmt.Sprint(n), EnqueueOptions{
			Priority: j.prio, DedupKey: fmt.Sprint("k", n), Delay: time.Duration(j.hours) * time.Hour})
		jobs[queue] = append(jobs[queue], j)
	}
	if s := q.StorageStats().Snapshots; s == 0 {
		t.Fatal("no snapshot was written")
	}
	q.Close(t0ctx)
	q2 := openT(t, url, withClock(clk))
	if r := mustEnqueue(t, q2, "q0", "dup", EnqueueOptions{DedupKey: "k0"}); !r.Duplicate {
		t.Fatalf("dedup key lost across the reopen: %+v", r)
	}
	for hours := 0; hours <= 2; hours++ {
		if hours > 0 {
			clk.Advance(time.Hour)
		}
		for queue, js := range jobs {
			due := slices.DeleteFunc(slices.Clone(js), func(j job) bool { return j.hours != hours })
			slices.SortStableFunc(due, func(a, b job) int { return int(b.prio) - int(a.prio) })
			for _, w := range due {
				j := mustClaim(t, q2, queue)
				if j == nil || string(j.Payload) != fmt.Sprint(w.n) {
					t.Fatalf("%s after %dh: claimed %+v, want job %d (priority %d)", queue, hours, j, w.n, w.prio)
				}
			}
			if j := mustClaim(t, q2, queue); j != nil {
				t.Fatalf("%s after %dh: claimed %s, which is not due", queue, hours, j.Payload)
			}
		}
	}
}

// A reader on file:// follows the WAL segment being written: each Refresh
// reads the batches committed since, not the segment (1 MiB or more) again.
func TestReadOnlyRefreshReadsWhatIsNew(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openT(t, url)
	w.Put(t0ctx, []byte("k"), []byte("0"))
	r := openT(t, url, WithReadOnly())
	for i := range 30 {
		key := []byte(fmt.Sprint("k", i))
		if err := w.Put(t0ctx, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
		before := r.StorageStats().BytesRead
		if err := r.Refresh(t0ctx); err != nil {
			t.Fatal(err)
		}
		if n := r.StorageStats().BytesRead - before; n > 128<<10 {
			t.Fatalf("Refresh %d read %d bytes for one new batch, want <= 128 KiB", i, n)
		}
		if v, err := r.Get(t0ctx, key); err != nil || string(v) != "v" {
			t.Fatalf("after Refresh %d: Get = %q, %v", i, v, err)
		}
	}
}
