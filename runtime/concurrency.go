package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
)

// Concurrency bounds how many runs of one key are active at once in the
// whole store (RunSpec.Concurrency): across every Runtime and process on
// it, cluster members included, and across restarts and failovers. The
// zero Concurrency is no bound.
type Concurrency struct {
	// Key names the bound: runs with the same Key share it, runs with
	// different keys never wait for each other. 1 to 128 bytes of
	// printable ASCII without '/', not starting or ending with a space
	// (as a run ID).
	Key string
	// Limit is how many runs of Key may hold a slot at once: at least 1.
	// The newest submitted run's Limit applies to its key (runs that
	// already hold a slot keep it when it is lowered; a raise starts the
	// oldest waiting runs at once).
	Limit int
}

// Bounds of a Concurrency.
const (
	MaxConcurrencyKeyLen = 128
	MaxConcurrencyLimit  = math.MaxInt32
)

// validateConcurrency returns ErrInvalidRunSpec (wrapped with the
// reason) unless c is the zero Concurrency or a valid one.
func validateConcurrency(c Concurrency) error {
	switch {
	case c == Concurrency{}:
		return nil
	case c.Key == "":
		return fmt.Errorf("%w: Concurrency.Limit %d without a Key", ErrInvalidRunSpec, c.Limit)
	case c.Limit < 1:
		return fmt.Errorf("%w: Concurrency.Limit %d of key %q: at least 1", ErrInvalidRunSpec, c.Limit, c.Key)
	case c.Limit > MaxConcurrencyLimit:
		return fmt.Errorf("%w: Concurrency.Limit %d of key %q: at most %d", ErrInvalidRunSpec, c.Limit, c.Key, MaxConcurrencyLimit)
	case strings.TrimSpace(c.Key) != c.Key:
		return fmt.Errorf("%w: Concurrency.Key %q has leading or trailing whitespace", ErrInvalidRunSpec, c.Key)
	case len(c.Key) > MaxConcurrencyKeyLen:
		return fmt.Errorf("%w: Concurrency.Key of %d bytes, at most %d", ErrInvalidRunSpec, len(c.Key), MaxConcurrencyKeyLen)
	}
	for i := 0; i < len(c.Key); i++ {
		if b := c.Key[i]; b < 0x20 || b > 0x7e || b == '/' {
			return fmt.Errorf("%w: Concurrency.Key: byte %#x at %d (printable ASCII without '/')", ErrInvalidRunSpec, b, i)
		}
	}
	return nil
}

// concDiff adds to diff a difference between spec's Concurrency and the
// run record's submission.
func concDiff(diff []string, rec *kvrecord.Run, spec *RunSpec) []string {
	if got := (Concurrency{Key: rec.ConcKey, Limit: int(rec.ConcLimit)}); got != spec.Concurrency {
		diff = append(diff, fmt.Sprintf("Concurrency (%+v, not %+v)", got, spec.Concurrency))
	}
	return diff
}

// The slots of a key. A run with a key takes a slot when its step 0
// would be enqueued (Submit, Retry) and holds it until it ends
// (terminate), or, if none is free, waits in the key's line
// (runrec.ConcLineKey) with its step, its record's ConcLine naming its
// entry. Every change is made in the transaction of the run it is about,
// under compare-and-put conditions on the key's records, so the queue's
// one writer orders them all: the count is exact across processes, and
// nothing has to be rebuilt after a crash. A transaction that loses a race
// on them fails its conditions, and its caller reads again and builds it
// again, as for a run record that moved.
//
// INVARIANT (every committed state): a key whose line is not empty has
// no free slot (Active >= Limit).
//
//   - A take (a free slot: Active < Limit) writes the state, Active+1.
//   - A join (no free slot) writes the tail, NextSeq+1, and the entry,
//     under the condition that the state is unchanged (still full).
//   - An end that finds Active > Limit (the limit was lowered) writes the
//     state, Active-1, and admits nobody.
//   - An end that finds the line not empty passes its slot: it deletes
//     the oldest entry and starts that run (its record, its step), under
//     the condition that the state is unchanged; Active stays.
//   - An end that finds the line empty writes the state, Active-1 (both
//     records deleted at 0), under the condition that the tail is
//     unchanged: a join that committed first makes it read again.
//   - A submit that raises the limit admits the oldest waiting runs
//     first, Active+1 each.
//
// Joins and passes, the two steps of a hot key whose line is long, write
// different keys (the tail, the state's condition left unchanged), so
// they do not make each other read again.

