package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// Reader reads the live state. It is only valid inside the function passed
// to View or Update. Returned values must not be modified and must be
// copied if kept after the function returns.
type Reader struct {
	e *Engine
	// seen is the newest not-yet-durable batch whose changes the reader
	// observed; View waits for it.
	seen *batch
}

// observe notes that the reader saw key.
func (r *Reader) observe(key string) {
	if b := r.e.dirty[key]; b != nil && (r.seen == nil || b.gen > r.seen.gen) {
		r.seen = b
	}
}

// ObservePending makes the enclosing View wait for every batch not yet
// durable. Call it after reading state derived from the tree (an Indexer's
// indexes), which the engine cannot track key by key.
func (r *Reader) ObservePending() {
	if b := r.e.pendingLocked(); b != nil && (r.seen == nil || b.gen > r.seen.gen) {
		r.seen = b
	}
}

// Get returns the encoded value of key.
func (r *Reader) Get(key string) ([]byte, bool) {
	r.observe(key)
	it, ok := r.e.tree.Get(probe(key))
	return it.val(), ok
}

// Ascend calls fn for keys with the given prefix that are >= from, in order,
// until fn returns false.
func (r *Reader) Ascend(prefix, from string, fn func(key string, val []byte) bool) {
	if from < prefix {
		from = prefix
	}
	// A scan also observes the absence of keys deleted by pending batches,
	// which are not in the tree to check: wait for every pending batch.
	r.ObservePending()
	r.e.tree.AscendGreaterOrEqual(probe(from), func(it item) bool {
		k := it.key()
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		return fn(k, it.val())
	})
}

// Len returns the number of keys.
func (r *Reader) Len() int { return r.e.tree.Len() }

// Tx is a transaction being applied. Its changes are visible to itself and,
// because the engine applies transactions one at a time, to every later
// transaction; they become durable with their batch.
type Tx struct {
	Reader
	muts  []format.Mutation
	undo  []undo
	freed []string
}

// undo is how to revert one change: put old back, or delete key if there
// was none.
type undo struct {
	key string
	old item
	had bool
}

// Put sets key to the encoded value val (see Inline, BlobRef). The engine
// stores a copy: the caller may reuse val. Mutations, the indexer and
// readers see the engine's copy.
func (tx *Tx) Put(key string, val []byte) {
	if val == nil {
		panic("engine: Put with a nil encoded value")
	}
	tx.put(newItem(key, val))
}

// PutInline is Put(prefix+string(key), Inline(data)) with one allocation,
// the tree's item: neither the key nor the encoded value is built apart.
func (tx *Tx) PutInline(prefix string, key, data []byte) {
	tx.put(itemIn(prefix, key, []byte{tagInline}, data))
}

// itemIn returns the item of key prefix+key and value head+val in one
// allocation.
func itemIn[K ~string | ~[]byte](prefix string, key K, head, val []byte) item {
	n, v := len(prefix)+len(key), len(head)+len(val)
	if uint64(n) > math.MaxUint32 || uint64(v) > math.MaxUint32 {
		panic("engine: key or value over 4 GiB")
	}
	buf := make([]byte, max(n+v, 1))
	copy(buf, prefix)
	copy(buf[len(prefix):], key)
	copy(buf[n:], head)
	copy(buf[n+len(head):], val)
	return item{p: &buf[0], klen: uint32(n), vlen: uint32(v)}
}

func (tx *Tx) put(it item) {
	old, had := tx.e.tree.ReplaceOrInsert(it)
	key, val := it.key(), it.val()
	tx.record(key, old, had, val)
	tx.muts = append(tx.muts, format.Mutation{Op: format.OpPut, Key: key, Value: val})
}

// PutIn is Put(prefix+key, val) with one allocation, the tree's item:
// the key is not built apart.
func (tx *Tx) PutIn(prefix, key string, val []byte) {
	if val == nil {
		panic("engine: Put with a nil encoded value")
	}
	tx.put(itemIn(prefix, key, nil, val))
}

// GetIn is Get(prefix+key) without building the key.
func (tx *Tx) GetIn(prefix, key string) ([]byte, bool) {
	return tx.Get(scratchKey(tx, prefix, key))
}

// DeleteIn is Delete(prefix+key) without building the key.
func (tx *Tx) DeleteIn(prefix, key string) bool {
	return tx.Delete(scratchKey(tx, prefix, key))
}

