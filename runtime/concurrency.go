package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
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
// would be enqueued (Submit) and holds it until it ends (terminate), or,
// if none is free, waits in the key's line (runrec.ConcLineKey) with its
// step 0, and its record's ConcLine names its entry. Each of these writes
// compare-and-puts the key's state (runrec.ConcState) in the run's
// transaction, so the queue's one writer orders them all: the count is
// exact across processes, and nothing has to be rebuilt after a crash.
// A write that loses a race on the state fails its transaction's
// conditions, and its caller reads again and builds it again, as for a
// run record that moved.

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

// putConc adds to txn the write of a key's state st, read as old (nil:
// absent): deleted when no run holds a slot and none waits.
func putConc(txn *queue.Txn, key string, old []byte, st *runrec.ConcState) {
	k := runrec.ConcStateKey(key)
	if st.Active == 0 && st.Waiting == 0 && old != nil {
		txn.CompareAndDelete(k, old)
		return
	}
	txn.CompareAndPut(k, old, runrec.EncodeConcState(st))
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
	switch {
	case limit != 0:
		st.Limit = limit
	case st.Limit == 0:
		st.Limit = max(rec.ConcLimit, 1)
	}
	if old == nil {
		// A new state's line numbers start from the clock, not from 0, so
		// that an entry's key names one run, whatever state came before.
		st.NextSeq = uint64(max(rt.opts.now().UnixNano(), 0))
	}
	if err := rt.concAdmit(ctx, txn, key, old, st, 0); err != nil {
		return false, err
	}
	held := st.Active < st.Limit // then nobody waits: admitted above
	if held {
		st.Active++
		rec.ConcLine = 0
	} else {
		st.NextSeq++
		st.Waiting++
		rec.ConcLine, rec.CurrentJob = st.NextSeq, ""
		ent.RunID = rec.RunID
		if ent.Payload == nil {
			ent.Payload = []byte{}
		}
		txn.Put(runrec.ConcLineKey(key, st.NextSeq), runrec.EncodeConcEntry(ent))
	}
	putConc(txn, key, old, st)
	return held, nil
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
	old, st, err := rt.loadConc(ctx, key)
	if err != nil {
		failTxn(txn, rec.RunID)
		return
	}
	if old == nil {
		return // not counted (cannot be: a run with a key is)
	}
	if rec.ConcLine != 0 {
		txn.Delete(runrec.ConcLineKey(key, rec.ConcLine))
		st.Waiting = max(st.Waiting, 1) - 1
	} else {
		st.Active = max(st.Active, 1) - 1
	}
	if err := rt.concAdmit(ctx, txn, key, old, st, rec.ConcLine); err != nil {
		failTxn(txn, rec.RunID)
		return
	}
	putConc(txn, key, old, st)
}

// concAdmit adds to txn the start of the oldest waiting runs of key
// while st (read as old) has a free slot: each one's line entry is
// deleted, its record compare-and-put holding a slot, and its step
// started (parked if it is paused). skip is a line entry that txn deletes
// anyway (0: none). A line shorter than st says (which no committed state
// has) is taken as it is.
//
// The state, the line and the records are read one after the other, not
// as of one instant: a run admitted meanwhile by another transaction is
// found out of line, and then the state has moved on too, so txn is made
// to fail (its caller reads again and retries).
func (rt *Runtime) concAdmit(ctx context.Context, txn *queue.Txn, key string, old []byte, st *runrec.ConcState, skip uint64) error {
	prefix := runrec.ConcLineOf(key)
	var after []byte
	for st.Active < st.Limit && st.Waiting > 0 {
		n := int(min(st.Limit-st.Active, 100)) + 1
		page, err := rt.q.Scan(ctx, prefix, queue.ScanOptions{After: after, Limit: n})
		if err != nil {
			return err
		}
		for _, kv := range page.Items {
			if st.Active >= st.Limit || st.Waiting == 0 {
				return nil
			}
			seq, _ := strconv.ParseUint(string(bytes.TrimPrefix(kv.Key, prefix)), 10, 64)
			if seq == skip && skip != 0 {
				continue
			}
			err := rt.admitOne(ctx, txn, key, old, seq, kv, st)
			if errors.Is(err, errConcMoved) {
				failTxn(txn, runrec.ConcPrefix+key) // read again
				return nil
			}
			if err != nil {
				return err
			}
		}
		if page.Next == nil {
			st.Waiting = 0 // the line is empty
			return nil
		}
		after = page.Next
	}
	return nil
}

// admitOne adds to txn the start of the run waiting in key's line at
// entry kv (sequence seq), counted in st.
func (rt *Runtime) admitOne(ctx context.Context, txn *queue.Txn, key string, stOld []byte, seq uint64, kv queue.KV, st *runrec.ConcState) error {
	ent, err := runrec.DecodeConcEntry(kv.Value)
	if err != nil {
		txn.CompareAndDelete(kv.Key, kv.Value)
		st.Waiting--
		rt.opts.logger.Error("stepwell: dropping an undecodable concurrency line entry", "key", string(kv.Key), "err", err)
		return nil
	}
	rec, old, err := rt.loadRun(ctx, ent.RunID)
	if errors.Is(err, ErrRunNotFound) || err == nil && (rec.State == kvrecord.StateTerminal || rec.ConcKey != key || rec.ConcLine != seq) {
		// The entry and the record change together, with the state: if
		// the state moved since it was read, so did they.
		cur, err := rt.q.Get(ctx, runrec.ConcStateKey(key))
		if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
			return err
		}
		if !bytes.Equal(cur, stOld) {
			return errConcMoved
		}
		// Cannot be: drop the entry.
		txn.CompareAndDelete(kv.Key, kv.Value)
		st.Waiting--
		rt.opts.logger.Error("stepwell: dropping a concurrency line entry whose run does not wait there",
			"key", string(kv.Key), "run_id", ent.RunID)
		return nil
	}
	if err != nil {
		return err
	}
	txn.CompareAndDelete(kv.Key, kv.Value)
	st.Waiting--
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
	st.Active++
	return nil
}

// errConcMoved: a key's state changed while a transaction was built on
// it (see concAdmit).
var errConcMoved = errors.New("runtime: concurrency state moved")

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
