package queue

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Key watches: a caller learns that a key of the key-value space changed
// without polling it (the runtime's Wait is built on them; see
// internal/queuex, WatchKey).
//
// A watch is a futex: the caller reads the key, then watches it with what
// it read (its sum). The watch fires at the first commit that writes the
// key after it was registered, or at once if the key's value already
// differs from what the caller read: a change between the read and the
// registration is never lost. A watch may also fire without a change (a
// change of writer, another watcher of the key that read a newer value):
// the caller reads again and watches again.
//
// One watchSet serves a store in this process, whatever its role, and
// outlives a change of role (cluster mode):
//
//   - The writer (local) fires the watches of the keys a transaction wrote
//     once it is durable (committed). When nobody watches, that costs a
//     commit one atomic load.
//   - A member (remote) rides one long-poll to the writer for all its
//     watched keys (rpcWatch, watchLoop): the writer registers them with
//     their sums in its own watchSet and answers with the keys that
//     changed (or none, after watchPoll); the member fires those and
//     polls again. A key added while a poll is out cuts it short, so
//     that the next poll carries it.
//   - A change of writer fires every watch (switchTo): the waiters read
//     again, from the next writer, and watch again.

// watchSum identifies a value of a key (or its absence) across processes.
type watchSum [16]byte

// sumOf is the sum of value v (found: the key exists).
func sumOf(v []byte, found bool) watchSum {
	h := sha256.New()
	if found {
		h.Write([]byte{1})
		h.Write(v)
	} else {
		h.Write([]byte{0})
	}
	var s watchSum
	copy(s[:], h.Sum(nil))
	return s
}

// keyWatch is one watch of one key.
type keyWatch struct {
	key   string
	sum   watchSum
	ch    chan struct{} // capacity 1; may be shared by several watches of one waiter
	fired bool          // guarded by watchSet.mu; a fired watch is out of the set
}

// watchEntry holds the watches of one key.
type watchEntry struct {
	sum watchSum // of the latest watch registered
	ws  []*keyWatch
}

// watchSet is the watched keys of a store in this process.
type watchSet struct {
	n     atomic.Int64 // len(keys): commits look no further when 0
	mu    sync.Mutex
	keys  map[string]*watchEntry
	added chan struct{} // capacity 1: a key was added or its sum changed (for watchLoop)
}

func newWatchSet() *watchSet {
	return &watchSet{keys: map[string]*watchEntry{}, added: make(chan struct{}, 1)}
}

func (s *watchSet) signalAdded() {
	select {
	case s.added <- struct{}{}:
	default:
	}
}

// add registers w. A watch of the key that read another value than w did
// fires: one of them read a stale value and must read again.
func (s *watchSet) add(w *keyWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[w.key]
	switch {
	case e == nil:
		e = &watchEntry{sum: w.sum}
		s.keys[w.key] = e
		s.n.Add(1)
		s.signalAdded()
	case e.sum != w.sum:
		for _, o := range e.ws {
			o.fire()
		}
		e.ws, e.sum = e.ws[:0], w.sum
		s.signalAdded()
	}
	e.ws = append(e.ws, w)
}

// fire (REQUIRES: watchSet.mu held) marks w fired and wakes its waiter.
func (w *keyWatch) fire() {
	if w.fired {
		return
	}
	w.fired = true
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// fireKey fires the watches of key.
func (s *watchSet) fireKey(key []byte) {
	s.mu.Lock()
	if e := s.keys[string(key)]; e != nil {
		for _, w := range e.ws {
			w.fire()
		}
		delete(s.keys, string(key))
		s.n.Add(-1)
	}
	s.mu.Unlock()
}

// fireOps fires the watches of the keys that ops write; a commit calls it
// once they are durable.
func (s *watchSet) fireOps(ops []txnOp) {
	if s == nil || s.n.Load() == 0 {
		return
	}
	for i := range ops {
		switch ops[i].Kind {
		case opPut, opDelete, opCompareAndPut, opCompareAndDelete:
			s.fireKey(ops[i].Key)
		}
	}
}

// fireAll fires every watch (a change of writer).
func (s *watchSet) fireAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.keys {
		for _, w := range e.ws {
			w.fire()
		}
		delete(s.keys, k)
	}
	s.n.Store(0)
}

// fireOne fires w alone, and removes it.
func (s *watchSet) fireOne(w *keyWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(w)
	w.fire()
}