// GetKey is Get(prefix+string(key)) without building the key.
func (tx *Tx) GetKey(prefix string, key []byte) ([]byte, bool) {
	return tx.Get(scratchKey(tx, prefix, key))
}

// DeleteKey is Delete(prefix+string(key)) without building the key.
func (tx *Tx) DeleteKey(prefix string, key []byte) bool {
	return tx.Delete(scratchKey(tx, prefix, key))
}

// scratchKey returns prefix+key in the engine's scratch buffer: valid
// until the next call, for lookups that keep no reference to it (Get,
// Delete: the tree's own copy of a key is what they keep).
func scratchKey[K ~string | ~[]byte](tx *Tx, prefix string, key K) string {
	tx.e.kbuf = append(append(tx.e.kbuf[:0], prefix...), key...)
	return unsafe.String(unsafe.SliceData(tx.e.kbuf), len(tx.e.kbuf))
}

// Delete removes key, reporting whether it existed.
func (tx *Tx) Delete(key string) bool {
	old, had := tx.e.tree.Delete(probe(key))
	if !had {
		return false
	}
	key = old.key() // the tree's copy: key may be the caller's buffer
	tx.record(key, old, true, nil)
	tx.muts = append(tx.muts, format.Mutation{Op: format.OpDelete, Key: key})
	return true
}

func (tx *Tx) record(key string, old item, had bool, val []byte) {
	tx.undo = append(tx.undo, undo{key: key, old: old, had: had})
	var oldVal []byte
	if had {
		oldVal = old.val()
	}
	if bk := blobKeyOf(oldVal); bk != "" && bk != blobKeyOf(val) {
		tx.freed = append(tx.freed, bk)
	}
	if ix := tx.e.opts.Indexer; ix != nil {
		ix.Apply(key, oldVal, val)
	}
}

// rollback undoes every change of the transaction, newest first.
func (tx *Tx) rollback() {
	ix := tx.e.opts.Indexer
	for i := len(tx.undo) - 1; i >= 0; i-- {
		u := tx.undo[i]
		var cur item
		var old []byte
		if u.had {
			cur, _ = tx.e.tree.ReplaceOrInsert(u.old)
			old = u.old.val()
		} else {
			cur, _ = tx.e.tree.Delete(probe(u.key))
		}
		if ix != nil {
			ix.Apply(u.key, cur.val(), old)
		}
	}
}

// Update applies fn as one atomic transaction and returns once it is durable.
// fn runs with the engine's mutex held: it must be quick and must not block
// or call the engine. It may run on another caller's goroutine (see
// Apply). If fn returns an error every change it made is undone
// and the error is returned. Once fn has succeeded, Update waits for the
// batch's outcome until ctx ends: the result is then durable (nil), the
// engine's terminal error (not committed), or, if ctx ended first,
// ErrOutcomeUnknown wrapping ctx's error: the transaction stays applied
// and commits if its batch lands. A caller that must learn the outcome
// (say, to start leases once a claim is durable) uses Apply and waits with
// a ctx that does not end.
func (e *Engine) Update(ctx context.Context, fn func(tx *Tx) error) error {
	wait, err := e.Apply(ctx, fn)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// Apply is Update split in two: it applies fn and returns a function that
// waits for durability, until its ctx ends (then ErrOutcomeUnknown).
//
// Transactions are applied one at a time under the engine's mutex, and
// many goroutines apply at once (every Work slot settles through here):
// handing the mutex from one to the next, each woken by the scheduler
// while the others wait, took longer than the transactions themselves.
// Callers queue their transactions instead, and one of them, the
// combiner, applies what is queued under one acquisition of the mutex and
// then wakes their callers (see combine). Each transaction is applied on
// its own, as before: its own Tx, its own rollback and error.
func (e *Engine) Apply(ctx context.Context, fn func(tx *Tx) error) (wait func(context.Context) error, err error) {
	return e.ApplyTo(ctx, ApplyFunc(fn))
}

// Applier is a transaction: what ApplyTo applies.
type Applier interface {
	// ApplyTx makes the transaction's reads and writes in tx; an error
	// rolls them back. It may be called more than once (see Tx).
	ApplyTx(tx *Tx) error
}

// ApplyFunc is a function as an Applier.
type ApplyFunc func(tx *Tx) error

// ApplyTx calls f.
func (f ApplyFunc) ApplyTx(tx *Tx) error { return f(tx) }

// ApplyTo is Apply of an Applier: a caller whose transaction state is
// allocated anyway makes it the Applier, rather than allocate a closure
// over it.
func (e *Engine) ApplyTo(ctx context.Context, fn Applier) (wait func(context.Context) error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e.readOnly {
		return nil, ErrReadOnly
	}
	r := applyReqs.Get().(*applyReq)
	r.fn = fn
	r.ready.Lock() // unlocked by the combiner (see applyReq)
	e.amu.Lock()
	e.applyQ = append(e.applyQ, r)
	lead := !e.combining
	e.combining = true
	e.amu.Unlock()
	if !lead {
		r.ready.Lock()
		lead = r.lead
	}
	if lead {
		e.combine(r)
	}
	b, err := r.b, r.err
	r.fn, r.b, r.err, r.lead = nil, nil, nil, false
	r.ready.Unlock()
	applyReqs.Put(r)
	if p, ok := err.(*fnPanic); ok {
		panic(p.value) // on the goroutine of the caller whose fn panicked
	}
	if err != nil {
		return nil, err
	}
	if b == nil {
		return noWait, nil
	}
	return b.wait, nil // one function for every transaction of the batch
}

func noWait(context.Context) error { return nil }

// fnPanic is a transaction function's panic, recovered by the combiner
// (which may be another caller's goroutine) once it rolled the
// transaction back, and raised again by Apply on the goroutine of the
// caller whose function it was.
type fnPanic struct{ value any }

func (p *fnPanic) Error() string {
	return fmt.Sprintf("engine: transaction function panicked: %v", p.value)
}

// callFn calls fn, turning a panic into a *fnPanic.
func callFn(fn Applier, tx *Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &fnPanic{value: v}
		}
	}()
	return fn.ApplyTx(tx)
}

