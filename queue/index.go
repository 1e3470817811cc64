package queue

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/google/btree"

	"github.com/stepwell/stepwell/internal/engine"
)

// The job index is derived, in-memory state kept in step with the engine's
// tree through engine.Indexer: every change to a job record (live, undone,
// replayed) passes through Apply. It is guarded by the engine's mutex: it is
// only touched inside engine Update/View functions and Indexer calls.

// idRef is a job ID held as a pointer and a length: 12 bytes where a
// string takes 16, which lets the index items below pack into 24 and 32
// bytes (there is one per pending job). It points into the engine's copy
// of the job's key, like the string it stands for would.
type idRef struct {
	p *byte
	n uint32
}

func refID(id string) idRef { return idRef{p: unsafe.StringData(id), n: uint32(len(id))} }

func (r idRef) String() string { return unsafe.String(r.p, r.n) }

// readyItem is a claimable job: 24 bytes (the fields in this order pack
// without padding).
type readyItem struct {
	order uint64
	idp   *byte // idRef, flattened
	idn   uint32
	prio  int32
}

func newReadyItem(prio int32, order uint64, id string) readyItem {
	r := refID(id)
	return readyItem{order: order, idp: r.p, idn: r.n, prio: prio}
}

func (it readyItem) id() string { return idRef{it.idp, it.idn}.String() }

// readyLess orders higher priority first, then FIFO.
func readyLess(a, b readyItem) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.order < b.order
}

// schedItem is a job pending until runAt: 32 bytes.
type schedItem struct {
	runAt int64
	order uint64
	idp   *byte // idRef, flattened
	idn   uint32
	prio  int32
}

func schedLess(a, b schedItem) bool {
	if a.runAt != b.runAt {
		return a.runAt < b.runAt
	}
	return a.order < b.order
}

type timeItem struct {
	at int64
	id string
}

func timeLess(a, b timeItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.id < b.id
}

type queueIndex struct {
	ready   *btree.BTreeG[readyItem]
	sched   *btree.BTreeG[schedItem]
	claimed map[string]struct{}
	// Pending jobs of a snapshot being loaded (see jobIndex.bulk).
	bulkReady []readyItem
	bulkSched []schedItem
	// done and dead jobs by UpdatedAt, for retention and listing.
	done *btree.BTreeG[timeItem]
	dead *btree.BTreeG[timeItem]
	// notify is closed (and replaced) when a job becomes claimable, and,
	// for a queue with a limit, when a claim ends or the limit changes.
	notify chan struct{}
	// limit is the queue's Limit (limit.go); nil: none.
	limit *queueLimit
}

func newQueueIndex() *queueIndex {
	return &queueIndex{
		ready:   btree.NewG(16, readyLess),
		sched:   btree.NewG(16, schedLess),
		claimed: map[string]struct{}{},
		done:    btree.NewG(16, timeLess),
		dead:    btree.NewG(16, timeLess),
		notify:  make(chan struct{}),
	}
}

func (qi *queueIndex) wake() {
	close(qi.notify)
	qi.notify = make(chan struct{})
}

type jobIndex struct {
	now    func() time.Time
	queues map[string]*queueIndex
	// dedup maps a queue and a dedup key (appendDedupKey) to the pending
	// jobs holding it, oldest first. Usually one; several when a job with
	// the key is enqueued while another is claimed and that one is then
	// retried or requeued.
	dedup    map[string][]string
	kbuf     []byte // scratch key of dedup lookups (see dedupScratch)
	maxOrder uint64
	// corrupt records the first undecodable job record seen (reported by
	// Open; the engine's checksums make this a bug, not bit rot).
	corrupt error
	// bulk is set while a snapshot loads (engine.BulkIndexer): pending
	// jobs collect in the queues' bulkReady and bulkSched and enter the
	// trees at EndBulk.
	bulk bool
	// limited counts the queues with a limit (limit.go): while it is 0, a
	// claim made at enqueue pays one check of it for limits.
	limited int
	// enc is where transactions encode the job records they put (see
	// jobValue).
	enc []byte
}

