package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/stepwell/stepwell/internal/testenv"
)

// The model test applies random operations both to a real Queue (on mem://
// and file://, with the fake clock) and to a plain in-memory model of the
// documented semantics, and compares the two after every operation: each
// known job (GetJob), each queue's Stats and dead-letter listing, and the
// whole KV space.
//
// Backoff jitter is the one thing the model cannot predict: after an
// operation that schedules a retry by backoff, the model reads the job's
// RunAt back, checks that it lies within [now+d/2, now+d], and adopts it.
//
// Replay a failure with STEPWELL_MODEL_SEED=<seed>; run longer with
// STEPWELL_MODEL_OPS=<n> (operations per seed) and soak with
// STEPWELL_MODEL_SEEDS=<from>-<to> (those seeds instead of the fixed and
// random ones), e.g.
//
//	STEPWELL_MODEL_SEEDS=1-200 STEPWELL_MODEL_OPS=2000 go test -run TestModelMem ./queue/
//
// Backoff jitter comes from
// the package's global random source, so a replay follows the same
// operations but jittered due times may differ.

// Settings of the queues under test. qb overrides the defaults.
const (
	mLease       = 30 * time.Second
	mBackoffBase = time.Second
	mBackoffMax  = 8 * time.Second
	mMaxAttempts = 3
	mLargeValue  = 1024 // values above this go to their own blob objects
)

var (
	mQueues  = []string{"qa", "qb"}
	mQBConf  = QueueConfig{Lease: 10 * time.Second, MaxAttempts: 2, BackoffBase: 2 * time.Second, BackoffMax: 4 * time.Second}
	mKVKeys  = []string{"a", "b", "c", "d/1", "d/2"}
	mDedups  = []string{"", "", "", "x", "y"}
	mPrios   = []int32{-1, 0, 1}
	mHeaders = []map[string]string{nil, nil, {"h": "1"}}
	mJobIDs  = []string{"job-1", "job-2", "job-3"} // explicit IDs (EnqueueOptions.JobID)
)

func modelOptions(clk *fakeClock) []Option {
	return []Option{
		withClock(clk),
		WithLease(mLease),
		WithRetryBackoff(mBackoffBase, mBackoffMax),
		WithMaxAttempts(mMaxAttempts),
		WithQueueConfig("qb", mQBConf),
		WithLargeValueThreshold(mLargeValue),
		WithSnapshotThreshold(16<<10, 8), // snapshots (and reopen from them) happen
	}
}

type mCfg struct {
	lease       time.Duration
	maxAttempts uint32
	base, max   time.Duration
}

func modelCfg(queue string) mCfg {
	if queue == "qb" {
		return mCfg{mQBConf.Lease, mQBConf.MaxAttempts, mQBConf.BackoffBase, mQBConf.BackoffMax}
	}
	return mCfg{mLease, mMaxAttempts, mBackoffBase, mBackoffMax}
}

// backoffRange is the documented retry delay after the attempts'th failure:
// base doubling per attempt, capped, jittered within [d/2, d].
func (c mCfg) backoffRange(attempts uint32) (lo, hi time.Duration) {
	d := c.base
	for i := uint32(1); i < attempts; i++ {
		d *= 2
		if d >= c.max {
			break
		}
	}
	d = min(d, c.max)
	return d / 2, d
}

// ---- the model ----

type mState int

const (
	mPending mState = iota + 1 // pending or scheduled, by runAt
	mClaimed
	mDead
)

type mJob struct {
	id, queue, dedup string
	payload          []byte
	headers          map[string]string
	prio             int32
	order            uint64 // FIFO position; kept across retries
	state            mState
	runAt            time.Time
	pinned           bool      // runAt is known (not a jittered backoff yet to be read back)
	runLo, runHi     time.Time // bounds of an unpinned runAt
	attempts         uint32
	maxAttempts      uint32
	enqueuedAt       time.Time
	updatedAt        time.Time // death time, for the dead listing
	cancelReq        bool
	history          []string
	claim            uint64 // claim number while claimed
	leaseExp         time.Time
	deadNotify       string // EnqueueOptions.DeadLetterQueue
}

type model struct {
	jobs map[string]*mJob // live jobs (pending, claimed, dead)
	// notices are dead-letter notices created by the last operation, whose
	// (generated) IDs the harness has yet to discover.
	notices []*mJob
	kv      map[string][]byte
	order   uint64
	claims  uint64
}

func newModel() *model {
	return &model{jobs: map[string]*mJob{}, kv: map[string][]byte{}}
}

func (m *model) clone() *model {
	c := &model{jobs: make(map[string]*mJob, len(m.jobs)), kv: make(map[string][]byte, len(m.kv)), order: m.order, claims: m.claims}
	for id, j := range m.jobs {
		cj := *j
		cj.history = slices.Clone(j.history)
		c.jobs[id] = &cj
	}
	for k, v := range m.kv {
		c.kv[k] = v
	}
	for _, n := range m.notices {
		cn := *n
		c.notices = append(c.notices, &cn)
	}
	return c
}

func (j *mJob) addHistory(s string) {
	j.history = append(j.history, s)
	if len(j.history) > maxHistory {
		j.history = slices.Clone(j.history[len(j.history)-maxHistory:])
	}
}

// ready reports whether the job is claimable: pending and due. A job
// retried by backoff in the current operation (not pinned yet) is not due.
func (j *mJob) ready(now time.Time) bool {
	return j.state == mPending && j.pinned && !j.runAt.After(now)
}

// higherReady reports whether a job of queue with priority above prio is
// claimable, which refuses an EnqueueOptions.Claim of a job with prio. The
// dead-letter notices of the current operation count too.
func (m *model) higherReady(queue string, prio int32, now time.Time) bool {
	for _, j := range m.jobs {
		if j.queue == queue && j.prio > prio && j.ready(now) {
			return true
		}
	}
	for _, j := range m.notices {
		if j.queue == queue && j.prio > prio && j.ready(now) {
			return true
		}
	}
	return false
}

// grant claims job j for this process: attempt counted, lease from now.
func (m *model) grant(j *mJob, now time.Time) {
	m.claims++
	j.state, j.claim, j.updatedAt = mClaimed, m.claims, now
	j.attempts++
	j.leaseExp = now.Add(modelCfg(j.queue).lease)
}

// release is Txn.Release: pending again without counting the attempt, no
// history entry, RunAt (due: it was claimed) and FIFO position kept, a
// cancel request kept.
func (m *model) release(j *mJob, now time.Time) {
	j.state, j.updatedAt, j.claim = mPending, now, 0
	j.attempts--
}

