package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/internal/queuex"
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
	started bool
	stallAt time.Duration
	// watchers are told of the claim's cancel and its loss (see
	// claimWatch); cause is why it was lost, once ended. Guarded by lmu.
	watchers  *claimWatch
	cause     error
	cancelled bool
	// holder is the cluster member holding the claim ("": this process),
	// told of its cancel and loss (see members).
	holder string
	// adopted: taken over from the state at Open, and no holder has
	// confirmed it yet (see adoptedExpiry).
	adopted bool
}

// grantLeases registers this process's leases on freshly claimed jobs.
//
// REQUIRES: inside the engine transaction that claims them.
func (l *local) grantLeases(jobs []*Job, cfg QueueConfig, now time.Time, holder string) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	for _, j := range jobs {
		// Cancelled while an earlier claim ran: its watchers are told at once.
		ls := &lease{token: j.token, queue: j.Queue, expires: now.Add(cfg.Lease),
			holder: holder, cancelled: j.CancelRequested}
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
// (its claim is not durable yet) never has, nor has an adopted one before
// the writer serves (serveAdopted); a started one is extended by
// the time the store spent stalled since it was started or renewed, so
// that an outage, during which nothing can be settled, does not spend the
// attempt.
//
// REQUIRES: l.lmu held.
func (l *local) expired(ls *lease, now time.Time) bool {
	if !ls.started || now.Before(ls.expires) || ls.adopted && !l.serving {
		return false
	}
	return !now.Before(ls.expires.Add(l.eng.StallTime() - ls.stallAt))
}

// release ends this process's claim on a job. cause == nil: settled.
//
// REQUIRES: called with the engine's lock held (inside a transaction) or
// with the claim already settled, so the reaper cannot race it.
func (l *local) release(id string, token uint64, cause error) { l.unlease(id, token, cause)() }

// unlease is release in two: it ends the claim now and returns the function
// that tells its watchers (claimContext). A settlement tells them once its
// outcome is known: a handler settling its own job commits with its claim
// context, which must not end while the commit waits for the store.
//
// REQUIRES: as release.
func (l *local) unlease(id string, token uint64, cause error) (signal func()) {
	ls := l.endLease(id, token, cause)
	if ls == nil {
		return func() {}
	}
	return func() { l.signalLost(ls) }
}

// endLease is unlease returning the lease ended (nil: none was held with
// token), whose watchers its caller tells with signalLost.
//
// REQUIRES: as release.
func (l *local) endLease(id string, token uint64, cause error) *lease {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[id]
	if ls == nil || ls.token != token {
		return nil
	}
	delete(l.leases, id)
	if cause != nil && ls.holder != "" {
		// Lost (the reaper): tell the member. A settlement (cause nil)
		// came from the holder itself, which learns its outcome from
		// its commit.
		l.members.notify(ls.holder, claimEvent{ID: id, Token: token, Lost: true})
	}
	if cause == nil {
		cause = ErrClaimLost
	}
	ls.cause = cause
	return ls
}

// signalLost tells the watchers of leases endLease ended that their claim
// is lost (or settled), with its cause.
func (l *local) signalLost(ended ...*lease) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	for _, ls := range ended {
		ws := ls.watchers
		ls.watchers = nil
		tellAll(ws, ls.cause)
	}
}

func (l *local) signalCancel(id string) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	if ls := l.leases[id]; ls != nil && !ls.cancelled {
		ls.cancelled = true
		for w := ls.watchers; w != nil; w = w.next {
			w.tell(ErrJobCancelled)
		}
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
	ls.expires, ls.stallAt, ls.adopted = now.Add(o.config(ls.queue).Lease), l.eng.StallTime(), false
	return nil
}

func (l *local) watch(w *claimWatch) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[w.id]
	if ls == nil || ls.token != w.token {
		w.tell(&ClaimLostError{JobID: w.id})
		return
	}
	w.attach(&ls.watchers, ls.cancelled)
}

// attach adds w to a claim's watchers, telling it at once if the claim's
// job is cancelled already.
//
// REQUIRES: the lock guarding watchers held.
func (w *claimWatch) attach(watchers **claimWatch, cancelled bool) {
	if cancelled {
		w.tell(ErrJobCancelled)
	}
	w.next, *watchers = *watchers, w
}

func (l *local) unwatch(w *claimWatch) {
	if w.ended.Load() {
		return // told of the loss: dropped with the lease
	}
	l.lmu.Lock()
	defer l.lmu.Unlock()
	if ls := l.leases[w.id]; ls != nil && ls.token == w.token {
		removeWatch(&ls.watchers, w)
	}
}

