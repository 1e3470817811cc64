package queue

import (
	"context"
	"sync"
)

// batcher gathers a member's concurrent requests of one kind (reads, lease
// renewals) into calls to the writer: one call in flight, and the requests
// that arrive meanwhile share the next one, up to max a call.
type batcher[Req, Res any] struct {
	max int
	// call makes one call for reqs: a result per request, or an error for
	// them all. It runs on a goroutine of its own.
	call func(reqs []Req) ([]Res, error)

	mu      sync.Mutex
	waiting []*batchItem[Req, Res] // guarded by mu
	busy    bool                   // a call is in flight, guarded by mu
}

type batchItem[Req, Res any] struct {
	req  Req
	done chan struct{}
	res  Res
	err  error
}

// do adds req to the next call and waits for its result, or for ctx (the
// call is made anyway, and its result for req dropped).
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	it := &batchItem[Req, Res]{req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, it)
	b.kickLocked()
	b.mu.Unlock()
	select {
	case <-it.done:
		return it.res, it.err
	case <-ctx.Done():
		var zero Res
		return zero, ctx.Err()
	}
}

// kickLocked starts a call if none is in flight and requests wait.
//
// REQUIRES: b.mu held.
func (b *batcher[Req, Res]) kickLocked() {
	if b.busy || len(b.waiting) == 0 {
		return
	}
	n := min(len(b.waiting), b.max)
	batch := b.waiting[:n:n]
	b.waiting = b.waiting[n:]
	b.busy = true
	go b.flush(batch)
}

func (b *batcher[Req, Res]) flush(batch []*batchItem[Req, Res]) {
	reqs := make([]Req, len(batch))
	for i, it := range batch {
		reqs[i] = it.req
	}
	res, err := b.call(reqs)
	for i, it := range batch {
		if err != nil {
			it.err = err
		} else {
			it.res = res[i]
		}
		close(it.done)
	}
	b.mu.Lock()
	b.busy = false
	b.kickLocked()
	b.mu.Unlock()
}
