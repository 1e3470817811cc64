package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// TestDispatchStress enqueues from several goroutines, with Dispatch mixed
// with plain enqueues, delays, priorities, dedup keys and failing
// transactions, against 1-3 Work loops of small concurrency that start and
// stop meanwhile. No loop runs more than its Concurrency handlers at once,
// every enqueued job runs exactly once on its first attempt, and the slots
// are idle and withdrawn at the end. $STEPWELL_DISPATCH_STRESS_JOBS sets
// the number of enqueues per goroutine (50 by default); the seed is logged
// and $STEPWELL_DISPATCH_STRESS_SEED replays one.
func TestDispatchStress(t *testing.T) {
	perG := 50
	if v, err := strconv.Atoi(os.Getenv("STEPWELL_DISPATCH_STRESS_JOBS")); err == nil && v > 0 {
		perG = v
	}
	seed := rand.Uint64()
	if v, err := strconv.ParseUint(os.Getenv("STEPWELL_DISPATCH_STRESS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d", seed)
	baseG := goruntime.NumGoroutine()
	q := openT(t, testenv.MemURL(t.Name()))

	var mu sync.Mutex
	runs := map[string]int{}      // job ID -> handler runs
	enqueued := map[string]bool{} // job IDs committed (not dedup hits)
	dispatched := 0

	type loop struct {
		conc          int32
		running, peak atomic.Int32
		stop          func() error
	}
	var loops []*loop
	var lmu sync.Mutex
	newLoop := func(rng *rand.Rand) *loop {
		lp := &loop{conc: int32(1 + rng.IntN(3))}
		ctx, cancel := context.WithCancel(t0ctx)
		errc := make(chan error, 1)
		h := func(ctx context.Context, j *Job) error {
			n := lp.running.Add(1)
			defer lp.running.Add(-1)
			for p := lp.peak.Load(); n > p && !lp.peak.CompareAndSwap(p, n); p = lp.peak.Load() {
			}
			if n > lp.conc {
				t.Errorf("%d handlers at once on a loop of concurrency %d", n, lp.conc)
			}
			if j.Attempt != 1 {
				t.Errorf("job %s on attempt %d", j.ID, j.Attempt)
			}
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			if j.Payload[0]%4 == 0 {
				time.Sleep(time.Duration(j.Payload[0]%3) * time.Millisecond)
			}
			return nil
		}
		go func() {
			errc <- q.Work(ctx, "w", h, WorkOptions{Concurrency: int(lp.conc), PollInterval: 20 * time.Millisecond})
		}()
		var once sync.Once
		var err error
		lp.stop = func() error {
			once.Do(func() { cancel(); err = <-errc })
			return err
		}
		return lp
	}
	ctlRng := rand.New(rand.NewPCG(seed, 0))
	lmu.Lock()
	loops = append(loops, newLoop(ctlRng))
	lmu.Unlock()

	// The controller starts and stops loops, keeping 1-3 of them.
	done := make(chan struct{})
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(1+ctlRng.IntN(5)) * time.Millisecond):
			}
			lmu.Lock()
			if len(loops) < 3 && (len(loops) == 1 || ctlRng.IntN(2) == 0) {
				loops = append(loops, newLoop(ctlRng))
			} else {
				i := ctlRng.IntN(len(loops))
				lp := loops[i]
				loops = append(loops[:i], loops[i+1:]...)
				if err := lp.stop(); err != nil {
					t.Error(err)
				}
			}
			lmu.Unlock()
		}
	}()

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g+1)))
			for i := range perG {
				o := EnqueueOptions{dispatch: rng.IntN(3) != 0, Priority: int32(rng.IntN(3))}
				if rng.IntN(5) == 0 {
					o.Delay = time.Duration(1+rng.IntN(10)) * time.Millisecond
				}
				if rng.IntN(6) == 0 {
					o.DedupKey = fmt.Sprint("k", rng.IntN(4))
				}
				payload := []byte{byte(rng.IntN(256)), byte(g), byte(i)}
				txn := new(Txn).Enqueue("w", payload, o)
				fail := rng.IntN(8) == 0
				if fail {
					txn.CompareAndPut([]byte("never"), []byte("x"), []byte("y"))
				}
				if rng.IntN(4) == 0 { // a second enqueue in the same transaction
					o2 := o
					o2.DedupKey = ""
					txn.Enqueue("w", []byte{byte(rng.IntN(256)), byte(g), byte(i)}, o2)
				}
				res, err := q.Commit(t0ctx, txn)
				if fail != (err != nil) {
					t.Errorf("commit (fail=%v): %v", fail, err)
					return
				}
				if err != nil {
					continue
				}
				mu.Lock()
				for _, r := range res.Enqueued {
					if r.dispatched && (r.Duplicate || o.Delay > 0) {
						t.Errorf("dispatched %+v (delay %v)", r, o.Delay)
					}
					if r.dispatched {
						dispatched++
					}
					if !r.Duplicate {
						enqueued[r.JobID] = true
					}
				}
				mu.Unlock()
				if rng.IntN(4) != 0 { // let the loops go idle now and then
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	<-ctlDone

	// Whatever loops are left finish the work.
	var n int
	var s Stats
	var statsErr error
	defer func() {
		if t.Failed() {
			t.Logf("%d of %d jobs ran; stats %+v, %v", n, len(enqueued), s, statsErr)
		}
	}()
	testenv.Eventually(t, 30*time.Second, "every job to run and the queue to empty", func() bool {
		mu.Lock()
		n = len(runs)
		mu.Unlock()
		s, statsErr = q.Stats(t0ctx, "w")
		return statsErr == nil && n == len(enqueued) && s.Pending+s.Scheduled+s.Claimed == 0
	})
	total := 0
	lmu.Lock()
	for _, lp := range loops {
		total += int(lp.conc)
	}
	lmu.Unlock()
	testenv.Eventually(t, 10*time.Second, "every slot idle", func() bool { return q.idleSlots("w") == total })
	lmu.Lock()
	for _, lp := range loops {
		if err := lp.stop(); err != nil {
			t.Error(err)
		}
	}
	loops = nil
	lmu.Unlock()
	if n := q.idleSlots("w"); n != 0 {
		t.Fatalf("%d idle slots after every loop stopped", n)
	}
	if l := q.be.(*local); len(l.slots) != 0 {
		t.Fatalf("slots of stopped loops still registered: %v", l.slots)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 || !enqueued[id] {
			t.Fatalf("job %s ran %d times (enqueued: %v)", id, n, enqueued[id])
		}
	}
	t.Logf("%d jobs, %d dispatched", len(enqueued), dispatched)
	q.Close(t0ctx)
	testenv.Eventually(t, 10*time.Second, "the slots' goroutines to exit", func() bool { return goruntime.NumGoroutine() <= baseG+2 })
}