// waitFor waits for b's outcome until ctx ends (then ErrOutcomeUnknown).
// Its method value is b.wait, what Apply returns.
func (b *batch) waitFor(ctx context.Context) error {
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
	}
	select {
	case <-b.done: // both: the outcome is known
		return b.err
	default:
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, context.Cause(ctx))
	}
}

// applyReq is a transaction queued for the combiner (see Apply).
type applyReq struct {
	fn Applier
	// Set by the combiner before it signals ready.
	err  error
	b    *batch // the batch to wait for, or nil
	lead bool   // not applied: the caller is the next combiner
	// ready is locked by the caller before it queues the transaction,
	// and unlocked by the combiner once it applied it or set lead: the
	// caller waits by locking it again. A mutex, not a channel, so that
	// pooled requests carry nothing tied to the goroutines that used them
	// (a channel made inside a testing/synctest bubble cannot be used
	// outside it).
	ready sync.Mutex
}

var applyReqs = sync.Pool{New: func() any { return new(applyReq) }}

// combineRounds bounds how many times a combiner takes the queue before
// it hands its role to the caller of the oldest transaction left, so that
// its own caller, whose transaction it applied in its first round, is not
// held up for long.
const combineRounds = 4

// combine applies the queued transactions, own (its caller's, in the
// queue) among them, a round at a time: it takes the queue, applies each
// transaction under the engine's mutex, released between rounds (the
// committer and readers take it), and wakes their callers. Once the
// queue is empty, or after combineRounds, the role ends or passes on.
func (e *Engine) combine(own *applyReq) {
	for round := 1; ; round++ {
		e.amu.Lock()
		q := e.applyQ
		e.applyQ, e.applySpare = e.applySpare[:0], nil
		e.amu.Unlock()

		wrote := false
		e.mu.Lock()
		for _, r := range q {
			r.b, r.err = e.applyLocked(r.fn)
			wrote = wrote || r.err == nil && r.b == e.open
		}
		e.mu.Unlock()
		if wrote {
			e.wake()
		}
		for i, r := range q {
			if r != own {
				r.ready.Unlock()
			}
			q[i] = nil
		}

		e.amu.Lock()
		e.applySpare = q[:0]
		if len(e.applyQ) == 0 {
			e.combining = false
			e.amu.Unlock()
			return
		}
		if round >= combineRounds {
			next := e.applyQ[0]
			next.lead = true
			e.amu.Unlock()
			next.ready.Unlock()
			return
		}
		e.amu.Unlock()
	}
}

