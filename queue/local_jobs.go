package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
)

// lease is this process's hold on a claimed job. Lease renewal is process
// state, not a write: a lease dies with its process, and recovery requeues
// every job left claimed.
type lease struct {
	token   uint64
	queue   string
	expires time.Time
	// started is false until the claim is durable (see startLeases): a
	// lease does not run, and cannot expire, before. stallAt is the
	// engine's StallTime when the lease was started or last renewed: time
	// the store spent stalled since then extends it (see expired).
	started   bool
	stallAt   time.Duration
	lost      chan struct{} // closed when the claim is lost (expired, or settled)
	cancel    chan struct{} // closed when a cancel is requested
	cause     error         // why lost was closed; guarded by lmu
	cancelled bool
	// holder is the cluster member holding the claim ("": this process),
	// told of its cancel and loss (see members).
	holder string
}

// claim takes up to n claimable jobs from the queue, highest priority first,
// FIFO within a priority. The attempt count rises at claim.
func (l *local) claim(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error) {
	cfg := o.config(queue)
	// A stalled store claims nothing: a claim now would only wait for the
	// store, holding jobs another process could run once it is back.
	if err := l.eng.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	var jobs []*Job
	var encs [][]byte
	now := l.now()
	taken := 0 // slots of s taken
	wait, err := l.eng.Apply(ctx, func(tx *engine.Tx) error {
		jobs, encs = nil, nil
		qi := l.ix.queues[queue]
		if qi == nil {
			return nil
		}
		qi.promote(now.UnixNano())
		for len(jobs) < n {
			it, ok := qi.ready.Min()
			if !ok {
				break
			}
			id := it.id()
			v, ok := tx.Get(jobSpace + id)
			if !ok {
				qi.ready.Delete(it) // cannot happen: the index follows the tree
				continue
			}
			if s != nil {
				if !s.take() {
					break
				}
				taken++
			}
			rec, err := decodeJob(v)
			if err != nil {
				return err
			}
			rec.State = stateClaimed
			rec.Attempts++
			rec.UpdatedAt = now.UnixNano()
			rec.Claim = l.nextToken.Add(1)
			tx.Put(jobSpace+id, encodeJob(rec)) // removes it from ready
			j := rec.toJob(id, now)
			j.Payload = bytes.Clone(rec.Payload)
			j.token = rec.Claim
			jobs = append(jobs, j)
			encs = append(encs, l.payloadValue(&tx.Reader, id, rec))
		}
		l.grantLeases(jobs, cfg, now, o.member)
		return nil
	})
	putTaken := func() {
		for ; taken > 0; taken-- {
			s.put()
		}
	}
	if err == nil {
		err = wait(ctx)
	}
	if errors.Is(err, engine.ErrOutcomeUnknown) {
		// ctx ended before the claim was durable. Nobody will run the
		// jobs: once it is, release them (the attempt does not count).
		go func() {
			if wait(context.Background()) == nil {
				l.releaseUnrun(jobs, o)
			}
			putTaken()
		}()
		return nil, ctx.Err()
	}
	if err != nil {
		putTaken()
		return nil, err
	}
	l.startLeases(jobs, o)
	for i, j := range jobs {
		if encs[i] == nil {
			continue
		}
		if j.Payload, err = l.resolve(ctx, encs[i]); err != nil {
			// The jobs are not run: release them, and free their slots.
			go l.releaseUnrun(jobs, o)
			putTaken()
			return nil, err
		}
	}
	return jobs, nil
}

// releaseUnrun gives back jobs this process claimed durably but will not
// run (their caller gave up): released, their attempt not counted. A job
// whose claim was lost meanwhile is skipped; a failing store is logged.
func (l *local) releaseUnrun(jobs []*Job, o options) {
	for _, j := range jobs {
		op := txnOp{Kind: opRelease, JobID: j.ID, Token: j.token, Queue: j.Queue}
		if _, err := l.commit(context.Background(), []txnOp{op}, o); err != nil && !IsClaimLost(err) {
			o.logf("stepwell: releasing job %s, claimed for a caller that gave up, failed: %v", j.ID, err)
		}
	}
}

// payloadValue returns the engine value of a job's payload if it is not in
// its record: under p/<id>, or nil if there is none.
//
// REQUIRES: inside an engine transaction or view.
func (l *local) payloadValue(r *engine.Reader, id string, rec *jobRec) []byte {
	if rec.Payload != nil {
		return nil
	}
	v, _ := r.Get(payloadSpace + id)
	return v
}

