package bench

import (
	goruntime "runtime"
	"runtime/metrics"
	"sync"
	"time"
)

const heapMetric = "/memory/classes/heap/objects:bytes"

// memSampler records the peak heap, sampled every 10ms.
type memSampler struct {
	mu   sync.Mutex
	peak uint64
	done chan struct{}
	wg   sync.WaitGroup
}

func startMemSampler() *memSampler {
	m := &memSampler{done: make(chan struct{})}
	m.sample()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				m.sample()
			case <-m.done:
				return
			}
		}
	}()
	return m
}

func heapNow() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func (m *memSampler) sample() {
	h := heapNow()
	m.mu.Lock()
	m.peak = max(m.peak, h)
	m.mu.Unlock()
}

// peakNow returns the peak so far.
func (m *memSampler) peakNow() uint64 {
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// stop ends sampling and returns the peak.
func (m *memSampler) stop() uint64 {
	close(m.done)
	m.wg.Wait()
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// liveHeap collects garbage and returns the live heap.
func liveHeap() uint64 {
	goruntime.GC()
	goruntime.GC() // a second cycle frees what finalizers of the first released
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