// adoptClaim grants the lease of a claim recorded in the state, until
// adoptedExpiry: a member that holds it confirms and renews it with this
// writer like any other, and if none does, it expires a lease after the
// claim (or after a short grace from now) and the job runs again.
//
// REQUIRES: inside the Open transaction of requeueClaimed.
func (l *local) adoptClaim(id string, rec *jobRec, now time.Time) {
	ls := &lease{token: rec.Claim, queue: rec.Queue, started: true, stallAt: l.eng.StallTime(), adopted: true,
		expires: l.adoptedExpiry(rec, now), cancelled: rec.CancelReq}
	l.lmu.Lock()
	l.leases[id] = ls
	l.lmu.Unlock()
	for cur := l.nextToken.Load(); cur <= rec.Claim && !l.nextToken.CompareAndSwap(cur, rec.Claim+1); cur = l.nextToken.Load() {
	}
}

// renew extends a claimed job's lease by the queue's lease duration. It is
// process state, not a write. It fails with a *ClaimLostError if the lease
// already expired.
func (q *Queue) renew(job *Job) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	return q.be.renew(job.ID, job.token, q.opts)
}

// claimWatch is one watcher of a claim, registered with the backend's
// watch: the backend tells it of the claim's cancel (ErrJobCancelled) and
// of its loss (the cause: a *ClaimLostError, or ErrClaimLost once settled)
// where it signals them, with no goroutine of its own; one registered
// after the fact is told at once. tell may run with a backend's lock held:
// it must not block nor take a lock of this package.
type claimWatch struct {
	id    string
	token uint64
	tell  func(cause error)
	next  *claimWatch // the claim's next watcher, guarded by the backend's lock
	ended atomic.Bool // the loss was told: the backend holds it no more
}

// tellAll tells the loss of a claim to its watchers ws.
func tellAll(ws *claimWatch, cause error) {
	for w := ws; w != nil; {
		next := w.next
		w.next = nil
		w.ended.Store(true)
		w.tell(cause)
		w = next
	}
}

// removeWatch removes w from the list at head.
func removeWatch(head **claimWatch, w *claimWatch) {
	for p := head; *p != nil; p = &(*p).next {
		if *p == w {
			*p = w.next
			w.next = nil
			return
		}
	}
}

// claimCtx is a running job's claim context: the handler's context, its
// watch, and its renewals (see renewer).
type claimCtx struct {
	// Context is cancelled when the claim ends (see watchClaim).
	context.Context
	w      claimWatch
	cancel context.CancelCauseFunc
	job    *Job
	// lost: the loss was told, or a renewal failed: no more renewals.
	lost atomic.Bool
	// handler: a Work handler's context, which its renewer tells of a
	// drain (see onClaimEnd). ended is told when the claim ends while the
	// handler runs (queuex.API.OnClaimEnd); under hmu.
	handler bool
	hmu     sync.Mutex
	ended   queuex.ClaimEnder
	// every, due and idx: its renewals, guarded by the renewer's mu.
	every time.Duration
	due   time.Time
	idx   int
}

// watchClaim returns the claim context of job, derived from parent: it is
// cancelled when the job's claim is lost (cause: a *ClaimLostError, or
// ErrClaimLost once settled) or the job is cancelled (cause:
// ErrJobCancelled), or when parent is (a drain's timeout). Call stop when
// done with the job.
func (q *Queue) watchClaim(parent context.Context, job *Job) *claimCtx {
	cc := &claimCtx{job: job}
	cc.Context, cc.cancel = context.WithCancelCause(parent)
	cc.w = claimWatch{id: job.ID, token: job.token, tell: cc.told}
	q.be.watch(&cc.w)
	return cc
}

// told is the claim's cancel or loss, told by the backend.
func (cc *claimCtx) told(cause error) {
	if cause == nil {
		cause = &ClaimLostError{JobID: cc.job.ID}
	}
	if !errors.Is(cause, ErrJobCancelled) {
		cc.lost.Store(true)
	}
	cc.cancel(cause)
	cc.tellEnded()
}

// tellEnded tells cc's ended, if set, that its context was cancelled:
// once (it clears it), in a goroutine of its own, as context.AfterFunc
// would, since the backend tells a loss under its locks.
func (cc *claimCtx) tellEnded() {
	if e := cc.swapEnded(nil); e != nil {
		go e.ClaimEnded()
	}
}

// swapEnded sets cc's ended to e and returns what it was.
func (cc *claimCtx) swapEnded(e queuex.ClaimEnder) queuex.ClaimEnder {
	cc.hmu.Lock()
	defer cc.hmu.Unlock()
	old := cc.ended
	cc.ended = e
	return old
}

