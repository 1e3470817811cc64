package runtime_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/runtime"
)

// BenchmarkWait10k: 10,000 Waits of 10,000 runs at once, on a memory
// store (in member mode, STEPWELL_RUNTIME_STORE=member: from a cluster
// member of a writer process, on file://), from a client Runtime. Each iteration submits the runs (start in
// an hour: nothing runs them), starts the waiters and waits until every
// one is registered, then cancels the runs (16 goroutines) and waits for
// every Wait to return. The same cancels of another 10,000 runs nobody
// waits for are the baseline. Reported: heap-B/waiter and stack-B/waiter
// (what the registered waiters hold: the stack is the Wait caller's own
// goroutine), wake-ms (first cancel to last Wait returned) and base-ms
// (the baseline's cancels), cpu-us/waiter (process CPU time of the waking
// phase minus the baseline's, per waiter).
func BenchmarkWait10k(b *testing.B) {
	const waiters = 10_000
	ctx := context.Background()
	q, err := openStore(b, memURL()) // in member mode, a member of a writer process
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close(ctx)
	calls0 := q.StorageStats().ClusterCalls
	rt, err := runtime.New(q, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	var armed atomic.Int64
	runtime.SetWaitHook(func(_ string, a bool) {
		if a {
			armed.Add(1)
		}
	})
	defer runtime.SetWaitHook(nil)
	submit := func(prefix string) []string {
		ids := make([]string, waiters)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%d", prefix, i)
			if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: ids[i], StartAt: time.Now().Add(time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
		return ids
	}
	cancelAll := func(ids []string) {
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < len(ids); i += 16 {
					if _, err := rt.Cancel(ctx, ids[i]); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	var heap, stack, wake, base, cpu float64
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer()
		ids, baseIDs := submit(fmt.Sprintf("w%d", n)), submit(fmt.Sprintf("b%d", n))
		var m0, m1 goruntime.MemStats
		heapNow(&m0)
		armed.Store(0)
		var done sync.WaitGroup
		for _, id := range ids {
			done.Go(func() {
				st, err := rt.Wait(ctx, id)
				if err != nil || st.State != runtime.StateCancelled {
					b.Errorf("Wait(%s) = %v, %v", id, st.State, err)
				}
			})
		}
		for armed.Load() < waiters {
			time.Sleep(time.Millisecond)
		}
		heapNow(&m1)
		heap += float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / waiters
		stack += float64(int64(m1.StackInuse)-int64(m0.StackInuse)) / waiters
		b.StartTimer()
		c0, t0 := cpuTime(), time.Now()
		cancelAll(ids)
		done.Wait()
		c1, t1 := cpuTime(), time.Now()
		cancelAll(baseIDs)
		c2, t2 := cpuTime(), time.Now()
		wake += float64(t1.Sub(t0).Milliseconds())
		base += float64(t2.Sub(t1).Milliseconds())
		cpu += float64((c1-c0)-(c2-c1)) / float64(time.Microsecond) / waiters
	}
	nf := float64(b.N)
	if memberMode() {
		b.ReportMetric(float64(q.StorageStats().ClusterCalls-calls0)/nf, "calls/op")
	}
	b.ReportMetric(heap/nf, "heap-B/waiter")
	b.ReportMetric(stack/nf, "stack-B/waiter")
	b.ReportMetric(wake/nf, "wake-ms")
	b.ReportMetric(base/nf, "base-ms")
	b.ReportMetric(cpu/nf, "cpu-us/waiter")
}

// heapNow reads m once the heap is steady: after a GC, until two in a row
// agree within 64 KiB (a store's background work frees memory too).
func heapNow(m *goruntime.MemStats) {
	var prev uint64
	for i := 0; i < 20; i++ {
		goruntime.GC()
		goruntime.ReadMemStats(m)
		if d := int64(m.HeapAlloc) - int64(prev); i > 0 && d < 64<<10 && d > -64<<10 {
			return
		}
		prev = m.HeapAlloc
		time.Sleep(20 * time.Millisecond)
	}
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