// jobValue returns rec encoded as an engine value in ix's scratch buffer,
// valid until the next call: for Tx.Put and Tx.PutIn, which copy it.
//
// REQUIRES: inside an engine transaction (ix is guarded by its mutex).
func (ix *jobIndex) jobValue(rec *jobRec) []byte {
	ix.enc = appendJob(engine.AppendInline(ix.enc[:0]), rec)
	v := ix.enc
	if cap(ix.enc) > 64<<10 {
		ix.enc = nil // do not keep a rare huge record's buffer
	}
	return v
}

var _ engine.BulkIndexer = (*jobIndex)(nil)

// BeginBulk implements engine.BulkIndexer.
func (ix *jobIndex) BeginBulk() { ix.bulk = true }

// EndBulk implements engine.BulkIndexer.
func (ix *jobIndex) EndBulk() {
	ix.bulk = false
	for _, qi := range ix.queues {
		loadTight(qi.ready, qi.bulkReady, readyLess)
		loadTight(qi.sched, qi.bulkSched, schedLess)
		qi.bulkReady, qi.bulkSched = nil, nil
	}
}

// loadTight inserts items into t in descending order: see the engine's
// loadSnapshot on why that makes tight trees.
func loadTight[T any](t *btree.BTreeG[T], items []T, less func(a, b T) bool) {
	slices.SortFunc(items, func(a, b T) int {
		switch {
		case less(a, b):
			return -1
		case less(b, a):
			return 1
		}
		return 0
	})
	for i := len(items) - 1; i >= 0; i-- {
		t.ReplaceOrInsert(items[i])
	}
}

func newJobIndex(now func() time.Time) *jobIndex {
	ix := &jobIndex{now: now}
	ix.Reset()
	return ix
}

func (ix *jobIndex) Reset() {
	ix.bulk = false
	ix.queues = map[string]*queueIndex{}
	ix.dedup = map[string][]string{}
	ix.maxOrder = 0
	ix.corrupt = nil
	ix.limited = 0
}

func (ix *jobIndex) queue(name string) *queueIndex {
	qi := ix.queues[name]
	if qi == nil {
		qi = newQueueIndex()
		ix.queues[name] = qi
	}
	return qi
}

// queueBytes is queue for a name that aliases a record (no allocation
// once the queue's index exists).
func (ix *jobIndex) queueBytes(name []byte) *queueIndex {
	if qi := ix.queues[string(name)]; qi != nil {
		return qi
	}
	return ix.queue(string(name))
}

// dedupScratch returns the key of ix.dedup for key in queue (see
// appendDedupKey), in ix's scratch buffer, valid until the next call:
// ix.dedup[string(k)] looks it up without a copy.
func (ix *jobIndex) dedupScratch(queue []byte, key string) []byte {
	ix.kbuf = appendDedupKey(ix.kbuf[:0], queue, key)
	return ix.kbuf
}

// dedupHolders returns the pending jobs holding key in queue, oldest
// first.
func (ix *jobIndex) dedupHolders(queue, key string) []string {
	ix.kbuf = appendDedupKey(ix.kbuf[:0], queue, key)
	return ix.dedup[string(ix.kbuf)]
}

// appendDedupKey appends the key of ix.dedup for key in queue: queue's
// length, queue, then key. Neither a queue name nor a dedup key is
// barred any byte, so a separator between them would let two pairs meet
// ("a\x00b" + "c" and "a" + "b\x00c"); a length cannot.
func appendDedupKey[Q string | []byte](b []byte, queue Q, key string) []byte {
	b = binary.AppendUvarint(b, uint64(len(queue)))
	return append(append(b, queue...), key...)
}