// applyLocked applies fn as one transaction: it returns the batch to wait
// for (the open batch if fn wrote, the newest not yet durable batch fn
// observed if it only read, or nil), or fn's error with every change
// undone.
//
// REQUIRES: e.mu held.
func (e *Engine) applyLocked(fn Applier) (*batch, error) {
	if err := e.usableLocked(); err != nil {
		return nil, err
	}
	// One Tx serves every transaction, its slices emptied and reused:
	// nothing keeps a Tx past its function (see Update).
	tx := &e.tx
	tx.Reader = Reader{e: e}
	defer tx.reset()
	if err := callFn(fn, tx); err != nil {
		tx.rollback()
		return nil, err
	}
	if len(tx.muts) == 0 {
		// Nothing to write, but fn may have read data that is not durable.
		return tx.seen, nil
	}
	b := e.open
	b.muts = append(b.muts, tx.muts...)
	b.freed = append(b.freed, tx.freed...)
	b.txns++
	for _, m := range tx.muts {
		e.dirty[m.Key] = b
	}
	return b, nil
}

// maxSpareMuts bounds the mutations array the committer keeps for the
// next batch.
const maxSpareMuts = 64 << 10

// maxTxScratch bounds the slices a Tx keeps for the next transaction: a
// rare huge one's are dropped.
const maxTxScratch = 1024

// reset empties tx for the next transaction, dropping what its slices
// refer to (items a later transaction may have removed from the tree).
func (tx *Tx) reset() {
	clear(tx.muts)
	clear(tx.undo)
	clear(tx.freed)
	tx.Reader = Reader{}
	tx.muts, tx.undo, tx.freed = tx.muts[:0], tx.undo[:0], tx.freed[:0]
	if cap(tx.muts) > maxTxScratch || cap(tx.undo) > maxTxScratch || cap(tx.freed) > maxTxScratch {
		*tx = Tx{}
	}
}

// View runs fn against the live state and returns once every change fn could
// have observed is durable. fn runs with the mutex held (see Update).
func (e *Engine) View(ctx context.Context, fn func(r *Reader) error) error {
	e.mu.Lock()
	if err := e.usableLocked(); err != nil {
		e.mu.Unlock()
		return err
	}
	r := &Reader{e: e}
	err := fn(r)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	return waitBatch(ctx, r.seen)
}

// usableLocked returns why the engine cannot take calls, or nil.
//
// REQUIRES: e.mu held.
func (e *Engine) usableLocked() error {
	if e.err != nil {
		return e.err
	}
	if e.closing {
		return ErrClosed
	}
	return nil
}

// pendingLocked returns the newest batch holding applied but not yet durable
// changes, or nil.
//
// REQUIRES: e.mu held.
func (e *Engine) pendingLocked() *batch {
	if e.open != nil && e.open.txns > 0 {
		return e.open
	}
	return e.inflight
}