// holders returns the pending (or scheduled) jobs of queue with dedup key k.
func (m *model) holders(queue, k string) []string {
	var ids []string
	for id, j := range m.jobs {
		if j.state == mPending && j.queue == queue && j.dedup == k {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// valid returns the job a claim handle still holds, or nil.
func (m *model) valid(h *mHandle) *mJob {
	j := m.jobs[h.job.ID]
	if j == nil || j.state != mClaimed || j.claim != h.claim {
		return nil
	}
	return j
}

func (m *model) dead(j *mJob, reason string, now time.Time) {
	j.addHistory(reason)
	j.state, j.updatedAt, j.claim = mDead, now, 0
	if j.deadNotify != "" {
		// A notice job in the same transaction: payload the dead job's ID,
		// headers the job's plus the dead job and reason.
		h := maps.Clone(j.headers)
		if h == nil {
			h = map[string]string{}
		}
		h[HeaderDeadJob], h[HeaderDeadReason] = j.id, reason
		m.order++
		m.notices = append(m.notices, &mJob{
			queue: j.deadNotify, payload: []byte(j.id), headers: h, order: m.order,
			state: mPending, runAt: now, pinned: true, maxAttempts: modelCfg(j.deadNotify).maxAttempts,
			enqueuedAt: now, updatedAt: now,
		})
	}
}

// retry is a failed attempt: pending again after retryAfter (0: jittered
// backoff), or dead at the attempt limit.
func (m *model) retry(j *mJob, reason string, retryAfter time.Duration, now time.Time) {
	if j.attempts >= j.maxAttempts {
		m.dead(j, reason, now)
		return
	}
	j.addHistory(reason)
	j.state, j.updatedAt, j.claim = mPending, now, 0
	if retryAfter > 0 {
		j.runAt, j.pinned = now.Add(retryAfter), true
		return
	}
	lo, hi := modelCfg(j.queue).backoffRange(j.attempts)
	j.pinned, j.runLo, j.runHi = false, now.Add(lo), now.Add(hi)
}

// claim takes up to n ready jobs: priority desc, then FIFO.
func (m *model) claim(queue string, n int, now time.Time) []*mJob {
	var ready []*mJob
	for _, j := range m.jobs {
		if j.queue == queue && j.ready(now) {
			ready = append(ready, j)
		}
	}
	sort.Slice(ready, func(a, b int) bool {
		if ready[a].prio != ready[b].prio {
			return ready[a].prio > ready[b].prio
		}
		return ready[a].order < ready[b].order
	})
	if len(ready) > n {
		ready = ready[:n]
	}
	for _, j := range ready {
		m.grant(j, now)
	}
	return ready
}

// reap requeues (or kills) every claimed job whose lease has expired.
func (m *model) reap(now time.Time) {
	for _, id := range m.sortedIDs() {
		j := m.jobs[id]
		if j.state == mClaimed && !now.Before(j.leaseExp) {
			m.retry(j, "lease expired", 0, now)
		}
	}
}

// reopen is what a new process does with the jobs the old one left claimed.
func (m *model) reopen(now time.Time) {
	for _, id := range m.sortedIDs() {
		j := m.jobs[id]
		if j.state != mClaimed {
			continue
		}
		// A cancel request stays: the next claim sees it at once.
		if j.attempts >= j.maxAttempts {
			m.dead(j, "worker stopped without settling (last attempt)", now)
			continue
		}
		j.addHistory("worker stopped without settling")
		j.state, j.runAt, j.pinned, j.updatedAt, j.claim = mPending, now, true, now, 0
	}
}

func (m *model) sortedIDs() []string {
	ids := make([]string, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// ---- transactions ----

type mOpKind int

const (
	mPut mOpKind = iota + 1
	mDel
	mCAS
	mEnq
	mAck
	mNack
	mDeadLetter
	mCancel
	mRequire
	mCAD // CompareAndDelete
	mRelease
)

type mOp struct {
	kind       mOpKind
	key        string
	val        []byte
	old        []byte // CAS: nil means must be absent
	req        EnqueueRequest
	h          *mHandle
	retryAfter time.Duration
	reason     string
	id         string
	states     []State // RequireJobState
}

func (o mOp) String() string {
	switch o.kind {
	case mPut:
		return fmt.Sprintf("Put(%s, %s)", o.key, short(o.val))
	case mDel:
		return fmt.Sprintf("Delete(%s)", o.key)
	case mCAS:
		old := "<absent>"
		if o.old != nil {
			old = short(o.old)
		}
		return fmt.Sprintf("CAS(%s, %s -> %s)", o.key, old, short(o.val))
	case mEnq:
		opt := o.req.Options
		return fmt.Sprintf("Enqueue(%s, %s, prio=%d delay=%v runAt=%v max=%d dedup=%q id=%q dlq=%q claim=%v)", o.req.Queue, short(o.req.Payload), opt.Priority, opt.Delay, fmtTime(opt.RunAt), opt.MaxAttempts, opt.DedupKey, opt.JobID, opt.DeadLetterQueue, opt.claim)
	case mAck:
		return fmt.Sprintf("Ack(%s#%d)", o.h.job.ID, o.h.claim)
	case mNack:
		return fmt.Sprintf("Nack(%s#%d, %v)", o.h.job.ID, o.h.claim, o.retryAfter)
	case mDeadLetter:
		return fmt.Sprintf("DeadLetter(%s#%d)", o.h.job.ID, o.h.claim)
	case mCancel:
		return fmt.Sprintf("CancelJob(%s)", o.id)
	case mRequire:
		return fmt.Sprintf("RequireJobState(%s, %v)", o.id, o.states)
	case mCAD:
		return fmt.Sprintf("CompareAndDelete(%s, %s)", o.key, short(o.old))
	case mRelease:
		return fmt.Sprintf("Release(%s#%d)", o.h.job.ID, o.h.claim)
	}
	return "?"
}

func short(b []byte) string {
	if len(b) > 12 {
		return fmt.Sprintf("%q..(%d bytes)", b[:8], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return t.UTC().Format("15:04:05.000000000")
}

func (o mOp) addTo(t *Txn) {
	switch o.kind {
	case mPut:
		t.Put([]byte(o.key), o.val)
	case mDel:
		t.Delete([]byte(o.key))
	case mCAS:
		t.CompareAndPut([]byte(o.key), o.old, o.val)
	case mEnq:
		t.Enqueue(o.req.Queue, o.req.Payload, o.req.Options)
	case mAck:
		t.Ack(o.h.job)
	case mNack:
		t.Nack(o.h.job, errors.New(o.reason), o.retryAfter)
	case mDeadLetter:
		t.DeadLetter(o.h.job, o.reason)
	case mCancel:
		t.CancelJob(o.id)
	case mRequire:
		t.requireJobState(o.id, o.states...)
	case mCAD:
		t.CompareAndDelete([]byte(o.key), o.old)
	case mRelease:
		t.release(o.h.job)
	}
}

// Expected outcomes of a transaction.
type mErr int

const (
	mOK mErr = iota
	mClaimLost
	mCondFailed
	mJobExists
)

func (e mErr) String() string {
	return [...]string{"ok", "claim lost", "condition failed", "job exists"}[e]
}

func classify(err error) (mErr, bool) {
	switch {
	case err == nil:
		return mOK, true
	case IsClaimLost(err):
		return mClaimLost, true
	case errors.Is(err, ErrConditionFailed):
		return mCondFailed, true
	case errors.Is(err, ErrJobExists):
		return mJobExists, true
	}
	return 0, false
}

// applyTxn applies ops to a copy of m, matching enqueue and cancel results
// against res (the real outcome). It returns the new model (nil when the
// transaction must fail), the expected error, and every result mismatch.
func (m *model) applyTxn(ops []mOp, res TxnResult, now time.Time) (*model, mErr, []string) {
	c := m.clone()
	var diffs []string
	enq, canc := 0, 0
	for i, o := range ops {
		switch o.kind {
		case mPut:
			c.kv[o.key] = o.val
		case mDel:
			delete(c.kv, o.key)
		case mCAS:
			cur, ok := c.kv[o.key]
			if o.old == nil && ok || o.old != nil && (!ok || !bytes.Equal(cur, o.old)) {
				return nil, mCondFailed, diffs
			}
			c.kv[o.key] = o.val
		case mCAD:
			cur, ok := c.kv[o.key]
			if !ok || !bytes.Equal(cur, o.old) {
				return nil, mCondFailed, diffs
			}
			delete(c.kv, o.key)
		case mEnq:
			var got EnqueueResult
			if enq < len(res.Enqueued) {
				got = res.Enqueued[enq]
			} else {
				got = EnqueueResult{JobID: fmt.Sprintf("missing-%d", i)}
			}
			enq++
			r := o.req
			if id := r.Options.JobID; id != "" && c.jobs[id] != nil {
				return nil, mJobExists, diffs // checked before the dedup key
			}
			if r.Options.DedupKey != "" {
				if hs := c.holders(r.Queue, r.Options.DedupKey); len(hs) > 0 {
					if !got.Duplicate || !slices.Contains(hs, got.JobID) || got.claimed != nil {
						diffs = append(diffs, fmt.Sprintf("op %d %v: got %+v, want a duplicate of one of %v (pending with that key), not claimed", i, o, got, hs))
					}
					continue
				}
			}
			if got.Duplicate {
				diffs = append(diffs, fmt.Sprintf("op %d %v: got duplicate of %s, want a new job (no pending job has key %q)", i, o, got.JobID, r.Options.DedupKey))
				continue
			}
			if r.Options.JobID != "" {
				if got.JobID != r.Options.JobID {
					diffs = append(diffs, fmt.Sprintf("op %d %v: new job ID %s, want the explicit %s", i, o, got.JobID, r.Options.JobID))
				}
				got.JobID = r.Options.JobID // also when the real commit failed (res is empty)
			}
			if c.jobs[got.JobID] != nil {
				diffs = append(diffs, fmt.Sprintf("op %d %v: new job ID %s already in use", i, o, got.JobID))
				continue
			}
			runAt := now
			switch {
			case r.Options.Delay > 0:
				runAt = now.Add(r.Options.Delay)
			case !r.Options.RunAt.IsZero():
				runAt = r.Options.RunAt
			}
			maxA := r.Options.MaxAttempts
			if maxA == 0 {
				maxA = modelCfg(r.Queue).maxAttempts
			}
			c.order++
			j := &mJob{
				id: got.JobID, queue: r.Queue, dedup: r.Options.DedupKey, payload: r.Payload,
				headers: r.Options.Headers, prio: r.Options.Priority, order: c.order,
				state: mPending, runAt: runAt, pinned: true, maxAttempts: maxA,
				enqueuedAt: now, updatedAt: now, deadNotify: r.Options.DeadLetterQueue,
			}
			// EnqueueOptions.Claim: granted when the job is due and no job
			// of higher priority is ready in its queue (one of equal
			// priority does not stop it: the claim bypasses FIFO).
			grant := r.Options.claim && !runAt.After(now) && !c.higherReady(r.Queue, r.Options.Priority, now)
			if grant {
				c.grant(j, now)
			}
			c.jobs[got.JobID] = j
			switch {
			case grant && got.claimed == nil:
				diffs = append(diffs, fmt.Sprintf("op %d %v: claim not granted, want it granted (due, no higher priority ready)", i, o))
			case !grant && got.claimed != nil:
				why := "not due"
				if !r.Options.claim {
					why = "not asked for"
				} else if !runAt.After(now) {
					why = "a job of higher priority is ready"
				}
				diffs = append(diffs, fmt.Sprintf("op %d %v: claim granted, want refused (%s)", i, o, why))
			case grant && got.claimed.ID != got.JobID:
				diffs = append(diffs, fmt.Sprintf("op %d %v: Claimed.ID %s, want %s", i, o, got.claimed.ID, got.JobID))
			case grant:
				if d := diffJob(got.claimed, j, now); d != "" {
					diffs = append(diffs, fmt.Sprintf("op %d %v: Claimed: %s", i, o, d))
				}
			}
		case mAck, mNack, mDeadLetter, mRelease:
			j := c.valid(o.h)
			if j == nil {
				return nil, mClaimLost, diffs
			}
			switch o.kind {
			case mRelease:
				c.release(j, now)
			case mAck:
				delete(c.jobs, j.id) // default done retention 0: gone at once
			case mNack:
				c.retry(j, o.reason, o.retryAfter, now)
			case mDeadLetter:
				c.dead(j, o.reason, now)
			}
		case mCancel:
			want := CancelNotFound
			if j := c.jobs[o.id]; j != nil {
				switch j.state {
				case mPending:
					want = CancelRemoved
					delete(c.jobs, o.id)
				case mClaimed:
					want = CancelRequested
					j.cancelReq = true
				case mDead:
					want = CancelFinished
				}
			}
			if canc < len(res.Cancelled) && res.Cancelled[canc] != want {
				diffs = append(diffs, fmt.Sprintf("op %d %v = %v, want %v", i, o, res.Cancelled[canc], want))
			}
			canc++
		case mRequire:
			j := c.jobs[o.id]
			if j == nil || !slices.Contains(o.states, j.expState(now)) {
				return nil, mCondFailed, diffs
			}
		}
	}
	return c, mOK, diffs
}

// ---- the harness ----

type mHandle struct {
	job   *Job
	claim uint64
}

type modelRun struct {
	t       *testing.T
	ctx     context.Context
	rng     *rand.Rand
	clk     *fakeClock
	url     string
	q       *Queue
	m       *model
	handles []*mHandle
	known   []string // every job ID ever returned
	knownOK map[string]bool
	log     []string
	step    int
	stats   map[string]int
}

func (r *modelRun) now() time.Time { return r.clk.Now() }

func (r *modelRun) logf(format string, args ...any) {
	s := fmt.Sprintf("#%d %s ", r.step, fmtTime(r.now())) + fmt.Sprintf(format, args...)
	r.log = append(r.log, s)
}

func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	tail := r.log
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	r.t.Fatalf("model mismatch at step %d: %s\nlast operations:\n  %s", r.step, fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func (r *modelRun) addKnown(id string) {
	if !r.knownOK[id] {
		r.knownOK[id] = true
		r.known = append(r.known, id)
	}
}

func (r *modelRun) open() {
	q, err := Open(r.ctx, r.url, modelOptions(r.clk)...)
	if err != nil {
		r.fail("Open(%s): %v", r.url, err)
	}
	r.q = q
}

// commit runs ops on the real queue (through the single-operation API when
// there is one, else as a Txn) and on the model, and compares outcomes.
// Jobs claimed by their enqueue join the claim handles.
func (r *modelRun) commit(ops []mOp, api string) TxnResult {
	r.t.Helper()
	var res TxnResult
	var err error
	switch api {
	case "single":
		o := ops[0]
		switch o.kind {
		case mPut:
			err = r.q.Put(r.ctx, []byte(o.key), o.val)
		case mDel:
			err = r.q.Delete(r.ctx, []byte(o.key))
		case mCAS:
			err = r.q.CompareAndPut(r.ctx, []byte(o.key), o.old, o.val)
		case mCAD: // no single-call API
			_, err = r.q.Commit(r.ctx, new(Txn).CompareAndDelete([]byte(o.key), o.old))
		case mEnq:
			var e EnqueueResult
			if e, err = r.q.Enqueue(r.ctx, o.req.Queue, o.req.Payload, o.req.Options); err == nil {
				res.Enqueued = []EnqueueResult{e}
			}
		case mAck:
			err = r.q.Ack(r.ctx, o.h.job)
		case mNack:
			err = r.q.Nack(r.ctx, o.h.job, errors.New(o.reason), o.retryAfter)
		case mDeadLetter:
			err = r.q.DeadLetter(r.ctx, o.h.job, o.reason)
		case mRelease:
			err = r.q.release(r.ctx, o.h.job)
		case mCancel:
			var c CancelOutcome
			if c, err = r.q.CancelJob(r.ctx, o.id); err == nil {
				res.Cancelled = []CancelOutcome{c}
			}
		}
	case "batch":
		reqs := make([]EnqueueRequest, len(ops))
		for i, o := range ops {
			reqs[i] = o.req
		}
		res.Enqueued, err = r.q.EnqueueBatch(r.ctx, reqs)
	default:
		t := new(Txn)
		for _, o := range ops {
			o.addTo(t)
		}
		res, err = r.q.Commit(r.ctx, t)
	}
	for _, e := range res.Enqueued {
		r.addKnown(e.JobID)
	}
	if len(r.log) > 0 {
		r.log[len(r.log)-1] += fmt.Sprintf(" = %+v, %v", res, err)
	}
	got, ok := classify(err)
	if !ok {
		r.fail("%s %v: unexpected error %v", api, ops, err)
	}
	next, want, diffs := r.m.applyTxn(ops, res, r.now())
	if got != want {
		r.fail("%s %v: outcome %v (%v), model says %v", api, ops, got, err, want)
	}
	if got == mOK && len(diffs) > 0 {
		r.fail("%s: %s", api, strings.Join(diffs, "; "))
	}
	if next != nil {
		r.m = next
	}
	r.stats[fmt.Sprintf("%s:%v", api, got)]++
	for _, e := range res.Enqueued {
		if e.claimed == nil {
			continue
		}
		j := r.m.jobs[e.JobID]
		if j == nil || j.state != mClaimed {
			r.fail("%s %v: job %s claimed by its enqueue, but the model has it %v", api, ops, e.JobID, j)
		}
		r.addHandle(e.claimed, j.claim)
		r.stats["claimed-on-enqueue"]++
	}
	for _, o := range ops {
		if o.kind == mRelease && got == mOK {
			r.stats["released"]++
		}
	}
	return res
}

// discover finds the generated IDs of the dead-letter notices the model
// expects from the last operation: the real store's jobs the model does not
// know must be exactly those notices, matched by payload (the dead job's
// ID). Notices made by one operation are ordered among themselves as the
// real store ordered them (the reaper kills expired jobs in map order).
func (r *modelRun) discover() {
	l := r.q.be.(*local)
	type found struct {
		id    string
		order uint64
	}
	var unknown []found
	err := l.eng.View(r.ctx, func(rd *engine.Reader) error {
		rd.Ascend(jobSpace, "", func(k string, v []byte) bool {
			id := k[len(jobSpace):]
			if r.m.jobs[id] == nil {
				rec, err := decodeJob(v)
				if err != nil {
					r.fail("job %s: %v", id, err)
				}
				unknown = append(unknown, found{id, rec.Order})
			}
			return true
		})
		return nil
	})
	if err != nil {
		r.fail("listing jobs: %v", err)
	}
	if len(unknown) != len(r.m.notices) {
		var ids []string
		for _, f := range unknown {
			ids = append(ids, f.id)
		}
		r.fail("store has %d jobs the model does not know (%v), want %d dead-letter notices", len(unknown), ids, len(r.m.notices))
	}
	if len(unknown) == 0 {
		return
	}
	var orders []uint64
	for _, n := range r.m.notices {
		orders = append(orders, n.order)
	}
	slices.Sort(orders)
	sort.Slice(unknown, func(a, b int) bool { return unknown[a].order < unknown[b].order })
	notices := r.m.notices
	for i, f := range unknown {
		got, err := r.q.GetJob(r.ctx, f.id)
		if err != nil {
			r.fail("GetJob(%s): %v", f.id, err)
		}
		k := slices.IndexFunc(notices, func(n *mJob) bool { return bytes.Equal(n.payload, got.Payload) })
		if k < 0 {
			r.fail("job %s (payload %s) is no expected dead-letter notice", f.id, short(got.Payload))
		}
		n := notices[k]
		notices = slices.Delete(notices, k, k+1)
		n.id, n.order = f.id, orders[i]
		r.m.jobs[f.id] = n
		r.addKnown(f.id)
		r.stats["notices"]++
	}
	r.m.notices = nil
}

// pin reads back the RunAt of every job retried by backoff, checks it is
// within the jitter bounds and adopts it.
func (r *modelRun) pin() {
	for _, id := range r.m.sortedIDs() {
		j := r.m.jobs[id]
		if j.pinned {
			continue
		}
		got, err := r.q.GetJob(r.ctx, id)
		if err != nil {
			r.fail("GetJob(%s) of a retried job: %v", id, err)
		}
		if got.RunAt.Before(j.runLo) || got.RunAt.After(j.runHi) {
			r.fail("job %s retried at %s, want within backoff [%s, %s]", id, fmtTime(got.RunAt), fmtTime(j.runLo), fmtTime(j.runHi))
		}
		j.runAt, j.pinned = got.RunAt, true
	}
}

// ---- checks ----

func (r *modelRun) check() {
	r.t.Helper()
	r.discover()
	r.pin()
	now := r.now()
	// Every job ever seen. Jobs gone from the model are looked up every
	// 16th step only: discover already fails on any job in the store that
	// the model does not know.
	for _, id := range append(slices.Clone(r.known), "01NOSUCHJOB0000000000000000") {
		mj := r.m.jobs[id]
		if mj == nil && r.step%16 != 0 {
			continue
		}
		got, err := r.q.GetJob(r.ctx, id)
		if mj == nil {
			if !errors.Is(err, ErrJobNotFound) {
				r.fail("GetJob(%s) = %+v, %v; want ErrJobNotFound", id, got, err)
			}
			continue
		}
		if err != nil {
			r.fail("GetJob(%s): %v; model has it %s", id, err, mj.describe(now))
		}
		if d := diffJob(got, mj, now); d != "" {
			r.fail("GetJob(%s): %s", id, d)
		}
	}
	for _, qn := range append(slices.Clone(mQueues), "nosuch") {
		r.checkQueue(qn, now)
	}
	r.checkKV()
	r.checkLeases()
	if err := checkPayloadKeys(r.ctx, r.q.be.(*local)); err != nil {
		r.fail("%v", err)
	}
}

// checkLeases compares the process side of every claim handle (what
// ClaimContext watches) with the model: a live claim is not lost and is
// cancelled exactly when a cancel was requested; any other is lost.
func (r *modelRun) checkLeases() {
	for _, h := range r.handles {
		// A watch registered now is told at once what happened already.
		var lost, cancel bool
		w := &claimWatch{id: h.job.ID, token: h.job.token, tell: func(cause error) {
			if errors.Is(cause, ErrJobCancelled) {
				cancel = true
			} else {
				lost = true
			}
		}}
		r.q.be.watch(w)
		r.q.be.unwatch(w)
		j := r.m.valid(h)
		switch {
		case j == nil && !lost:
			r.fail("claim %s#%d is stale but its lease is not lost", h.job.ID, h.claim)
		case j != nil && lost:
			r.fail("claim %s#%d is live but its lease is lost", h.job.ID, h.claim)
		case j != nil && cancel != j.cancelReq:
			r.fail("claim %s#%d: cancel signalled %v, want %v", h.job.ID, h.claim, cancel, j.cancelReq)
		}
	}
}

func (j *mJob) describe(now time.Time) string {
	return fmt.Sprintf("{%s %s state=%v runAt=%s attempts=%d/%d prio=%d order=%d dedup=%q}", j.id, j.queue, j.expState(now), fmtTime(j.runAt), j.attempts, j.maxAttempts, j.prio, j.order, j.dedup)
}

func (j *mJob) expState(now time.Time) State {
	switch j.state {
	case mPending:
		runAt := j.runAt
		if !j.pinned {
			// Retried by backoff in this transaction: due within [runLo,
			// runHi], and runLo is at least half the backoff base from now.
			runAt = j.runLo
		}
		if runAt.After(now) {
			return JobScheduled
		}
		return JobPending
	case mClaimed:
		return JobClaimed
	}
	return JobDead
}

func diffJob(got *Job, j *mJob, now time.Time) string {
	var d []string
	ne := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.ID != j.id {
		ne("ID", got.ID, j.id)
	}
	if got.State != j.expState(now) {
		ne("State", got.State, j.expState(now))
	}
	if got.Queue != j.queue {
		ne("Queue", got.Queue, j.queue)
	}
	if !bytes.Equal(got.Payload, j.payload) {
		ne("Payload", short(got.Payload), short(j.payload))
	}
	if got.Priority != j.prio {
		ne("Priority", got.Priority, j.prio)
	}
	if got.DedupKey != j.dedup {
		ne("DedupKey", got.DedupKey, j.dedup)
	}
	if got.Attempt != j.attempts {
		ne("Attempt", got.Attempt, j.attempts)
	}
	if got.MaxAttempts != j.maxAttempts {
		ne("MaxAttempts", got.MaxAttempts, j.maxAttempts)
	}
	if !got.EnqueuedAt.Equal(j.enqueuedAt) {
		ne("EnqueuedAt", fmtTime(got.EnqueuedAt), fmtTime(j.enqueuedAt))
	}
	if j.pinned && !got.RunAt.Equal(j.runAt) {
		ne("RunAt", fmtTime(got.RunAt), fmtTime(j.runAt))
	}
	if got.CancelRequested != j.cancelReq {
		ne("CancelRequested", got.CancelRequested, j.cancelReq)
	}
	if len(got.Headers) != len(j.headers) || !maps.Equal(got.Headers, j.headers) && len(j.headers) > 0 {
		ne("Headers", got.Headers, j.headers)
	}
	var hist []string
	for _, h := range got.History {
		hist = append(hist, h.Error)
	}
	if !slices.Equal(hist, j.history) {
		ne("History", hist, j.history)
	}
	if len(d) == 0 {
		return ""
	}
	return strings.Join(d, "; ") + " (model " + j.describe(now) + ")"
}

func (r *modelRun) checkQueue(qn string, now time.Time) {
	var want Stats
	var oldest *mJob
	var dead []*mJob
	for _, id := range r.m.sortedIDs() {
		j := r.m.jobs[id]
		if j.queue != qn {
			continue
		}
		switch j.expState(now) {
		case JobPending:
			want.Pending++
			if oldest == nil || j.order < oldest.order {
				oldest = j
			}
		case JobScheduled:
			want.Scheduled++
		case JobClaimed:
			want.Claimed++
		case JobDead:
			want.Dead++
			dead = append(dead, j)
		}
	}
	if oldest != nil {
		since := oldest.enqueuedAt
		if oldest.runAt.After(since) {
			since = oldest.runAt
		}
		want.OldestPendingAge = max(now.Sub(since), 0)
	}
	got, err := r.q.Stats(r.ctx, qn)
	if err != nil || got != want {
		r.fail("Stats(%s) = %+v, %v; want %+v", qn, got, err, want)
	}
	// Dead jobs: oldest death first, ties by ID.
	sort.Slice(dead, func(a, b int) bool {
		if !dead[a].updatedAt.Equal(dead[b].updatedAt) {
			return dead[a].updatedAt.Before(dead[b].updatedAt)
		}
		return dead[a].id < dead[b].id
	})
	var wantIDs, gotIDs []string
	for _, j := range dead {
		wantIDs = append(wantIDs, j.id)
	}
	cursor := ""
	for pages := 0; ; pages++ {
		page, err := r.q.DeadJobs(r.ctx, qn, cursor, 2)
		if err != nil || pages > len(wantIDs)+1 {
			r.fail("DeadJobs(%s): %v (page %d)", qn, err, pages)
		}
		for _, j := range page.Jobs {
			gotIDs = append(gotIDs, j.ID)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if !slices.Equal(gotIDs, wantIDs) {
		r.fail("DeadJobs(%s) = %v, want %v", qn, gotIDs, wantIDs)
	}
}

func (r *modelRun) checkKV() {
	var want []string
	for k, v := range r.m.kv {
		want = append(want, k+"="+string(v))
	}
	sort.Strings(want)
	var got []string
	var after []byte
	for pages := 0; ; pages++ {
		page, err := r.q.Scan(r.ctx, nil, ScanOptions{After: after, Limit: 2})
		if err != nil || pages > len(want)+1 {
			r.fail("Scan: %v (page %d)", err, pages)
		}
		for _, kv := range page.Items {
			got = append(got, string(kv.Key)+"="+string(kv.Value))
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	if !slices.Equal(got, want) {
		r.fail("Scan = %v\nwant %v", shortKV(got), shortKV(want))
	}
	for _, k := range mKVKeys {
		v, err := r.q.Get(r.ctx, []byte(k))
		w, ok := r.m.kv[k]
		if !ok && !errors.Is(err, ErrKeyNotFound) || ok && (err != nil || !bytes.Equal(v, w)) {
			r.fail("Get(%s) = %s, %v; want %s (present %v)", k, short(v), err, short(w), ok)
		}
	}
}

func shortKV(items []string) []string {
	out := make([]string, len(items))
	for i, s := range items {
		if len(s) > 20 {
			s = s[:16] + fmt.Sprintf("..(%d)", len(s))
		}
		out[i] = s
	}
	return out
}

// ---- random operations ----

func (r *modelRun) pick(xs []string) string { return xs[r.rng.IntN(len(xs))] }

func (r *modelRun) randPayload() []byte {
	if r.rng.IntN(10) == 0 {
		return bytes.Repeat([]byte{byte('A' + r.rng.IntN(26))}, mLargeValue+1+r.rng.IntN(500)) // a blob
	}
	return []byte(strconv.Itoa(r.rng.IntN(1000)))
}

func (r *modelRun) randValue() []byte {
	switch r.rng.IntN(10) {
	case 0:
		return []byte{}
	case 1:
		return bytes.Repeat([]byte{byte('a' + r.rng.IntN(26))}, mLargeValue+1+r.rng.IntN(200))
	}
	return []byte("v" + strconv.Itoa(r.rng.IntN(50)))
}

func (r *modelRun) randEnqueue() EnqueueRequest {
	o := EnqueueOptions{
		Priority:    mPrios[r.rng.IntN(len(mPrios))],
		DedupKey:    r.pick(mDedups),
		MaxAttempts: uint32(r.rng.IntN(4)), // 0: the queue's limit
		Headers:     mHeaders[r.rng.IntN(len(mHeaders))],
	}
	switch r.rng.IntN(6) {
	case 0:
		o.Delay = time.Duration(1+r.rng.IntN(5000)) * time.Millisecond
	case 1:
		o.RunAt = r.now().Add(time.Duration(r.rng.IntN(20000)-10000) * time.Millisecond)
	}
	if r.rng.IntN(10) == 0 {
		o.JobID = r.pick(mJobIDs)
	}
	if r.rng.IntN(4) == 0 {
		o.DeadLetterQueue = "qb" // notices mix with qb's own jobs
	}
	o.claim = r.rng.IntN(4) == 0
	return EnqueueRequest{Queue: r.pick(mQueues), Payload: r.randPayload(), Options: o}
}

// randHandle returns a claim handle: usually one the model says is live,
// sometimes any (possibly stale) one.
func (r *modelRun) randHandle() *mHandle {
	var live []*mHandle
	for _, h := range r.handles {
		if r.m.valid(h) != nil {
			live = append(live, h)
		}
	}
	if len(live) > 0 && r.rng.IntN(5) != 0 {
		return live[r.rng.IntN(len(live))]
	}
	if len(r.handles) == 0 {
		return nil
	}
	return r.handles[r.rng.IntN(len(r.handles))]
}

func (r *modelRun) randRetryAfter() time.Duration {
	if r.rng.IntN(2) == 0 {
		return 0 // backoff
	}
	return time.Duration(1+r.rng.IntN(3000)) * time.Millisecond
}

// randJobID returns the ID of a job in a random state (or an unknown ID).
func (r *modelRun) randJobID() string {
	var byState [4][]string // pending, claimed, dead, gone
	for _, id := range r.known {
		if j := r.m.jobs[id]; j != nil {
			byState[j.state-1] = append(byState[j.state-1], id)
		} else {
			byState[3] = append(byState[3], id)
		}
	}
	for range 4 {
		if s := byState[r.rng.IntN(4)]; len(s) > 0 {
			return s[r.rng.IntN(len(s))]
		}
	}
	return fmt.Sprintf("unknown-%d", r.rng.IntN(100))
}

func (r *modelRun) settleOp(h *mHandle) mOp {
	switch r.rng.IntN(5) {
	case 4:
		return mOp{kind: mRelease, h: h}
	case 0, 1:
		return mOp{kind: mAck, h: h}
	case 2:
		return mOp{kind: mNack, h: h, retryAfter: r.randRetryAfter(), reason: fmt.Sprintf("boom %d", r.rng.IntN(100))}
	}
	return mOp{kind: mDeadLetter, h: h, reason: fmt.Sprintf("poison %d", r.rng.IntN(100))}
}

// casOp is a compare-and-put whose condition holds when right is true.
func (r *modelRun) casOp(right bool) mOp {
	k := r.pick(mKVKeys)
	cur, ok := r.m.kv[k]
	o := mOp{kind: mCAS, key: k, val: r.randValue()}
	switch {
	case right && ok:
		o.old = bytes.Clone(cur)
		if o.old == nil {
			o.old = []byte{} // present and empty: matched by a non-nil empty slice
		}
	case right:
		o.old = nil
	case ok && r.rng.IntN(2) == 0:
		o.old = nil // must be absent, but is present
	case ok:
		o.old = append(bytes.Clone(cur), 'X')
	default:
		o.old = []byte("v" + strconv.Itoa(r.rng.IntN(50))) // absent
	}
	return o
}

// cadOp is a compare-and-delete whose condition holds when right is true.
func (r *modelRun) cadOp(right bool) mOp {
	k := r.pick(mKVKeys)
	cur, ok := r.m.kv[k]
	o := mOp{kind: mCAD, key: k}
	switch {
	case right && ok:
		o.old = bytes.Clone(cur)
	case ok:
		o.old = append(bytes.Clone(cur), 'X')
	default:
		o.old = []byte("v" + strconv.Itoa(r.rng.IntN(50))) // absent
	}
	return o
}

func (r *modelRun) kvOp() mOp {
	switch r.rng.IntN(4) {
	case 0:
		return mOp{kind: mPut, key: r.pick(mKVKeys), val: r.randValue()}
	case 1:
		return mOp{kind: mDel, key: r.pick(mKVKeys)}
	case 2:
		return r.cadOp(r.rng.IntN(3) != 0)
	}
	return r.casOp(r.rng.IntN(3) != 0)
}

func (r *modelRun) doClaim() {
	qn := r.pick(mQueues)
	n := 1
	if r.rng.IntN(3) == 0 {
		n = 1 + r.rng.IntN(3)
	}
	var jobs []*Job
	var err error
	if n == 1 && r.rng.IntN(2) == 0 {
		var j *Job
		if j, err = r.q.claimOne(r.ctx, qn); j != nil {
			jobs = []*Job{j}
		}
	} else {
		jobs, err = r.q.claimBatch(r.ctx, qn, n)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	r.logf("ClaimBatch(%s, %d) = %v, %v", qn, n, ids, err)
	if err != nil {
		r.fail("ClaimBatch: %v", err)
	}
	now := r.now()
	want := r.m.claim(qn, n, now)
	var wantIDs []string
	for _, j := range want {
		wantIDs = append(wantIDs, j.id)
	}
	if !slices.Equal(ids, wantIDs) {
		r.fail("ClaimBatch(%s, %d) = %v, want %v", qn, n, ids, wantIDs)
	}
	for i, j := range jobs {
		if d := diffJob(j, want[i], now); d != "" {
			r.fail("claimed job: %s", d)
		}
		r.addHandle(j, want[i].claim)
	}
	r.stats["claimed"] += len(jobs)
}

// addHandle keeps a claim handle; the pool stays small: stale handles
// beyond 24 are dropped.
func (r *modelRun) addHandle(j *Job, claim uint64) *mHandle {
	h := &mHandle{job: j, claim: claim}
	r.handles = append(r.handles, h)
	for len(r.handles) > 24 {
		drop := -1
		for i, h := range r.handles {
			if r.m.valid(h) == nil {
				drop = i
				break
			}
		}
		if drop < 0 {
			break
		}
		r.handles = slices.Delete(r.handles, drop, drop+1)
	}
	return h
}

func (r *modelRun) advance(d time.Duration, why string) {
	r.logf("Advance(%v) %s; reapNow", d, why)
	r.clk.Advance(d)
	// Reap at once: the background reaper may also run at any moment, and
	// either way every expired lease must be reaped before the next step.
	if err := r.q.reapNow(); err != nil {
		r.fail("reapNow: %v", err)
	}
	r.m.reap(r.now())
}

func (r *modelRun) doAdvance() {
	now := r.now()
	switch r.rng.IntN(5) {
	case 0, 1:
		r.advance(time.Duration(r.rng.IntN(2000))*time.Millisecond, "small")
	case 2:
		r.advance(time.Duration(10+r.rng.IntN(170))*time.Second, "large")
	case 3: // exactly to (or just before) the next lease expiry
		var next time.Time
		for _, j := range r.m.jobs {
			if j.state == mClaimed && (next.IsZero() || j.leaseExp.Before(next)) {
				next = j.leaseExp
			}
		}
		if next.IsZero() {
			r.advance(time.Second, "no lease")
			return
		}
		d := next.Sub(now) - time.Duration(r.rng.IntN(2))
		r.advance(max(d, 0), "to lease expiry")
	case 4: // exactly to (or just before) the next due time
		var next time.Time
		for _, j := range r.m.jobs {
			if j.state == mPending && j.runAt.After(now) && (next.IsZero() || j.runAt.Before(next)) {
				next = j.runAt
			}
		}
		if next.IsZero() {
			r.advance(time.Second, "nothing scheduled")
			return
		}
		d := next.Sub(now) - time.Duration(r.rng.IntN(2))
		r.advance(max(d, 0), "to due time")
	}
}

// doExpireAndTouch lets a claim's lease expire and, before reaping, tries
// to renew or settle it: an expired lease is lost even before the reaper
// has requeued the job (the background reaper may or may not have run; the
// outcome is the same).
func (r *modelRun) doExpireAndTouch() {
	var claimed []*mHandle
	for _, h := range r.handles {
		if r.m.valid(h) != nil {
			claimed = append(claimed, h)
		}
	}
	if len(claimed) == 0 {
		r.doClaim()
		return
	}
	h := claimed[r.rng.IntN(len(claimed))]
	j := r.m.valid(h)
	d := j.leaseExp.Sub(r.now()) + time.Duration(r.rng.IntN(2))*time.Millisecond
	r.clk.Advance(d)
	var err error
	var what string
	switch r.rng.IntN(5) {
	case 0:
		what, err = "Renew", r.q.renew(h.job)
	case 1:
		what, err = "Ack", r.q.Ack(r.ctx, h.job)
	case 2:
		what, err = "Nack", r.q.Nack(r.ctx, h.job, errors.New("late"), 0)
	case 3:
		what, err = "Release", r.q.release(r.ctx, h.job)
	default:
		what, err = "DeadLetter", r.q.DeadLetter(r.ctx, h.job, "late")
	}
	r.logf("Advance(%v) to the lease expiry of %s#%d; %s = %v; reapNow", d, h.job.ID, h.claim, what, err)
	if !IsClaimLost(err) {
		r.fail("%s of a claim whose lease expired %v ago = %v, want claim lost", what, r.now().Sub(j.leaseExp), err)
	}
	if err := r.q.reapNow(); err != nil {
		r.fail("reapNow: %v", err)
	}
	r.m.reap(r.now())
}

func (r *modelRun) doRenew() {
	h := r.randHandle()
	if h == nil {
		return
	}
	err := r.q.renew(h.job)
	r.logf("Renew(%s#%d) = %v", h.job.ID, h.claim, err)
	j := r.m.valid(h)
	switch {
	case j == nil && !IsClaimLost(err):
		r.fail("Renew of a lost claim = %v, want claim lost", err)
	case j != nil && err != nil:
		r.fail("Renew of a live claim = %v", err)
	case j != nil:
		j.leaseExp = r.now().Add(modelCfg(j.queue).lease)
	}
}

func (r *modelRun) doRequeueDead() {
	id := r.randJobID()
	err := r.q.RequeueDead(r.ctx, id)
	r.logf("RequeueDead(%s) = %v", id, err)
	j := r.m.jobs[id]
	switch {
	case j == nil:
		if !errors.Is(err, ErrJobNotFound) {
			r.fail("RequeueDead(unknown %s) = %v", id, err)
		}
	case j.state != mDead:
		if !errors.Is(err, ErrNotDead) {
			r.fail("RequeueDead(%s, not dead) = %v", id, err)
		}
	default:
		if err != nil {
			r.fail("RequeueDead(%s) = %v", id, err)
		}
		j.state, j.attempts, j.runAt, j.pinned, j.updatedAt = mPending, 0, r.now(), true, r.now()
		j.cancelReq = false // a fresh start
	}
}

func (r *modelRun) doReopen() {
	r.logf("Reopen")
	if err := r.q.Close(r.ctx); err != nil {
		r.fail("Close: %v", err)
	}
	r.open()
	r.m.reopen(r.now())
	// Every handle of the old process is stale now; keep a few to try.
	if len(r.handles) > 4 {
		r.handles = r.handles[len(r.handles)-4:]
	}
	r.stats["reopen"]++
}

func (r *modelRun) stepOnce() {
	switch w := r.rng.IntN(108); {
	case w < 16:
		req := r.randEnqueue()
		o := mOp{kind: mEnq, req: req}
		r.logf("%v", o)
		r.commit([]mOp{o}, "single")
	case w < 21:
		n := 1 + r.rng.IntN(4)
		ops := make([]mOp, n)
		for i := range ops {
			ops[i] = mOp{kind: mEnq, req: r.randEnqueue()}
		}
		r.logf("EnqueueBatch %v", ops)
		r.commit(ops, "batch")
	case w < 38:
		r.doClaim()
	case w < 52:
		h := r.randHandle()
		if h == nil {
			r.doClaim()
			return
		}
		o := r.settleOp(h)
		r.logf("%v", o)
		r.commit([]mOp{o}, "single")
	case w < 57:
		o := mOp{kind: mCancel, id: r.randJobID()}
		r.logf("%v", o)
		r.commit([]mOp{o}, "single")
	case w < 61:
		r.doRenew()
	case w < 69:
		r.doAdvance()
	case w < 71:
		r.doExpireAndTouch()
	case w < 73:
		r.logf("reapNow")
		if err := r.q.reapNow(); err != nil {
			r.fail("reapNow: %v", err)
		}
		r.m.reap(r.now())
	case w < 76:
		r.doRequeueDead()
	case w < 86:
		o := r.kvOp()
		r.logf("%v", o)
		r.commit([]mOp{o}, "single")
	case w < 97:
		r.doTxn()
	case w < 98:
		r.doReopen()
	case w < 103:
		r.doChain()
	default:
		r.doWork()
	}
}

// chainOps returns what a handler that chains follow-up work to itself
// commits (as the workflow runtime does): usually a settlement of h, and
// an enqueue asking for Claim in h's queue, mostly due at once with h's
// priority; sometimes a KV write; in random order.
func (r *modelRun) chainOps(h *mHandle, settle bool) []mOp {
	var ops []mOp
	if settle {
		ops = append(ops, r.settleOp(h))
	}
	req := r.randEnqueue()
	req.Queue, req.Options.claim = h.job.Queue, true
	if r.rng.IntN(3) != 0 {
		req.Options.Priority, req.Options.Delay, req.Options.RunAt = h.job.Priority, 0, time.Time{}
	}
	ops = append(ops, mOp{kind: mEnq, req: req})
	if r.rng.IntN(3) == 0 {
		ops = append(ops, mOp{kind: mPut, key: r.pick(mKVKeys), val: r.randValue()})
	}
	r.rng.Shuffle(len(ops), func(a, b int) { ops[a], ops[b] = ops[b], ops[a] })
	return ops
}

// doChain commits chainOps outside a worker.
func (r *modelRun) doChain() {
	h := r.randHandle()
	if h == nil {
		r.doClaim()
		return
	}
	ops := r.chainOps(h, r.rng.IntN(5) != 0)
	r.logf("Chain %v", ops)
	r.commit(ops, "chain")
}

func (m *model) anyReady(queue string, now time.Time) bool {
	for _, j := range m.jobs {
		if j.queue == queue && j.ready(now) {
			return true
		}
	}
	return false
}

// doWork runs Work (concurrency 1) on a queue that has a claimable job, for
// a few handler calls, with the clock standing still. Each call hands
// control to this goroutine, which commits what a chaining handler would
// (a settlement, an enqueue with Claim, sometimes one in the other queue),
// hands the claimed job off, and chooses what the handler returns. The
// model predicts each call's job: the one handed off, else the next
// claimable one (after Work's own settlement unless ManualSettle). The
// last call stops the worker, sometimes after a Handoff: the stopping
// worker must release that job (pending again, the attempt not counted).
func (r *modelRun) doWork() {
	qn := r.pick(mQueues)
	if !r.m.anyReady(qn, r.now()) {
		r.doClaim()
		return
	}
	manual := r.rng.IntN(2) == 0
	calls := 1 + r.rng.IntN(5)
	type call struct {
		ctx context.Context
		job *Job
		ret chan error
	}
	callc := make(chan call)
	quit := make(chan struct{})
	wctx, stop := context.WithCancel(r.ctx)
	defer func() { stop(); close(quit) }() // also when the test fails
	done := make(chan error, 1)
	go func() {
		done <- r.q.Work(wctx, qn, func(ctx context.Context, j *Job) error {
			c := call{ctx, j, make(chan error, 1)}
			select {
			case callc <- c:
			case <-quit:
				return nil
			}
			select {
			case err := <-c.ret:
				return err
			case <-quit:
				return nil
			}
		}, WorkOptions{Concurrency: 1, manualSettle: manual})
	}()
	r.logf("Work(%s, manual=%v) for %d calls", qn, manual, calls)
	var handedOff *Job // the job handed off by the last call
	for i := 0; ; i++ {
		var c call
		select {
		case c = <-callc:
		case err := <-done:
			r.fail("Work returned %v before its call %d", err, i)
		case <-time.After(20 * time.Second):
			r.fail("Work did not make its call %d within 20s", i)
		}
		now := r.now()
		// Work has settled the last call's job (its dead-letter notices
		// are in the store now) and claimed this one.
		r.discover()
		var want *mJob
		if handedOff != nil {
			want = r.m.jobs[handedOff.ID]
		} else {
			want = r.m.claim(qn, 1, now)[0]
		}
		if c.job.ID != want.id {
			r.fail("Work ran job %s, want %s (%s)", c.job.ID, want.id, want.describe(now))
		}
		if d := diffJob(c.job, want, now); d != "" {
			r.fail("job run by Work: %s", d)
		}
		if handedOff != nil && c.job != handedOff {
			r.fail("Work ran a copy of the handed-off job %s", c.job.ID)
		}
		h := r.addHandle(c.job, want.claim)
		r.stats["work-calls"]++
		last := i == calls-1
		var ops []mOp
		if manual && r.rng.IntN(5) != 0 || !manual && r.rng.IntN(5) == 0 {
			ops = append(ops, r.settleOp(h))
		}
		if r.rng.IntN(4) != 0 {
			ops = r.chainOps(h, len(ops) > 0)
		}
		other := "qa"
		if qn == "qa" {
			other = "qb"
		}
		if r.rng.IntN(5) == 0 {
			ops = append(ops, mOp{kind: mEnq, req: EnqueueRequest{Queue: other, Payload: r.randPayload(), Options: EnqueueOptions{claim: true}}})
		}
		handedOff = nil
		if len(ops) > 0 {
			r.logf("Work call %d (job %s): Txn %v", i, c.job.ID, ops)
			res := r.commit(ops, "work")
			r.discover()
			k := 0
			for _, o := range ops {
				if o.kind != mEnq || len(res.Enqueued) == 0 { // or the transaction failed
					continue
				}
				e := res.Enqueued[k]
				k++
				if e.claimed == nil {
					continue
				}
				ok := handoff.Give(c.ctx, e.claimed.Queue, e.claimed, nil)
				switch {
				case o.req.Queue != qn && ok:
					r.fail("Handoff of job %s of queue %s to a worker of %s = true, want false", e.JobID, o.req.Queue, qn)
				case o.req.Queue == qn && !ok:
					r.fail("Handoff of job %s = false, want true", e.JobID)
				case ok:
					handedOff = e.claimed
					if handoff.Give(c.ctx, e.claimed.Queue, e.claimed, nil) {
						r.fail("a second Handoff of one call = true, want false")
					}
					r.stats["handoffs"]++
				}
			}
		}
		var ret error
		if !manual {
			switch r.rng.IntN(5) {
			case 0:
				ret = fmt.Errorf("fail %d", r.rng.IntN(100))
			case 1:
				ret = Permanent(fmt.Errorf("poison %d", r.rng.IntN(100)))
			}
			// What Work does with the handler's return.
			var o mOp
			switch {
			case c.job.CancelRequested || ret == nil:
				o = mOp{kind: mAck, h: h}
			case IsPermanent(ret):
				o = mOp{kind: mDeadLetter, h: h, reason: ret.Error()}
			default:
				o = mOp{kind: mNack, h: h, reason: ret.Error()}
			}
			next, e, _ := r.m.applyTxn([]mOp{o}, TxnResult{}, now)
			switch e {
			case mOK:
				r.m = next
			case mClaimLost: // settled by the handler
			default:
				r.fail("model: Work's %v = %v", o, e)
			}
		}
		stopping := last || handedOff == nil && !r.m.anyReady(qn, now)
		r.logf("Work call %d returns %v; handoff %v; stopping %v", i, ret, handedOff != nil, stopping)
		if stopping {
			stop()
		}
		c.ret <- ret
		if stopping {
			select {
			case err := <-done:
				if err != nil {
					r.fail("Work = %v", err)
				}
			case <-time.After(20 * time.Second):
				r.fail("Work did not return within 20s of its ctx being done")
			}
			if handedOff != nil {
				// Released by the stopping worker.
				j := r.m.jobs[handedOff.ID]
				if j == nil || j.state != mClaimed {
					r.fail("model: handed-off job %s is %v", handedOff.ID, j)
				}
				r.m.release(j, now)
				r.stats["work-released"]++
			}
			return
		}
	}
}

// doTxn commits a mixed transaction: settlements, enqueues, KV writes,
// cancellations and job-state conditions; about a third of them carry a
// failing compare-and-put, and others fail on a lost claim or an unmet job
// state: those must change nothing.
func (r *modelRun) doTxn() {
	fail := r.rng.IntN(3) == 0
	n := 2 + r.rng.IntN(4)
	var ops []mOp
	for range n {
		switch r.rng.IntN(6) {
		case 5:
			var states []State
			for _, s := range []State{JobPending, JobScheduled, JobClaimed, JobDead} {
				if r.rng.IntN(2) == 0 {
					states = append(states, s)
				}
			}
			ops = append(ops, mOp{kind: mRequire, id: r.randJobID(), states: states})
		case 0:
			if h := r.randHandle(); h != nil {
				ops = append(ops, r.settleOp(h))
				continue
			}
			fallthrough
		case 1:
			ops = append(ops, mOp{kind: mEnq, req: r.randEnqueue()})
		case 2:
			ops = append(ops, mOp{kind: mCancel, id: r.randJobID()})
		case 3:
			ops = append(ops, mOp{kind: mPut, key: r.pick(mKVKeys), val: r.randValue()})
		case 4:
			switch r.rng.IntN(3) {
			case 0:
				ops = append(ops, mOp{kind: mDel, key: r.pick(mKVKeys)})
			case 1:
				ops = append(ops, r.cadOp(true))
			default:
				ops = append(ops, r.casOp(true)) // may still fail after an earlier op of this txn wrote the key
			}
		}
	}
	if fail {
		at := r.rng.IntN(len(ops) + 1)
		ops = slices.Insert(ops, at, r.casOp(false))
	}
	r.logf("Txn %v", ops)
	r.commit(ops, "txn")
}

func runModel(t *testing.T, url string, seed uint64, nops int) {
	clk := newFakeClock()
	r := &modelRun{
		t: t, ctx: context.Background(), rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		clk: clk, url: url, m: newModel(), knownOK: map[string]bool{}, stats: map[string]int{},
	}
	r.open()
	t.Cleanup(func() { r.q.Close(context.Background()) })
	r.check()
	for r.step = 1; r.step <= nops; r.step++ {
		r.stepOnce()
		r.check()
	}
	var states [3]int
	for _, j := range r.m.jobs {
		states[j.state-1]++
	}
	t.Logf("seed %d: %d ops, %d jobs seen, at the end %d pending, %d claimed, %d dead, %d KV keys; %v",
		seed, nops, len(r.known), states[0], states[1], states[2], len(r.m.kv), r.stats)
}

// modelSeeds returns the seeds to run: STEPWELL_MODEL_SEED alone, the range
// STEPWELL_MODEL_SEEDS, or fixed seeds plus fresh random ones.
func modelSeeds(t *testing.T, fixed []uint64, random int) []uint64 {
	if s := os.Getenv("STEPWELL_MODEL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STEPWELL_MODEL_SEED=%q: %v", s, err)
		}
		return []uint64{seed}
	}
	if s := os.Getenv("STEPWELL_MODEL_SEEDS"); s != "" {
		a, b, ok := strings.Cut(s, "-")
		from, err1 := strconv.ParseUint(a, 10, 64)
		to, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || to < from {
			t.Fatalf("STEPWELL_MODEL_SEEDS=%q: want <from>-<to>", s)
		}
		var seeds []uint64
		for seed := from; seed <= to; seed++ {
			seeds = append(seeds, seed)
		}
		return seeds
	}
	seeds := slices.Clone(fixed)
	for range random {
		seeds = append(seeds, rand.Uint64()%1_000_000_000)
	}
	return seeds
}

func modelOps(t *testing.T, def int) int {
	if s := os.Getenv("STEPWELL_MODEL_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("STEPWELL_MODEL_OPS=%q: want a positive number", s)
		}
		return n
	}
	return def
}

func TestModelMem(t *testing.T) {
	nops := modelOps(t, 300)
	for _, seed := range modelSeeds(t, []uint64{1, 2, 3, 4}, 2) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("replay: STEPWELL_MODEL_SEED=%d go test -run 'TestModelMem' ./queue/", seed)
			runModel(t, testenv.MemURL(t.Name()), seed, nops)
		})
	}
}

func TestModelFile(t *testing.T) {
	nops := modelOps(t, 150)
	for _, seed := range modelSeeds(t, []uint64{101}, 1) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("replay: STEPWELL_MODEL_SEED=%d go test -run 'TestModelFile' ./queue/", seed)
			runModel(t, "file://"+t.TempDir(), seed, nops)
		})
	}
}

// ---- focused cases found by (or written next to) the model ----

// TestModelDedupWithSeveralHolders: a dedup key can be held by two pending
// jobs at once (a job with the key is enqueued while another is claimed,
// and that one then becomes pending again). Removing one holder must leave
// the key held by the other. Found by the model: the index kept one holder
// per key and forgot the key when either left, through each path below.
func TestModelDedupWithSeveralHolders(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// back makes claimed job a pending again (with c pending meanwhile)
		// and returns the queue to use afterwards.
		back func(t *testing.T, q *Queue, clk *fakeClock, url string, a *Job) *Queue
	}{
		{"retry", func(t *testing.T, q *Queue, clk *fakeClock, url string, a *Job) *Queue {
			if err := q.Nack(ctx, a, errors.New("x"), time.Millisecond); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Millisecond)
			return q
		}},
		{"lease-expiry", func(t *testing.T, q *Queue, clk *fakeClock, url string, a *Job) *Queue {
			clk.Advance(time.Hour)
			if err := q.reapNow(); err != nil {
				t.Fatal(err)
			}
			return q
		}},
		{"requeue-dead", func(t *testing.T, q *Queue, clk *fakeClock, url string, a *Job) *Queue {
			if err := q.DeadLetter(ctx, a, "x"); err != nil {
				t.Fatal(err)
			}
			if err := q.RequeueDead(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			return q
		}},
		{"reopen", func(t *testing.T, q *Queue, clk *fakeClock, url string, a *Job) *Queue {
			q.Close(ctx)
			return openT(t, url, modelOptions(clk)...)
		}},
		{"rolled-back-retry", func(t *testing.T, q *Queue, clk *fakeClock, url string, a *Job) *Queue {
			// A transaction that fails must leave the dedup index as it was;
			// here its Nack made a a holder and its rollback removed it.
			bad := new(Txn).Nack(a, errors.New("x"), time.Millisecond).CompareAndPut([]byte("k"), []byte("wrong"), []byte("v"))
			if _, err := q.Commit(ctx, bad); !errors.Is(err, ErrConditionFailed) {
				t.Fatalf("Commit = %v, want condition failed", err)
			}
			if err := q.Ack(ctx, a); err != nil { // a leaves for good
				t.Fatal(err)
			}
			return q
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			url := testenv.MemURL(t.Name())
			q := openT(t, url, modelOptions(clk)...)
			opts := EnqueueOptions{DedupKey: "k", MaxAttempts: 3}
			a := mustEnqueue(t, q, "qa", "a", opts)
			ja := mustClaim(t, q, "qa")
			c := mustEnqueue(t, q, "qa", "c", opts)
			if c.Duplicate {
				t.Fatalf("enqueue while the holder is claimed = %+v, want a new job", c)
			}
			q = tc.back(t, q, clk, url, ja)
			// a (if back) and c hold the key now; claim a, the older one,
			// once any backoff has passed.
			want := []string{c.JobID}
			if j, err := q.GetJob(ctx, a.JobID); err == nil && (j.State == JobPending || j.State == JobScheduled) {
				want = append(want, a.JobID)
				clk.Advance(time.Minute)
				if got := mustClaim(t, q, "qa"); got == nil || got.ID != a.JobID {
					t.Fatalf("claimed %+v, want %s", got, a.JobID)
				}
			}
			r := mustEnqueue(t, q, "qa", "d", opts)
			if !r.Duplicate || r.JobID != c.JobID {
				t.Fatalf("enqueue with key k while job %s is pending with it = %+v, want a duplicate of it (holders were %v)", c.JobID, r, want)
			}
		})
	}
}

// TestModelRenewAfterLeaseExpiry: Renew is documented to fail with a
// *ClaimLostError "if the lease already expired". It used to fail only once
// the reaper had run, reviving an expired lease until then.
func TestModelRenewAfterLeaseExpiry(t *testing.T) {
	q, clk := openJobs(t)
	mustEnqueue(t, q, "q", "a", EnqueueOptions{})
	j := mustClaim(t, q, "q")
	clk.Advance(31 * time.Second) // the lease is 30s; the reaper has not run
	if err := q.renew(j); !IsClaimLost(err) {
		t.Fatalf("Renew 1s after the lease expired = %v, want a *ClaimLostError (as documented)", err)
	}
}

// TestModelRequeueDeadClearsCancelRequest: a cancel request made while a
// job was claimed stays on the record when the job is dead-lettered.
// RequeueDead used to keep it: the requeued job was claimed with
// CancelRequested set, and Work acked it after one run whatever the handler
// returned, so the operator's requeue got one attempt, not a fresh budget.
func TestModelRequeueDeadClearsCancelRequest(t *testing.T) {
	ctx := context.Background()
	q, _ := openJobs(t)
	a := mustEnqueue(t, q, "q", "a", EnqueueOptions{})
	j := mustClaim(t, q, "q")
	if c, err := q.CancelJob(ctx, a.JobID); err != nil || c != CancelRequested {
		t.Fatalf("CancelJob = %v, %v", c, err)
	}
	if err := q.DeadLetter(ctx, j, "gave up"); err != nil {
		t.Fatal(err)
	}
	if err := q.RequeueDead(ctx, a.JobID); err != nil {
		t.Fatal(err)
	}
	got, err := q.GetJob(ctx, a.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CancelRequested {
		// Show what a worker does with it.
		wctx, cancel := context.WithCancel(ctx)
		ran := make(chan struct{}, 1)
		done := make(chan error)
		go func() {
			done <- q.Work(wctx, "q", func(context.Context, *Job) error {
				ran <- struct{}{}
				return errors.New("transient failure")
			}, WorkOptions{})
		}()
		<-ran
		cancel()
		<-done
		after, err := q.GetJob(ctx, a.JobID)
		t.Fatalf("a requeued dead job still has CancelRequested set; after one failed run under Work it is %v, %v (want pending for a retry: RequeueDead promises a fresh attempt budget)", stateOf(after), err)
	}
}

func stateOf(j *Job) string {
	if j == nil {
		return "gone"
	}
	return fmt.Sprintf("%v (attempt %d)", j.State, j.Attempt)
}

// TestModelCancelRequestSurvivesRestart: a cancel request on a claimed job
// is durable. If the claim is lost to lease expiry, the requeued job keeps
// it; requeueClaimed used to clear it when the claim was lost to a restart,
// so the job ran again as if never cancelled. The next claim must see the
// request at once (ClaimContext done with ErrJobCancelled).
func TestModelCancelRequestSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"lease-expiry", "restart"} {
		t.Run(how, func(t *testing.T) {
			clk := newFakeClock()
			url := testenv.MemURL(t.Name())
			q := openT(t, url, modelOptions(clk)...)
			a := mustEnqueue(t, q, "qa", "a", EnqueueOptions{})
			mustClaim(t, q, "qa")
			if c, err := q.CancelJob(ctx, a.JobID); err != nil || c != CancelRequested {
				t.Fatalf("CancelJob = %v, %v", c, err)
			}
			if how == "restart" {
				q.Close(ctx)
				q = openT(t, url, modelOptions(clk)...)
			} else {
				clk.Advance(mLease)
				if err := q.reapNow(); err != nil {
					t.Fatal(err)
				}
			}
			j, err := q.GetJob(ctx, a.JobID)
			if errors.Is(err, ErrJobNotFound) {
				return // removed as cancelled: fine
			}
			if err != nil {
				t.Fatal(err)
			}
			if !j.CancelRequested {
				t.Fatalf("after the claim was lost to %s the job is %v without its cancel request: the request was dropped", how, j.State)
			}
			clk.Advance(time.Minute) // past any backoff
			next := mustClaim(t, q, "qa")
			if next == nil || next.ID != a.JobID || !next.CancelRequested {
				t.Fatalf("next claim = %+v, want job %s with CancelRequested", next, a.JobID)
			}
			cctx, stop := q.claimContext(ctx, next)
			defer stop()
			select {
			case <-cctx.Done():
				if !errors.Is(context.Cause(cctx), ErrJobCancelled) {
					t.Fatalf("claim context cause = %v, want ErrJobCancelled", context.Cause(cctx))
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the claim of a cancel-requested job was not told (ClaimContext not done)")
			}
		})
	}
}