// onClaimEnd sets (or with nil, clears) what is told when ctx, a running
// Work handler's own context, is cancelled by the end of its claim or by
// its parent (a drain's timeout): context.AfterFunc(ctx, e.ClaimEnded)
// with no allocation, told once, at once if ctx is cancelled already. It
// reports false for any other context, derived ones included (their
// cancellations are their own; the caller uses AfterFunc). A cancel after
// stop is not told.
func onClaimEnd(ctx context.Context, e queuex.ClaimEnder) bool {
	cc, ok := ctx.(*claimCtx)
	if !ok || !cc.handler {
		return false
	}
	cc.swapEnded(e)
	// A cancel before the set is told here; one after, by its teller
	// (told, or the renewer's drainEnded). Whichever comes second sees
	// the other, and tellEnded tells once.
	if e != nil && cc.Err() != nil {
		cc.tellEnded()
	}
	return true
}

// stop ends the claim context: its watch, and its context.
func (cc *claimCtx) stop(q *Queue) {
	q.be.unwatch(&cc.w)
	cc.swapEnded(nil)
	cc.cancel(context.Canceled)
}

// claimContext returns a context derived from parent that is cancelled when
// the job's claim is lost (cause: a *ClaimLostError) or the job is cancelled
// (cause: ErrJobCancelled). Call stop when done with the job.
func (q *Queue) claimContext(parent context.Context, job *Job) (ctx context.Context, stop func()) {
	cc := q.watchClaim(parent, job)
	return cc, func() { cc.stop(q) }
}

// renewer renews the leases of the running jobs of a Work loop, each every
// third of its lease (runJob), from when it starts until its handler has
// returned and its settlement is done (a cancelled job, or one a drain
// stops, is renewed until then), or until its claim is lost or a renewal
// fails: one goroutine and one timer for all of them, armed only while a
// job runs long enough to need a renewal.
type renewer struct {
	q    *Queue
	wake chan struct{} // capacity 1: a job is due before at
	mu   sync.Mutex
	jobs []*claimCtx
	at   time.Time // when the loop wakes next; zero: it waits for a job
}

func newRenewer(q *Queue) *renewer { return &renewer{q: q, wake: make(chan struct{}, 1)} }

// add renews cc's lease every every, from now until remove.
func (r *renewer) add(cc *claimCtx, every time.Duration) {
	due := time.Now().Add(every)
	r.mu.Lock()
	cc.every, cc.due, cc.idx = every, due, len(r.jobs)
	r.jobs = append(r.jobs, cc)
	kick := r.at.IsZero() || due.Before(r.at)
	if kick {
		r.at = due
	}
	r.mu.Unlock()
	if kick {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// drainEnded tells the ended of each running job's claim context that it
// was cancelled: a drain's timeout cancelled their parent (see Work).
func (r *renewer) drainEnded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cc := range r.jobs {
		cc.tellEnded()
	}
}

// remove ends cc's renewals.
func (r *renewer) remove(cc *claimCtx) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := len(r.jobs) - 1
	r.jobs[cc.idx] = r.jobs[last]
	r.jobs[cc.idx].idx = cc.idx
	r.jobs[last] = nil
	r.jobs = r.jobs[:last]
}

// run renews the jobs as they fall due, until stop.
func (r *renewer) run(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var due []*claimCtx
	for {
		select {
		case <-r.wake:
		case <-t.C:
		case <-stop:
			return
		}
		due = r.due(time.Now(), due[:0])
		if len(due) == 1 {
			r.renew(due[0])
		} else if len(due) > 1 {
			// At once: a cluster member's renewals then share calls.
			var wg sync.WaitGroup
			for _, cc := range due {
				wg.Go(func() { r.renew(cc) })
			}
			wg.Wait()
		}
		clear(due)
		r.mu.Lock()
		at := r.at
		r.mu.Unlock()
		if !at.IsZero() {
			t.Reset(time.Until(at))
		}
	}
}

// due appends to buf the jobs due at now (or within an eighth of their
// period: renewed a little early, so that jobs started close together
// share a wake-up), sets their next renewal, and sets at to the next one.
func (r *renewer) due(now time.Time, buf []*claimCtx) []*claimCtx {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next time.Time
	for _, cc := range r.jobs {
		if cc.lost.Load() {
			continue
		}
		if cc.due.Sub(now) <= cc.every/8 {
			buf = append(buf, cc)
			cc.due = now.Add(cc.every)
		}
		if next.IsZero() || cc.due.Before(next) {
			next = cc.due
		}
	}
	r.at = next
	return buf
}

// renew renews cc's lease; a failure ends its renewals (the claim is lost:
// the context is cancelled when the loss is signalled).
func (r *renewer) renew(cc *claimCtx) {
	if r.q.renew(cc.job) != nil {
		cc.lost.Store(true)
	}
}

// IsClaimLost reports whether err says a claim was lost.
func IsClaimLost(err error) bool { return errors.Is(err, ErrClaimLost) }