func waitBatch(ctx context.Context, b *batch) error {
	if b == nil {
		return nil
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// commitLoop seals and writes batches, one write in flight at a time.
func (e *Engine) commitLoop() {
	defer e.loopWG.Done()
	var last struct {
		txns   uint32        // transactions in the previous batch
		during uint32        // transactions applied while it was written
		write  time.Duration // how long its write took
	}
	for {
		e.mu.Lock()
		if e.err != nil {
			e.mu.Unlock()
			return
		}
		if e.open.txns == 0 || e.holds > 0 {
			// Nothing to write, or a Hold is applying transactions that
			// are to share the open batch: its release kicks.
			done := e.closing && e.open.txns == 0
			// Idle under light load: a nearly full segment is replaced
			// now rather than by the next commit (see rotateIdle).
			rotate := !done && e.seg != nil && e.open.txns == 0 && e.holds == 0 && last.txns < lingerMinTxns
			seq := e.nextSeq // only this goroutine changes it
			e.mu.Unlock()
			if done {
				return
			}
			if rotate && e.seg.rotateDue() {
				if !e.switchWhenIdle(seq) {
					return
				}
				continue // a commit may have come meanwhile
			}
			<-e.kick
			continue
		}
		if want := last.txns + last.during; last.txns >= lingerMinTxns && e.open.txns < want && !e.closing && !e.noLinger.Load() {
			e.lingerLocked(want, last.write/lingerFraction)
			if e.err != nil {
				e.mu.Unlock()
				return
			}
		}
		b := e.open
		b.seq = e.nextSeq
		e.nextSeq++
		e.open = newBatch()
		e.open.muts, e.spare = e.spare, nil
		e.inflight = b
		snap := e.maybeSnapshotLocked(b)
		e.mu.Unlock()
		if snap != nil {
			e.bg.Add(1)
			go func() { _ = e.writeSnapshot(b, snap) }()
		}

		data, err := format.AppendBatch(e.walBuf[:0], &format.Batch{
			Seq: b.seq, Writer: e.writer, Epoch: e.epoch,
			UnixNano: time.Now().UnixNano(), Txns: b.txns, Muts: b.muts,
		})
		start := time.Now()
		var inSeg bool
		if err == nil {
			e.health.begin()
			inSeg, err = e.writeWAL(b.seq, data)
			e.health.end()
		}
		last.txns, last.write = b.txns, time.Since(start)
		// The next batch is encoded into the same buffer if this one
		// went into a segment record (copied there); a WAL object's
		// bytes went to the bucket, which is not promised not to keep
		// them. Nor is a rare huge batch's buffer kept.
		if inSeg && cap(data) <= 4<<20 {
			e.walBuf = data
		} else {
			e.walBuf = nil
		}

		e.mu.Lock()
		if err != nil {
			e.failLocked(err)
			e.mu.Unlock()
			return
		}
		if e.err != nil {
			// The engine failed while b was written (its heartbeat found a
			// newer writer, Close gave up on a stalled store, Kill):
			// failLocked told b's waiters then, unacknowledged, and a
			// segment write runs to its end whatever the context says.
			// Nothing is left to do, as after a failed write.
			e.mu.Unlock()
			return
		}
		last.during = e.open.txns
		e.inflight = nil
		e.durable = b.seq
		for _, m := range b.muts {
			if e.dirty[m.Key] == b {
				delete(e.dirty, m.Key)
			}
		}
		e.stats.WALWriteTime += last.write
		e.stats.WALWrites.Add(last.write)
		e.walBytes += int64(format.BatchBodyLen(data)) // what a replay decodes: see maybeSnapshotLocked
		e.walObjects++
		e.stats.Batches++
		e.stats.Txns += uint64(b.txns)
		e.stats.Mutations += uint64(len(b.muts))
		e.stats.WALBytes += uint64(len(data))
		if inSeg {
			e.stats.SegmentBatches++
		} else if e.seg != nil {
			e.singles = append(e.singles, b.seq)
		}
		// Nothing reads a durable batch's mutations again: the next
		// open batch appends to their array (not a rare huge one's).
		if cap(b.muts) <= maxSpareMuts {
			clear(b.muts)
			e.spare = b.muts[:0]
		}
		b.muts = nil
		e.mu.Unlock()
		close(b.done)
		if len(b.freed) > 0 {
			e.bg.Add(1)
			go e.deleteBlobs(b.freed)
		}
	}
}

// switchWhenIdle is the committer's, idle with a segment switch due (see
// segLog.rotateIdle): it waits idleRotateAfter for a commit, and if none
// came and the engine is still idle, switches to the staged segment,
// named for batch seq. It reports false if that failed the engine (the
// committer stops).
func (e *Engine) switchWhenIdle(seq uint64) bool {
	// Only after a pause: under light load commits come in chains (a
	// run's steps) a fraction of a millisecond apart, and the pause
	// between chains is for the switch.
	if e.idle == nil {
		e.idle = time.NewTimer(idleRotateAfter)
	} else {
		e.idle.Reset(idleRotateAfter)
	}
	select {
	case <-e.kick:
		e.idle.Stop()
		return true
	case <-e.idle.C:
	}
	e.mu.Lock()
	still := e.err == nil && !e.closing && e.open.txns == 0 && e.holds == 0
	e.mu.Unlock()
	if !still {
		return true
	}
	// Its publication is a store request like a WAL write's: a stall there
	// shows in Health (and lets Close give up).
	e.health.begin()
	err := e.seg.rotateIdle(e.bgCtx, seq, e.prepareSegment)
	e.health.end()
	if err != nil {
		e.mu.Lock()
		e.failLocked(err)
		e.mu.Unlock()
		return false
	}
	return true
}

// writeWAL makes batch seq, encoded as data, durable: as a record of the
// current WAL segment if the bucket has segments and one is at hand (it
// reports true), else as the object wal/<seq>. Transient failures are
// retried until the write lands (see health.go); an error is final.
//
// A segment record whose write or sync failed is not retried in place:
// after a failed fsync, Linux may have dropped the dirty pages and a
// second fsync reports success for data that never reached the disk. The
// segment is abandoned instead (no later record goes into it) and the
// batch is written as the object wal/<seq>, with the same bytes. Records
// are 4 KiB-aligned, so the failed one cannot damage those before it,
// which were synced; it may be there or not (a torn or whole record that
// ends the segment's log), and recovery reads the object first.
func (e *Engine) writeWAL(seq uint64, data []byte) (inSeg bool, err error) {
	if e.seg != nil {
		inSeg, err = e.seg.write(e.bgCtx, seq, data, e.prepareSegment)
		if inSeg || err != nil && e.bgCtx.Err() != nil {
			return inSeg, err
		}
		if err != nil {
			e.health.failed(walKey(seq), err)
		}
	}
	return false, e.createOnly(e.bgCtx, walKey(seq), data, time.Time{})
}

// prepareSegment stages the next WAL segment in the background.
func (e *Engine) prepareSegment() {
	e.seg.prepare(e.bgCtx, func(fn func()) {
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			fn()
		}()
	})
}

// Hold keeps the committer from sealing the open batch until release is
// called (once; later calls do nothing), so that the transactions applied
// meanwhile share one WAL write: a cluster writer holds while it applies
// the transactions of one member's call, which the member waits for
// together. Without it, the first of them would start a write of its own
// whenever the committer was idle, and the rest would wait for that write
// and then for theirs. A hold holds back every committer's batch: release
// it as soon as the transactions are applied, before waiting for them,
// and never hold across I/O (a blob's upload).
func (e *Engine) Hold() (release func()) {
	e.mu.Lock()
	e.holds++
	e.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			e.holds--
			e.mu.Unlock()
			e.wake()
		})
	}
}

