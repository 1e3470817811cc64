package queue

import (
	"context"
	"errors"
	"time"
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
	return func() { close(ls.lost) }
}

// endLease is unlease returning the lease ended (nil: none was held with
// token), whose lost channel its caller closes to tell the watchers.
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
	ls.expires, ls.stallAt, ls.adopted = now.Add(o.config(ls.queue).Lease), l.eng.StallTime(), false
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

// adoptClaim grants the lease of a claim recorded in the state, until
// adoptedExpiry: a member that holds it confirms and renews it with this
// writer like any other, and if none does, it expires a lease after the
// claim (or after a short grace from now) and the job runs again.
//
// REQUIRES: inside the Open transaction of requeueClaimed.
func (l *local) adoptClaim(id string, rec *jobRec, now time.Time) {
	ls := &lease{token: rec.Claim, queue: rec.Queue, started: true, stallAt: l.eng.StallTime(), adopted: true,
		expires: l.adoptedExpiry(rec, now), lost: make(chan struct{}), cancel: make(chan struct{})}
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

// renew extends a claimed job's lease by the queue's lease duration. It is
// process state, not a write. It fails with a *ClaimLostError if the lease
// already expired.
func (q *Queue) renew(job *Job) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	return q.be.renew(job.ID, job.token, q.opts)
}

// claimContext returns a context derived from parent that is cancelled when
// the job's claim is lost (cause: a *ClaimLostError) or the job is cancelled
// (cause: ErrJobCancelled). Call stop when done with the job.
func (q *Queue) claimContext(parent context.Context, job *Job) (ctx context.Context, stop func()) {
	return q.claimContextRenewing(parent, job, 0)
}

// claimContextRenewing is claimContext that also renews the job's lease
// every renewEvery (0: never) until stop, or until a renewal fails (the
// claim is lost: the context is cancelled when the loss is signalled).
// One goroutine per job watches the claim and renews its lease; once ctx
// is cancelled (the job's cancel, a drain), it only renews.
func (q *Queue) claimContextRenewing(parent context.Context, job *Job, renewEvery time.Duration) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	lost, cancelled, cause := q.be.watch(job.ID, job.token)
	done := make(chan struct{})
	go func() {
		var tick <-chan time.Time
		ctxDone := ctx.Done()
		if renewEvery > 0 {
			t := time.NewTicker(renewEvery)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-tick:
				if q.renew(job) != nil {
					tick = nil // lost: the loss cancels ctx when signalled
				}
				continue
			case <-lost:
				c := cause()
				if c == nil {
					c = &ClaimLostError{JobID: job.ID}
				}
				cancel(c)
			case <-cancelled:
				cancel(ErrJobCancelled)
				if tick != nil { // renew until the handler returns
					cancelled, ctxDone = nil, nil
					continue
				}
			case <-done:
			case <-ctxDone:
				if tick != nil { // renew until the handler returns (a drain's cancel)
					ctxDone = nil
					continue
				}
			}
			return
		}
	}()
	return ctx, func() { close(done); cancel(context.Canceled) }
}

// IsClaimLost reports whether err says a claim was lost.
func IsClaimLost(err error) bool { return errors.Is(err, ErrClaimLost) }