func (ix *jobIndex) Apply(key string, old, new []byte) {
	id, ok := strings.CutPrefix(key, jobSpace)
	if !ok {
		if queue, ok := limitQueueOf(key); ok {
			ix.applyLimit(queue, new)
		}
		return
	}
	var r indexRec
	if old != nil {
		if err := decodeIndexRec(old, &r); err == nil {
			ix.remove(id, &r)
		} else if ix.corrupt == nil {
			ix.corrupt = err
		}
	}
	if new != nil {
		if err := decodeIndexRec(new, &r); err == nil {
			ix.add(id, &r)
		} else if ix.corrupt == nil {
			ix.corrupt = err
		}
	}
}

func (ix *jobIndex) add(id string, r *indexRec) {
	qi := ix.queueBytes(r.queue)
	ix.maxOrder = max(ix.maxOrder, r.order)
	switch r.state {
	case statePending:
		if r.runAt > ix.now().UnixNano() {
			ref := refID(id)
			it := schedItem{runAt: r.runAt, order: r.order, idp: ref.p, idn: ref.n, prio: r.priority}
			if ix.bulk {
				qi.bulkSched = append(qi.bulkSched, it)
			} else {
				qi.sched.ReplaceOrInsert(it)
			}
		} else {
			it := newReadyItem(r.priority, r.order, id)
			if ix.bulk {
				qi.bulkReady = append(qi.bulkReady, it)
			} else {
				qi.ready.ReplaceOrInsert(it)
			}
		}
		qi.wake()
		if r.dedupKey != "" {
			k := ix.dedupScratch(r.queue, r.dedupKey)
			ix.dedup[string(k)] = append(ix.dedup[string(k)], id)
		}
	case stateClaimed:
		qi.claimed[id] = struct{}{}
	case stateDone:
		qi.done.ReplaceOrInsert(timeItem{at: r.updatedAt, id: id})
	case stateDead:
		qi.dead.ReplaceOrInsert(timeItem{at: r.updatedAt, id: id})
	}
}

func (ix *jobIndex) remove(id string, r *indexRec) {
	if ix.bulk {
		ix.EndBulk() // not expected while a snapshot loads; stay correct
		ix.bulk = true
	}
	qi := ix.queueBytes(r.queue)
	switch r.state {
	case statePending:
		// A pending job is in exactly one of the two trees; which one
		// depends on when it was promoted, so try both.
		if _, ok := qi.ready.Delete(readyItem{prio: r.priority, order: r.order}); !ok {
			qi.sched.Delete(schedItem{runAt: r.runAt, order: r.order})
		}
		if r.dedupKey != "" {
			k := ix.dedupScratch(r.queue, r.dedupKey)
			if ids, ok := ix.dedup[string(k)]; ok {
				// DeleteFunc works in place: the entry's slice is
				// updated unless it empties.
				if ids = slices.DeleteFunc(ids, func(x string) bool { return x == id }); len(ids) == 0 {
					delete(ix.dedup, string(k))
				} else {
					ix.dedup[string(k)] = ids
				}
			}
		}
	case stateClaimed:
		delete(qi.claimed, id)
		if qi.limit != nil {
			qi.wake() // a claim ended: one more may fit the limit
		}
	case stateDone:
		qi.done.Delete(timeItem{at: r.updatedAt, id: id})
	case stateDead:
		qi.dead.Delete(timeItem{at: r.updatedAt, id: id})
	}
	// An emptied queue keeps its index: waiters hold its notify channel.
}

// promote moves scheduled jobs that are due into the ready tree.
func (qi *queueIndex) promote(now int64) {
	for {
		it, ok := qi.sched.Min()
		if !ok || it.runAt > now {
			return
		}
		qi.sched.DeleteMin()
		qi.ready.ReplaceOrInsert(readyItem{order: it.order, idp: it.idp, idn: it.idn, prio: it.prio})
	}
}

// nextDue returns the earliest RunAt of a scheduled job, or 0.
func (qi *queueIndex) nextDue() int64 {
	if it, ok := qi.sched.Min(); ok {
		return it.runAt
	}
	return 0
}