// grantLeases registers this process's leases on freshly claimed jobs.
//
// REQUIRES: inside the engine transaction that claims them.
func (l *local) grantLeases(jobs []*Job, cfg QueueConfig, now time.Time, holder string) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	for _, j := range jobs {
		ls := &lease{token: j.token, queue: j.Queue, expires: now.Add(cfg.Lease),
			lost: make(chan struct{}), cancel: make(chan struct{}), holder: holder}
		if j.CancelRequested {
			// Cancelled while an earlier claim ran: tell this one at once.
			ls.cancelled = true
			close(ls.cancel)
		}
		l.leases[j.ID] = ls
	}
}

// startLeases starts the leases of jobs whose claim just became durable: a
// lease runs from then, not from the commit, so that a slow or stalled
// store does not eat into the worker's time nor expire a claim that no
// worker could start yet.
func (l *local) startLeases(jobs []*Job, o options) {
	if len(jobs) == 0 {
		return
	}
	durableAt, stall := l.now(), l.eng.StallTime()
	l.lmu.Lock()
	defer l.lmu.Unlock()
	for _, j := range jobs {
		if ls := l.leases[j.ID]; ls != nil && ls.token == j.token {
			ls.expires, ls.stallAt, ls.started = durableAt.Add(o.config(j.Queue).Lease), stall, true
		}
	}
}

// expired reports whether a lease has run out at now. A lease not started
// (its claim is not durable yet) never has; a started one is extended by
// the time the store spent stalled since it was started or renewed, so
// that an outage, during which nothing can be settled, does not spend the
// attempt.
//
// REQUIRES: l.lmu held.
func (l *local) expired(ls *lease, now time.Time) bool {
	if !ls.started || now.Before(ls.expires) {
		return false
	}
	return !now.Before(ls.expires.Add(l.eng.StallTime() - ls.stallAt))
}

// testHookClaimWait, when set by a test, runs before each claim of
// claimWait.
var testHookClaimWait func()