// remove withdraws w (fired or not).
func (s *watchSet) remove(w *keyWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(w)
}

func (s *watchSet) removeLocked(w *keyWatch) {
	if w.fired {
		return // out of the set already
	}
	e := s.keys[w.key]
	if e == nil {
		return
	}
	for i, o := range e.ws {
		if o == w {
			last := len(e.ws) - 1
			e.ws[i], e.ws[last] = e.ws[last], nil
			e.ws = e.ws[:last]
			break
		}
	}
	if len(e.ws) == 0 {
		delete(s.keys, w.key)
		s.n.Add(-1)
	}
}

// snapshot lists the watched keys with their sums (for watchLoop), after
// clearing the added signal: an add after it signals again.
func (s *watchSet) snapshot() ([]string, []byte) {
	select {
	case <-s.added:
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, sums := make([]string, 0, len(s.keys)), make([]byte, 0, len(s.keys)*len(watchSum{}))
	for k, e := range s.keys {
		keys = append(keys, k)
		sums = append(sums, e.sum[:]...)
	}
	return keys, sums
}

// watchKey watches key, whose value the caller read as v (found: it
// exists), until cancel: ch gets a value once the key changed (see
// above), and stays quiet after cancel. ErrReadOnly on a Queue opened
// WithReadOnly, which learns of no commit as it happens.
func (q *Queue) watchKey(ctx context.Context, key []byte, v []byte, found bool) (ch <-chan struct{}, cancel func(), err error) {
	if err := q.checkOpen(); err != nil {
		return nil, nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	w := &keyWatch{key: string(key), sum: sumOf(v, found), ch: make(chan struct{}, 1)}
	if err := q.be.watchKey(ctx, w); err != nil {
		return nil, nil, mapErr(err)
	}
	ws := q.be.keyWatches()
	// Close fires the handle's watches, so that their waiters read again
	// and get ErrClosed: one registered as Close runs is fired here.
	q.wmu.Lock()
	if q.watching == nil {
		q.watching = map[*keyWatch]struct{}{}
	}
	q.watching[w] = struct{}{}
	closed := q.closed.Load()
	q.wmu.Unlock()
	if closed {
		ws.fireOne(w)
	}
	return w.ch, func() {
		q.wmu.Lock()
		delete(q.watching, w)
		q.wmu.Unlock()
		ws.remove(w)
	}, nil
}

// fireWatching fires the key watches made through q (Close): their
// waiters read again, which a closed handle refuses.
func (q *Queue) fireWatching() {
	ws := q.be.keyWatches()
	q.wmu.Lock()
	defer q.wmu.Unlock()
	for w := range q.watching {
		ws.fireOne(w)
	}
	q.watching = nil
}

// watchKey registers w on a writer: it fires at the next commit that
// writes its key, or at once if the key's value differs from w's sum.
func (l *local) watchKey(ctx context.Context, w *keyWatch) error {
	if l.opts.readOnly {
		return ErrReadOnly
	}
	l.watches.add(w)
	return l.checkWatch(ctx, w)
}

// checkWatch fires w (registered) if its key's value differs from its sum.
func (l *local) checkWatch(ctx context.Context, w *keyWatch) error {
	v, err := l.get(ctx, kvSpace+w.key)
	if err != nil && !errors.Is(err, ErrKeyNotFound) {
		l.watches.remove(w)
		return err
	}
	if sumOf(v, err == nil) != w.sum {
		l.watches.fireOne(w)
	}
	return nil
}

func (l *local) keyWatches() *watchSet     { return l.watches }
func (r *remote) keyWatches() *watchSet    { return r.watches }
func (c *clustered) keyWatches() *watchSet { return c.watches }

// watchKey registers w on a member: watchLoop carries it to the writer.
func (r *remote) watchKey(_ context.Context, w *keyWatch) error {
	r.watches.add(w)
	return nil
}

// watchKey registers w with the backend of the current role. The watch
// set outlives the role: switchTo fires it whole.
func (c *clustered) watchKey(ctx context.Context, w *keyWatch) error {
	c.watches.add(w)
	be, _ := c.current()
	if l, ok := be.(*local); ok {
		if err := l.checkWatch(ctx, w); err != nil {
			if !c.writerGone(l, err) {
				return err
			}
			c.watches.fireOne(w) // read again from the next writer
		}
	}
	return nil
}

// watchPoll is how long one watch call waits on the writer.
// watchPollEvery, plus watchPollPerKey for each key it carries, is the
// least time between the starts of two watch calls of a member: it bounds
// the calls (and the keys re-sent, about 60 bytes each) when watched keys
// change or are added often, at the price of up to that long before a key
// added right after a call is watched, or a change right after a reply is
// answered: 5ms for a few keys, 55ms for 10,000.
const (
	watchPoll       = 15 * time.Second
	watchPollEvery  = 5 * time.Millisecond
	watchPollPerKey = 5 * time.Microsecond
)

// watchLoop long-polls the writer for changes of the keys this member
// watches, until close or the writer is gone (the next backend polls the
// next writer; switchTo fires every watch meanwhile). It makes no call
// while nothing is watched.
func (r *remote) watchLoop() {
	defer r.wg.Done()
	// The next backend's loop may be waiting for a key already: a signal
	// this one took (snapshot clears it) would be lost to it.
	defer r.watches.signalAdded()
	var last time.Time // when the last poll began
	var pace time.Duration
	for failures := 0; r.ctx.Err() == nil; {
		// Polls begin pace apart at least: each carries every watched
		// key, and what changes between two is seen by the second (its
		// sums).
		if d := time.Until(last.Add(pace)); d > 0 {
			select {
			case <-time.After(d):
			case <-r.ctx.Done():
				return
			}
		}
		keys, sums := r.watches.snapshot()
		if len(keys) == 0 {
			select {
			case <-r.watches.added:
				r.watches.signalAdded() // for snapshot to clear
			case <-r.ctx.Done():
			}
			continue
		}
		last, pace = time.Now(), watchPollEvery+time.Duration(len(keys))*watchPollPerKey
		ctx, cancel := context.WithTimeout(r.ctx, watchPoll+10*time.Second)
		done := make(chan struct{})
		go func() { // a key added meanwhile: poll again with it
			select {
			case <-r.watches.added:
				r.watches.signalAdded()
				cancel()
			case <-done:
			}
		}()
		var reply watchReply
		err := r.call(ctx, rpcWatch, &watchReq{Keys: keys, Sums: sums, Wait: watchPoll}, &reply)
		close(done)
		recut := ctx.Err() != nil && r.ctx.Err() == nil
		cancel()
		if err != nil {
			if recut {
				continue
			}
			if errors.Is(err, errWriterGone) {
				return
			}
			failures++
			select {
			case <-time.After(min(50*time.Millisecond<<min(failures, 5), time.Second)):
			case <-r.ctx.Done():
			}
			continue
		}
		failures = 0
		for _, k := range reply.Changed {
			r.watches.fireKey([]byte(k))
		}
	}
}

// serveWatch is the writer's side of rpcWatch: it registers the member's
// keys with their sums and answers with those that changed, once one did
// (or at once), or with none after wait.
func (l *local) serveWatch(ctx context.Context, req *watchReq, closing <-chan struct{}) (*watchReply, error) {
	const n = len(watchSum{})
	if len(req.Sums) != n*len(req.Keys) {
		return nil, invalid("watch of %d keys with %d bytes of sums", len(req.Keys), len(req.Sums))
	}
	ch := make(chan struct{}, 1)
	ws := make([]*keyWatch, len(req.Keys))
	defer func() {
		for _, w := range ws {
			if w != nil {
				l.watches.remove(w)
			}
		}
	}()
	for i, k := range req.Keys {
		w := &keyWatch{key: k, ch: ch}
		copy(w.sum[:], req.Sums[i*n:])
		ws[i] = w
		if err := l.watchKey(ctx, w); err != nil {
			ws[i] = nil
			return nil, err
		}
	}
	reply := &watchReply{}
	collect := func() {
		l.watches.mu.Lock()
		defer l.watches.mu.Unlock()
		for _, w := range ws {
			if w != nil && w.fired {
				reply.Changed = append(reply.Changed, w.key)
			}
		}
	}
	select {
	case <-ch:
	default:
		if req.Wait > 0 {
			t := time.NewTimer(min(req.Wait, maxWait))
			defer t.Stop()
			select {
			case <-ch:
			case <-t.C:
			case <-closing:
			case <-ctx.Done():
			}
		}
	}
	collect()
	return reply, nil
}