// SetLinger turns the committer's linger (see lingerLocked) on or off; it
// is on after Open. A cluster writer turns it off once members call: the
// cohort a write released is then a member's slots, which come back a
// round trip later, never within the linger, so each linger only delayed
// the write (measured: a third of the writer's time went to lingers that
// ended at their timeout). Members batch their calls themselves.
func (e *Engine) SetLinger(on bool) {
	if e.noLinger.Load() == on {
		e.noLinger.Store(!on)
	}
}

// Lingers reports whether the committer's linger is on (see SetLinger).
func (e *Engine) Lingers() bool { return !e.noLinger.Load() }

// The committer waits for a batch to fill (see lingerLocked) only when the
// previous batch held at least lingerMinTxns transactions and the open one
// fewer than that batch and those that arrived while it was written, and
// for at most 1/lingerFraction of the previous write's duration.
const (
	lingerMinTxns  = 4
	lingerFraction = 2
)

// lingerLocked waits, up to max, for the open batch to hold want
// transactions, and no longer than other goroutines run: once none is
// running or runnable, none can add to the batch before the write frees
// some (they wait for commits, or for something outside the process).
//
// Group commit with one write in flight splits committers that wait on
// their commits (workers, submitters) into two cohorts: while one cohort's
// batch is written, the other's fills, and the first cohort, released by the
// write, arrives just after the next write started. Batches then hold half
// the committers each. Waiting briefly, until the open batch holds the
// released cohort (the previous batch) as well as the other (what arrived
// during its write), merges them: fewer, fuller writes.
// Light load never waits (batches of fewer than lingerMinTxns).
//
// It yields (runtime.Gosched) rather than sleeps: the goroutines it waits
// for run meanwhile, and it sees at once when all of them are blocked. A
// sleep for the rest would end late: on a process with nothing to run, Go
// sleeps in its network poller in whole milliseconds, so a linger of 0.2
// ms that the released cohort left short lasted a millisecond, the whole
// process idle (measured in a saturated run: every goroutine blocked 27%
// of the time with sleeps, 15% with yields, and 18% more transitions a
// second). The price: while goroutines of the process run on other Ps
// and none waits for this one, a linger keeps its P busy yielding, for
// up to max (half the last write, at most lingerMax). Its iterations are
// bounded too, for a clock that stands still while goroutines run (a
// testing/synctest bubble).
//
// REQUIRES: e.mu held; it is released while waiting.
func (e *Engine) lingerLocked(want uint32, max time.Duration) {
	if max <= 0 {
		return
	}
	max = min(max, lingerMax)
	e.lingers++
	deadline := time.Now().Add(max)
	for n := max / lingerYield; e.open.txns < want && e.err == nil && !e.closing; n-- {
		e.mu.Unlock()
		runtime.Gosched()
		idle := e.othersIdle()
		e.mu.Lock()
		if idle || n <= 0 || time.Now().After(deadline) {
			return
		}
	}
}