// claimWait claims up to n jobs, waiting until at least one is claimable or
// ctx is done. Enqueues and due times wake it; the poll interval bounds the
// sleep.
func (l *local) claimWait(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error) {
	for {
		if s != nil && s.idle() == 0 {
			// Every slot runs a job: wait for one to come back.
			select {
			case <-s.freed:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		if h := testHookClaimWait; h != nil {
			h()
		}
		jobs, err := l.claim(ctx, queue, n, o, s)
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
		var notify chan struct{}
		var due int64
		l.eng.View(ctx, func(*engine.Reader) error {
			qi := l.ix.queue(queue)
			notify, due = qi.notify, qi.nextDue()
			return nil
		})
		wait := o.pollInterval
		if due != 0 {
			wait = min(wait, max(time.Duration(due-l.now().UnixNano()), time.Millisecond))
		}
		// A slot put back wakes the wait too: a dispatched enqueue may have
		// taken the slot this claim needed while jobs were ready, and no
		// enqueue will signal those jobs again.
		var freed chan struct{}
		if s != nil {
			freed = s.freed
		}
		t := time.NewTimer(wait)
		select {
		case <-notify:
		case <-freed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// release ends this process's claim on a job. cause == nil: settled.
//
// REQUIRES: called with the engine's lock held (inside a transaction) or
// with the claim already settled, so the reaper cannot race it.
func (l *local) release(id string, token uint64, cause error) { l.unlease(id, token, cause)() }

// unlease is release in two: it ends the claim now and returns the function
// that tells its watchers (ClaimContext). A settlement tells them once its
// outcome is known: a handler settling its own job commits with its claim
// context, which must not end while the commit waits for the store.
//
// REQUIRES: as release.
func (l *local) unlease(id string, token uint64, cause error) (signal func()) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[id]
	if ls == nil || ls.token != token {
		return func() {}
	}
	delete(l.leases, id)
	if cause == nil {
		cause = ErrClaimLost
	}
	ls.cause = cause
	if ls.holder != "" {
		l.members.notify(ls.holder, claimEvent{ID: id, Token: token, Lost: true})
	}
	return func() { close(ls.lost) }
}

func (l *local) signalCancel(id string) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	if ls := l.leases[id]; ls != nil && !ls.cancelled {
		ls.cancelled = true
		close(ls.cancel)
		if ls.holder != "" {
			l.members.notify(ls.holder, claimEvent{ID: id, Token: ls.token, Cancel: true})
		}
	}
}

// renew extends a claim's lease by the queue's lease duration.
func (l *local) renew(id string, token uint64, o options) error {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[id]
	now := l.now()
	if ls == nil || ls.token != token || token == 0 || l.expired(ls, now) {
		// An expired lease is lost even before the reaper requeues the job.
		return &ClaimLostError{JobID: id}
	}
	ls.expires, ls.stallAt = now.Add(o.config(ls.queue).Lease), l.eng.StallTime()
	return nil
}

// watch returns the channels that report a claim's loss and cancellation.
func (l *local) watch(id string, token uint64) (lost, cancel <-chan struct{}, cause func() error) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[id]
	if ls == nil || ls.token != token {
		c := make(chan struct{})
		close(c)
		return c, nil, func() error { return &ClaimLostError{JobID: id} }
	}
	return ls.lost, ls.cancel, func() error {
		l.lmu.Lock()
		defer l.lmu.Unlock()
		return ls.cause
	}
}

// reap requeues (or dead-letters, at the attempt limit) every job whose
// lease has expired, and deletes done and dead jobs past their retention.
//
// While the store is stalled it does nothing: its transaction could not be
// committed, and a lease whose holder cannot settle must not run out.
func (l *local) reap(ctx context.Context) error {
	if !l.eng.Health().Healthy {
		return l.eng.Err()
	}
	now := l.now()
	type expired struct {
		id    string
		token uint64
	}
	var exp []expired
	l.lmu.Lock()
	for id, ls := range l.leases {
		if l.expired(ls, now) {
			exp = append(exp, expired{id, ls.token})
		}
	}
	l.lmu.Unlock()
	// Deterministic order: notices and retries of jobs expiring together
	// get the same FIFO positions on every run.
	slices.SortFunc(exp, func(a, b expired) int { return strings.Compare(a.id, b.id) })
	return l.eng.Update(ctx, func(tx *engine.Tx) error {
		for _, e := range exp {
			rec, err := l.claimedRec(tx, e.id, e.token, true)
			if err != nil {
				continue // settled meanwhile
			}
			l.lmu.Lock()
			ls := l.leases[e.id]
			stillExpired := ls != nil && l.expired(ls, now) // not renewed meanwhile
			l.lmu.Unlock()
			if !stillExpired {
				continue
			}
			cfg := l.opts.config(rec.Queue)
			l.retryTx(tx, e.id, rec, cfg, "lease expired", 0, now)
			l.release(e.id, e.token, &ClaimLostError{JobID: e.id})
		}
		l.expireRetainedTx(tx, now)
		return nil
	})
}

// expireRetainedTx deletes done and dead jobs older than their retention.
//
// REQUIRES: inside an engine transaction.
func (l *local) expireRetainedTx(tx *engine.Tx, now time.Time) {
	for name, qi := range l.ix.queues {
		cfg := l.opts.config(name)
		for _, t := range []struct {
			tree interface {
				Min() (timeItem, bool)
			}
			keep time.Duration
		}{{qi.done, cfg.DoneRetention}, {qi.dead, cfg.DeadRetention}} {
			if t.keep <= 0 {
				continue
			}
			cutoff := now.Add(-t.keep).UnixNano()
			for {
				it, ok := t.tree.Min()
				if !ok || it.at > cutoff {
					break
				}
				tx.Delete(jobSpace + it.id) // removes it from the tree
				tx.Delete(payloadSpace + it.id)
			}
		}
	}
}

// requeueClaimed makes every job left claimed by a dead process claimable
// again (or dead, at its attempt limit). Run once at Open. In cluster mode
// a claim recorded with its token is kept instead: its holder may be a
// live member, which renews and settles it with this writer.
func (l *local) requeueClaimed(ctx context.Context) error {
	now := l.now()
	return l.eng.Update(ctx, func(tx *engine.Tx) error {
		var ids []string
		for _, qi := range l.ix.queues {
			for id := range qi.claimed {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			v, ok := tx.Get(jobSpace + id)
			if !ok {
				continue
			}
			rec, err := decodeJob(v)
			if err != nil {
				return err
			}
			if l.opts.cluster != nil && rec.Claim != 0 {
				// A member may be running it: honour the claim for a
				// lease from now (see adoptClaim).
				l.adoptClaim(id, rec, now)
				continue
			}
			// A cancel request stays: the next claim sees it at once.
			if rec.Attempts >= rec.MaxAttempts {
				l.deadTx(tx, id, rec, "worker stopped without settling (last attempt)", now)
				continue
			}
			rec.addHistory(now, "worker stopped without settling")
			rec.State, rec.RunAt, rec.UpdatedAt = statePending, now.UnixNano(), now.UnixNano()
			tx.Put(jobSpace+id, encodeJob(rec))
		}
		return nil
	})
}

// adoptClaim grants the lease of a claim recorded in the state, from now:
// a member that holds it renews it with this writer like any other, and
// if none does, it expires after the queue's lease and the job runs again.
//
// REQUIRES: inside the Open transaction of requeueClaimed.
func (l *local) adoptClaim(id string, rec *jobRec, now time.Time) {
	ls := &lease{token: rec.Claim, queue: rec.Queue, started: true, stallAt: l.eng.StallTime(),
		expires: now.Add(l.opts.config(rec.Queue).Lease), lost: make(chan struct{}), cancel: make(chan struct{})}
	if rec.CancelReq {
		ls.cancelled = true
		close(ls.cancel)
	}
	l.lmu.Lock()
	l.leases[id] = ls
	l.lmu.Unlock()
	for cur := l.nextToken.Load(); cur <= rec.Claim && !l.nextToken.CompareAndSwap(cur, rec.Claim+1); cur = l.nextToken.Load() {
	}
}

func (l *local) reaperLoop() {
	defer l.wg.Done()
	every := l.opts.lease / 4
	for _, c := range l.opts.queues {
		if c.Lease > 0 {
			every = min(every, c.Lease/4)
		}
	}
	every = min(max(every, 5*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	// A reap caught by a stall stops waiting for it at Close.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-t.C:
		case <-l.stop:
			return
		}
		if err := l.reap(ctx); err != nil && !errors.Is(err, ErrOutcomeUnknown) {
			return // the engine has failed or closed
		}
	}
}

// Stats describe one queue.
type Stats struct {
	Pending, Scheduled, Claimed, Dead int64
	// Done counts acknowledged jobs kept by the done retention.
	Done int64
	// OldestPendingAge is how long the oldest claimable job has waited; 0
	// when none is pending.
	OldestPendingAge time.Duration
}

func (l *local) stats(ctx context.Context, queue string) (Stats, error) {
	var s Stats
	now := l.now()
	err := l.eng.View(ctx, func(r *engine.Reader) error {
		r.ObservePending() // the index may reflect batches not yet durable
		qi := l.ix.queues[queue]
		if qi == nil {
			return nil
		}
		qi.promote(now.UnixNano())
		s = Stats{
			Pending: int64(qi.ready.Len()), Scheduled: int64(qi.sched.Len()),
			Claimed: int64(len(qi.claimed)), Dead: int64(qi.dead.Len()), Done: int64(qi.done.Len()),
		}
		// The oldest pending job is the lowest order among the heads of
		// each priority.
		var oldest *readyItem
		pivot, first := readyItem{}, true
		for {
			var head *readyItem
			visit := func(it readyItem) bool { head = &it; return false }
			if first {
				qi.ready.Ascend(visit)
				first = false
			} else {
				qi.ready.AscendGreaterOrEqual(pivot, visit)
			}
			if head == nil {
				break
			}
			if oldest == nil || head.order < oldest.order {
				oldest = head
			}
			if head.prio == -1<<31 {
				break
			}
			pivot = readyItem{prio: head.prio - 1, order: 0}
		}
		if oldest != nil {
			if v, ok := r.Get(jobSpace + oldest.id()); ok {
				if rec, err := decodeJob(v); err == nil {
					s.OldestPendingAge = max(now.Sub(unixNano(max(rec.EnqueuedAt, rec.RunAt))), 0)
				}
			}
		}
		return nil
	})
	return s, err
}

func (l *local) queues(ctx context.Context) ([]string, error) {
	var names []string
	err := l.eng.View(ctx, func(r *engine.Reader) error {
		r.ObservePending()
		for name := range l.ix.queues {
			names = append(names, name)
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

func (l *local) getJob(ctx context.Context, id string) (*Job, error) {
	for attempt := 0; ; attempt++ {
		var rec *jobRec
		var enc, payload []byte
		err := l.eng.View(ctx, func(r *engine.Reader) error {
			v, ok := r.Get(jobSpace + id)
			if !ok {
				return ErrJobNotFound
			}
			var err error
			if rec, err = decodeJob(v); err == nil {
				enc = l.payloadValue(r, id, rec)
				payload = bytes.Clone(rec.Payload)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		j := rec.toJob(id, l.now())
		j.Payload = payload
		if enc != nil {
			j.Payload, err = l.resolve(ctx, enc)
			if errors.Is(err, objstore.ErrNotFound) && attempt < 5 {
				continue
			}
		}
		return j, err
	}
}

// deadJobs lists a queue's dead jobs, oldest death first, a page at a time.
// The cursor is opaque ("<unix ns>:<id>" of the last item returned).
func (l *local) deadJobs(ctx context.Context, queue, after string, limit int) ([]*Job, string, error) {
	pivot := timeItem{}
	if after != "" {
		at, id, ok := strings.Cut(after, ":")
		n, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil {
			return nil, "", fmt.Errorf("%w: bad page cursor %q", ErrInvalidCursor, after)
		}
		pivot = timeItem{at: n, id: id + "\x00"} // strictly after (n, id)
	}
	var items []timeItem
	more := false
	err := l.eng.View(ctx, func(r *engine.Reader) error {
		r.ObservePending()
		qi := l.ix.queues[queue]
		if qi == nil {
			return nil
		}
		qi.dead.AscendGreaterOrEqual(pivot, func(it timeItem) bool {
			if len(items) == limit {
				more = true
				return false
			}
			items = append(items, it)
			return true
		})
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	jobs := make([]*Job, 0, len(items))
	for _, it := range items {
		j, err := l.getJob(ctx, it.id)
		if errors.Is(err, ErrJobNotFound) {
			continue // requeued or expired meanwhile
		}
		if err != nil {
			return nil, "", err
		}
		jobs = append(jobs, j)
	}
	next := ""
	if more {
		last := items[len(items)-1]
		next = fmt.Sprintf("%d:%s", last.at, last.id)
	}
	return jobs, next, nil
}

// requeueDead makes a dead job pending again with a fresh attempt budget.
func (l *local) requeueDead(ctx context.Context, id string) error {
	now := l.now()
	return l.eng.Update(ctx, func(tx *engine.Tx) error { return requeueDeadTx(tx, id, now) })
}

// requeueDeadTx makes a dead job pending again with a fresh attempt budget.
//
// REQUIRES: inside an engine transaction.
func requeueDeadTx(tx *engine.Tx, id string, now time.Time) error {
	v, ok := tx.Get(jobSpace + id)
	if !ok {
		return fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	rec, err := decodeJob(v)
	if err != nil {
		return err
	}
	if rec.State != stateDead {
		return fmt.Errorf("%w: job %s", ErrNotDead, id)
	}
	if _, ok := tx.Get(payloadSpace + id); !ok && rec.Payload == nil {
		rec.Payload = []byte{} // lost: run it with an empty one
	}
	rec.State, rec.Attempts, rec.RunAt, rec.UpdatedAt = statePending, 0, now.UnixNano(), now.UnixNano()
	rec.CancelReq = false
	tx.Put(jobSpace+id, encodeJob(rec))
	return nil
}

func (l *local) addSlots(s *slots) {
	l.smu.Lock()
	defer l.smu.Unlock()
	if l.slots == nil {
		l.slots = map[string][]*slots{}
	}
	l.slots[s.queue] = append(l.slots[s.queue], s)
}

func (l *local) removeSlots(s *slots) {
	l.smu.Lock()
	defer l.smu.Unlock()
	s.close()
	l.slots[s.queue] = slices.DeleteFunc(l.slots[s.queue], func(x *slots) bool { return x == s })
	if len(l.slots[s.queue]) == 0 {
		delete(l.slots, s.queue)
	}
}

// takeSlot takes an idle slot of a Work loop serving queue, or returns nil.
func (l *local) takeSlot(queue string) *slots {
	l.smu.Lock()
	defer l.smu.Unlock()
	for _, s := range l.slots[queue] {
		if s.take() {
			return s
		}
	}
	return nil
}