// loadConc reads a key's state: its bytes (nil if absent) and the state
// (zero if absent).
func (rt *Runtime) loadConc(ctx context.Context, key string) ([]byte, *runrec.ConcState, error) {
	b, err := rt.q.Get(ctx, runrec.ConcStateKey(key))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, &runrec.ConcState{}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := runrec.DecodeConcState(b)
	return b, st, err
}

// loadTail reads a key's line tail: its bytes (nil if absent) and the
// tail. An absent tail's numbers start from the clock, not from 0, so
// that an entry's key never names two runs, whatever tail came before.
func (rt *Runtime) loadTail(ctx context.Context, key string) ([]byte, *runrec.ConcTail, error) {
	b, err := rt.q.Get(ctx, runrec.ConcTailKey(key))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, &runrec.ConcTail{NextSeq: uint64(max(rt.opts.now().UnixNano(), 0))}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	t, err := runrec.DecodeConcTail(b)
	return b, t, err
}

// concTake adds to txn what a run with a key does when its step would
// start (Submit, or Retry with ent's step): it takes a free slot (true:
// the caller enqueues the step as it would without a key), or joins the
// key's line with ent (rec.ConcLine set; the caller enqueues nothing).
// limit, if not 0, becomes the key's limit (a Submit); a raise admits
// the oldest waiting runs first, in the same transaction.
func (rt *Runtime) concTake(ctx context.Context, txn *queue.Txn, rec *kvrecord.Run, limit uint32, ent *runrec.ConcEntry) (bool, error) {
	key := rec.ConcKey
	old, st, err := rt.loadConc(ctx, key)
	if err != nil {
		return false, err
	}
	prev := st.Limit
	switch {
	case limit != 0:
		st.Limit = limit
	case st.Limit == 0:
		st.Limit = max(rec.ConcLimit, 1)
	}
	if old != nil && st.Limit > prev && st.Active < st.Limit {
		// A raise: the runs waiting in line come first.
		err := rt.concAdmit(ctx, txn, key, old, st)
		if errors.Is(err, errConcMoved) {
			failTxn(txn, rec.RunID) // read again
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	k := runrec.ConcStateKey(key)
	if st.Active < st.Limit { // the line is empty (the invariant)
		st.Active++
		rec.ConcLine = 0
		if old == nil {
			// A new state gets its tail, whose condition guards the ends.
			tb, tail, err := rt.loadTail(ctx, key)
			if err != nil {
				return false, err
			}
			if tb == nil {
				txn.CompareAndPut(runrec.ConcTailKey(key), nil, runrec.EncodeConcTail(tail))
			}
		}
		txn.CompareAndPut(k, old, runrec.EncodeConcState(st))
		return true, nil
	}
	tb, tail, err := rt.loadTail(ctx, key)
	if err != nil {
		return false, err
	}
	tail.NextSeq++
	rec.ConcLine, rec.CurrentJob = tail.NextSeq, ""
	ent.RunID = rec.RunID
	if ent.Payload == nil {
		ent.Payload = []byte{}
	}
	txn.Put(runrec.ConcLineKey(key, tail.NextSeq), runrec.EncodeConcEntry(ent)).
		CompareAndPut(runrec.ConcTailKey(key), tb, runrec.EncodeConcTail(tail)).
		CompareAndPut(k, old, runrec.EncodeConcState(st)) // unchanged but for a new Limit
	return false, nil
}

// concRelease adds to txn, which ends rec (next: its final record, not
// yet encoded), what its end does to its key: a run in the line leaves
// it; a run holding a slot gives it up, to the oldest waiting run if
// any (its step starts in txn). If a record cannot be read, txn gets a
// condition that fails, so that its caller reads again and retries.
func (rt *Runtime) concRelease(txn *queue.Txn, rec, next *kvrecord.Run) {
	ctx := context.Background()
	key := rec.ConcKey
	next.ConcLine = 0
	if rec.ConcLine != 0 {
		// Its record's compare-and-put guards the entry: an end that
		// admits this run writes the record too.
		txn.Delete(runrec.ConcLineKey(key, rec.ConcLine))
		return
	}
	if err := rt.concGiveUp(ctx, txn, key); err != nil {
		failTxn(txn, rec.RunID)
	}
}

// concGiveUp adds to txn the release of one slot of key.
func (rt *Runtime) concGiveUp(ctx context.Context, txn *queue.Txn, key string) error {
	old, st, err := rt.loadConc(ctx, key)
	if err != nil || old == nil {
		return err // absent: not counted (cannot be: a run with a key is)
	}
	k := runrec.ConcStateKey(key)
	if st.Active > st.Limit { // the limit was lowered: nobody is admitted
		st.Active--
		txn.CompareAndPut(k, old, runrec.EncodeConcState(st))
		return nil
	}
	passed, err := rt.concPass(ctx, txn, key)
	if err != nil {
		return err
	}
	if passed {
		txn.CompareAndPut(k, old, old) // the limit still allows it
		return nil
	}
	tb, tail, err := rt.loadTail(ctx, key)
	if err != nil {
		return err
	}
	tk := runrec.ConcTailKey(key)
	st.Active = max(st.Active, 1) - 1
	switch {
	case st.Active == 0 && tb != nil:
		txn.CompareAndDelete(k, old).CompareAndDelete(tk, tb)
	case tb != nil:
		txn.CompareAndPut(k, old, runrec.EncodeConcState(st)).CompareAndPut(tk, tb, tb)
	default: // no tail (cannot be: a state has one): one, as the guard
		txn.CompareAndPut(k, old, runrec.EncodeConcState(st)).CompareAndPut(tk, nil, runrec.EncodeConcTail(tail))
	}
	return nil
}

// concPass adds to txn the start of the oldest run waiting in key's
// line, if there is one (true).
func (rt *Runtime) concPass(ctx context.Context, txn *queue.Txn, key string) (bool, error) {
	prefix := runrec.ConcLineOf(key)
	var after []byte
	for {
		page, err := rt.q.Scan(ctx, prefix, queue.ScanOptions{After: after, Limit: 1})
		if err != nil || len(page.Items) == 0 {
			return false, err
		}
		ok, err := rt.admitOne(ctx, txn, key, page.Items[0])
		if ok || err != nil {
			return ok, err
		}
		after = page.Items[0].Key // dropped: the next one
	}
}

// concAdmit adds to txn the start of the oldest waiting runs of key
// while st (read as old) has a free slot, counting them in st.
func (rt *Runtime) concAdmit(ctx context.Context, txn *queue.Txn, key string, old []byte, st *runrec.ConcState) error {
	prefix := runrec.ConcLineOf(key)
	var after []byte
	for st.Active < st.Limit {
		n := int(min(st.Limit-st.Active, 100))
		page, err := rt.q.Scan(ctx, prefix, queue.ScanOptions{After: after, Limit: n})
		if err != nil {
			return err
		}
		for _, kv := range page.Items {
			ok, err := rt.admitOne(ctx, txn, key, kv)
			if err != nil {
				return err
			}
			if ok {
				st.Active++
			}
		}
		if page.Next == nil {
			return nil
		}
		after = page.Next
	}
	return nil
}

// admitOne adds to txn the start of the run waiting in key's line at
// entry kv: false if the entry is dropped instead (it names no run that
// waits there, which no committed state has). The entry, the tail and
// the record are read one after the other, not as of one instant: an
// entry whose run is found out of line is read again, and if it changed,
// txn is made to fail (its caller reads again and retries).
func (rt *Runtime) admitOne(ctx context.Context, txn *queue.Txn, key string, kv queue.KV) (bool, error) {
	seq, _ := strconv.ParseUint(string(bytes.TrimPrefix(kv.Key, runrec.ConcLineOf(key))), 10, 64)
	txn.CompareAndDelete(kv.Key, kv.Value)
	ent, err := runrec.DecodeConcEntry(kv.Value)
	if err != nil {
		rt.opts.logger.Error("stepwell: dropping an undecodable concurrency line entry", "key", string(kv.Key), "err", err)
		return false, nil
	}
	rec, old, err := rt.loadRun(ctx, ent.RunID)
	if errors.Is(err, ErrRunNotFound) || err == nil && (rec.State == kvrecord.StateTerminal || rec.ConcKey != key || rec.ConcLine != seq) {
		cur, err := rt.q.Get(ctx, kv.Key)
		if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
			return false, err
		}
		if !bytes.Equal(cur, kv.Value) {
			return false, errConcMoved // left the line meanwhile
		}
		rt.opts.logger.Error("stepwell: dropping a concurrency line entry whose run does not wait there",
			"key", string(kv.Key), "run_id", ent.RunID)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	now := rt.opts.now().UnixNano()
	next := *rec
	next.ConcLine, next.CurrentStep, next.UpdatedAt = 0, ent.Step, now
	var delay time.Duration
	if ent.DueAt > now {
		delay = time.Duration(ent.DueAt - now)
	}
	if next.Retries == 0 || next.Paused {
		rt.startStep(txn, &next, ent.Payload, delay, nil, false, ent.TraceParent)
	} else {
		// A retried run: its step gets a dedup key of its own, as Retry's
		// (the step's first job may still be around).
		next.CurrentJob = newJobID()
		opts := rt.stepOptions(&next, next.CurrentStep, next.CurrentJob, ent.TraceParent)
		opts.DedupKey = fmt.Sprintf("%s:retry%d", opts.DedupKey, next.Retries)
		opts.Delay = delay
		if delay == 0 {
			opts = qx.WithDispatch(opts, true)
		}
		txn.Enqueue(rt.stepQueue(&next), ent.Payload, opts)
	}
	txn.CompareAndPut(kvrecord.RunKey(rec.RunID), old, runrec.EncodeRun(&next))
	return true, nil
}

// errConcMoved: a key's line changed while a transaction was built on
// it (see admitOne).
var errConcMoved = errors.New("runtime: concurrency line moved")

// concWaitingFor is what Status says a run waiting in its key's line
// waits for.
func (rt *Runtime) concWaitingFor(ctx context.Context, rec *kvrecord.Run) (string, error) {
	_, st, err := rt.loadConc(ctx, rec.ConcKey)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("waiting for concurrency key %s: %d of %d", rec.ConcKey, st.Active, st.Limit), nil
}

// concLinePayload returns the payload of the step that rec, waiting in
// its key's line, would start ([]byte{} if its entry cannot be read).
func (rt *Runtime) concLinePayload(ctx context.Context, rec *kvrecord.Run) ([]byte, error) {
	b, err := rt.q.Get(ctx, runrec.ConcLineKey(rec.ConcKey, rec.ConcLine))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return []byte{}, nil
	}
	if err != nil {
		return nil, err
	}
	ent, err := runrec.DecodeConcEntry(b)
	if err != nil {
		return []byte{}, nil
	}
	return ent.Payload, nil
}

// concRetry adds to txn what Retry of a run with a key does before its
// final step is requeued: it takes a free slot (true: the step is
// requeued as without a key) or joins the key's line with the step and
// its kept payload (false: next waits, its dead job, if any, stays dead).
func (rt *Runtime) concRetry(ctx context.Context, txn *queue.Txn, next *kvrecord.Run, t *kvrecord.Terminal) (bool, error) {
	payload := t.Payload
	if payload == nil && t.DeadJob != "" {
		job, err := rt.q.GetJob(ctx, t.DeadJob)
		if err != nil && !errors.Is(err, queue.ErrJobNotFound) {
			return false, err
		}
		if job != nil {
			payload = job.Payload
			if payload == nil {
				payload = []byte{}
			}
		}
	}
	kept := payload != nil
	ent := &runrec.ConcEntry{Step: t.FinalStep, Payload: payload, TraceParent: rt.tel.traceParent(ctx)}
	held, err := rt.concTake(ctx, txn, next, 0, ent)
	if err != nil || held {
		return held, err
	}
	if !kept {
		return false, fmt.Errorf("%w: the payload of run %q's step %d is no longer kept (its dead job %s was deleted)",
			ErrRunNotRetryable, next.RunID, t.FinalStep, t.DeadJob)
	}
	if t.Queue != "" {
		next.Queue = t.Queue
	}
	return false, nil
}

// concLocks serialize a process's submits of one key (striped by the
// key's hash): they would all compare-and-put the key's state, and of
// submits racing on it only one commits per round, the others reading
// it again. In turn, each reads the state its predecessor wrote. Other
// processes' submits and the ends of runs still race on the state, as
// the compare-and-put allows.
type concLocks [64]sync.Mutex

// lock locks key's stripe and returns its unlock.
func (l *concLocks) lock(key string) func() {
	h := fnv.New32a()
	h.Write([]byte(key))
	m := &l[h.Sum32()%uint32(len(l))]
	m.Lock()
	return m.Unlock
}