// lingerMax bounds a linger: after a slow write (a stall), half of it
// would keep a busy process's P yielding for as long.
const lingerMax = time.Millisecond

// lingerYield is less than the time an iteration of lingerLocked takes:
// a Gosched with nothing else to run and a read of the scheduler's
// counts.
const lingerYield = 100 * time.Nanosecond

// othersIdle reports whether no goroutine of the process other than the
// caller is running or runnable (the runtime's counts, which are
// approximate: a goroutine on its way between states may be missed).
//
// REQUIRES: e.mu not held by the caller (a committer alone calls it).
func (e *Engine) othersIdle() bool {
	s := e.sched[:]
	metrics.Read(s)
	return s[0].Value.Uint64() <= 1 && s[1].Value.Uint64() == 0
}

// writeCreateOnly writes data at key if the key does not exist. Transient
// and ambiguous failures are retried with the same bytes; a key that exists
// is read back: if it holds exactly data, an earlier attempt (ours, perhaps
// retried inside the SDK) landed; otherwise another writer owns the
// sequence and this engine is fenced.
//
// It gives up after Options.WriteRetry of transient failures (for Open).
func (e *Engine) writeCreateOnly(ctx context.Context, key string, data []byte) error {
	return e.createOnly(ctx, key, data, time.Now().Add(e.opts.WriteRetry))
}

// createOnly is writeCreateOnly retrying transient failures until deadline
// or, with a zero deadline (the committer's WAL writes), until the write
// lands or ctx ends, reporting each failure to the engine's health.
func (e *Engine) createOnly(ctx context.Context, key string, data []byte, deadline time.Time) error {
	forever := deadline.IsZero()
	for attempt := 0; ; attempt++ {
		err := e.bucket.Put(ctx, key, data, true)
		if err == nil {
			return nil
		}
		if errors.Is(err, objstore.ErrExists) {
			got, gerr := e.getRetry(ctx, key, deadline)
			if errors.Is(gerr, objstore.ErrNotFound) {
				gerr = fmt.Errorf("%w: %w", errGoneAfterConflict, gerr)
			}
			if gerr != nil {
				return &WriteError{Key: key, Err: fmt.Errorf("reading back after a conflict: %w", gerr)}
			}
			if bytes.Equal(got, data) {
				return nil
			}
			return fmt.Errorf("%w: %s was written by another writer", ErrFenced, key)
		}
		if !forever && (!objstore.IsRetryable(err) || time.Now().After(deadline)) || forever && !retryLater(err) {
			return &WriteError{Key: key, Err: err}
		}
		if forever {
			e.health.failed(key, err)
			err = outageBackoff(ctx, attempt)
		} else {
			err = sleepBackoff(ctx, attempt)
		}
		if err != nil {
			return &WriteError{Key: key, Err: err}
		}
	}
}

// errGoneAfterConflict: a create-only write found the key taken, and the
// object was gone when read back. Whose it was is unknown: another
// writer's, collected since (a snapshot covers it), or ours, written by an
// earlier attempt that reported failure, replayed by a writer that took
// over and collected.
var errGoneAfterConflict = errors.New("the object was deleted after the conflict")

// getRetry reads key, retrying transient failures until deadline (zero:
// until ctx ends).
func (e *Engine) getRetry(ctx context.Context, key string, deadline time.Time) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		data, err := e.bucket.Get(ctx, key)
		if err == nil || !objstore.IsRetryable(err) || !deadline.IsZero() && time.Now().After(deadline) {
			return data, err
		}
		backoff := sleepBackoff
		if deadline.IsZero() {
			backoff = outageBackoff
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// sleepBackoff sleeps 10ms * 2^attempt, capped at 1s, with full jitter.
func sleepBackoff(ctx context.Context, attempt int) error {
	d := 10 * time.Millisecond << min(attempt, 7)
	d = min(d, time.Second)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func walKey(seq uint64) string  { return fmt.Sprintf("wal/%020d", seq) }
func snapKey(seq uint64) string { return fmt.Sprintf("snap/%020d", seq) }

// parseSeqKey parses "<prefix><20 digits>".
func parseSeqKey(prefix, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) != 20 {
		return 0, false
	}
	var n uint64
	for _, c := range []byte(rest) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
