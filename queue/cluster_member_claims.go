package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/handoff"
)

// The member side of claims: claiming jobs from the writer (alone, long-
// polled, or riding a commit call), renewing their leases in shared
// calls, and the long-poll of events (cancels and losses) of the
// member's claims. The rest of the member is in cluster_member.go.

// addClaim records a claim of this member.
func (r *remote) addClaim(id, queue string, token uint64, cancelled bool) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	r.claims[id] = &rclaim{token: token, queue: queue, renewed: time.Now(), cancelled: cancelled}
}

// dropClaim ends a claim of this member: its watchers see cause.
func (r *remote) dropClaim(id string, token uint64, cause error) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	c := r.claims[id]
	if c == nil || c.token != token {
		return
	}
	delete(r.claims, id)
	ws := c.watchers
	c.watchers = nil
	tellAll(ws, cause)
}

func (r *remote) heldClaims() []claimRef {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	refs := make([]claimRef, 0, len(r.claims))
	for id, c := range r.claims {
		refs = append(refs, claimRef{ID: id, Token: c.token, Queue: c.queue})
	}
	return refs
}

func (r *remote) adopt(refs []claimRef) {
	for _, c := range refs {
		r.addClaim(c.ID, c.Queue, c.Token, false)
	}
}

func (r *remote) claim(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error) {
	return r.claimCall(ctx, queue, n, o, s, 0)
}

// claimCall claims up to n jobs, waiting up to wait on the writer for one;
// with s, only as many as s has idle slots for.
func (r *remote) claimCall(ctx context.Context, queue string, n int, o options, s *slots, wait time.Duration) ([]*Job, error) {
	if s != nil {
		n = min(n, s.idle())
		if n == 0 {
			return nil, nil
		}
	}
	req := &claimReq{Member: r.member, Opts: toWireOpts(o), Queue: queue, N: n, Wait: wait}
	req.Prefetch, _ = handoff.PrefetchOf(ctx)
	var reply claimReply
	if err := r.call(ctx, rpcClaim, req, &reply); err != nil {
		return nil, err
	}
	return r.claimed(reply, o, s)
}

// claimed takes the jobs of a claim's reply: this member's claims, each
// in a slot of s (if s is set). What finds no slot is given back.
func (r *remote) claimed(reply claimReply, o options, s *slots) ([]*Job, error) {
	if err := errFromWire(reply.Err); err != nil {
		return nil, err
	}
	jobs := make([]*Job, 0, len(reply.Jobs))
	var unrun []*Job
	for _, w := range reply.Jobs {
		j := w.job()
		r.addClaim(j.ID, j.Queue, j.token, j.CancelRequested)
		if s != nil && !s.take(false) {
			// The loop is stopping, or a dispatch took the slot while
			// the call was out (see CLUSTER.md, "What a member costs").
			unrun = append(unrun, j)
			continue
		}
		jobs = append(jobs, j)
	}
	if len(unrun) > 0 {
		go r.releaseUnrun(unrun, o)
	}
	return jobs, nil
}

// claimRide claims up to n jobs (as many as s has idle slots for) with the
// next commit call, if a commit call is in flight: a busy member's claims
// then cost no call of their own, and a Work loop whose slot a run's last
// step freed finds its next job with the settlements of the other slots
// (when nothing else waits for the next call, the claim goes in one of its
// own, which does not wait on the writer).
// The writer does not wait for a job: rode reports whether the claim
// rode, and a claim that rode and got nothing is followed by a waiting
// claim call.
func (r *remote) claimRide(ctx context.Context, queue string, n int, o options, s *slots) (jobs []*Job, rode bool, err error) {
	if s != nil {
		n = min(n, s.idle())
	}
	if n == 0 {
		return nil, true, nil
	}
	c := &pendingClaim{want: claimWant{Queue: queue, N: n}, opts: toWireOpts(o), done: make(chan struct{})}
	c.want.Prefetch, _ = handoff.PrefetchOf(ctx)
	r.bmu.Lock()
	if r.inflight == 0 {
		r.bmu.Unlock()
		return nil, false, nil
	}
	r.riders = append(r.riders, c)
	r.bmu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		if !withdraw(r, &r.riders, c, &c.sent) {
			return nil, true, ctx.Err()
		}
		// The call is on its way, bounded by its own context: the jobs it
		// claims for this loop are given back.
		<-c.done
		if c.err == nil {
			go r.releaseClaimed(c.reply, o)
		}
		return nil, true, ctx.Err()
	}
	if c.err != nil {
		return nil, true, c.err
	}
	jobs, err = r.claimed(c.reply, o, s)
	return jobs, true, err
}

// releaseClaimed gives back the jobs a claim's reply brings, which no one
// will run (the claim's caller gave up).
func (r *remote) releaseClaimed(reply claimReply, o options) {
	if jobs, err := r.claimed(reply, o, nil); err == nil && len(jobs) > 0 {
		r.releaseUnrun(jobs, o)
	}
}

// releaseUnrun gives back jobs claimed for a Work loop that stopped.
func (r *remote) releaseUnrun(jobs []*Job, o options) {
	for _, j := range jobs {
		op := txnOp{Kind: opRelease, JobID: j.ID, Token: j.token, Queue: j.Queue}
		if _, err := r.commit(r.ctx, []txnOp{op}, o); err != nil && !IsClaimLost(err) {
			o.logf("stepwell: releasing job %s, claimed for a worker that stopped, failed: %v", j.ID, err)
		}
	}
}

// claimPoll is how long one claim call waits on the writer for a job.
const claimPoll = 10 * time.Second

func (r *remote) claimWait(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error) {
	for {
		if err := s.waitIdle(ctx); err != nil {
			return nil, err
		}
		jobs, rode, err := r.claimRide(ctx, queue, n, o, s)
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
		if rode {
			// Nothing was claimable a moment ago: wait on the writer.
			if err := s.waitIdle(ctx); err != nil {
				return nil, err
			}
		}
		s.park(true) // dispatched enqueues may take its idle slots now
		jobs, err = r.claimCall(ctx, queue, n, o, s, claimPoll)
		s.park(false)
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		select {
		case <-r.gone:
			return nil, errWriterGone
		default:
		}
	}
}

func (r *remote) renew(id string, token uint64, o options) error {
	r.cmu.Lock()
	c := r.claims[id]
	var renewed time.Time
	if c != nil {
		renewed = c.renewed
	}
	r.cmu.Unlock()
	if c == nil || c.token != token {
		return &ClaimLostError{JobID: id}
	}
	lease := o.config(c.queue).Lease
	// A lease the writer granted or renewed a moment ago has most of its
	// time left: no call (a step chained by its predecessor's settlement
	// is admitted to its slot with a Renew). Its loss or cancel would
	// have come as an event.
	if time.Since(renewed) < lease/4 {
		return nil
	}
	rr, err := r.renewer.do(r.ctx, renewItem{ref: claimRef{ID: id, Token: token}, opts: toWireOpts(o)})
	if err == nil {
		err = rr.err
	}
	if err != nil {
		// The writer cannot be asked. The claim stands until its lease,
		// as last confirmed, has run out: by then the writer has given
		// the job to another worker (or will, once it can).
		r.cmu.Lock()
		expired := time.Since(c.renewed) > lease
		r.cmu.Unlock()
		if expired {
			r.dropClaim(id, token, &ClaimLostError{JobID: id})
			return &ClaimLostError{JobID: id}
		}
		return nil
	}
	if rr.lost {
		r.dropClaim(id, token, &ClaimLostError{JobID: id})
		return &ClaimLostError{JobID: id}
	}
	r.cmu.Lock()
	c.renewed = time.Now()
	r.cmu.Unlock()
	return nil
}

func (r *remote) watch(w *claimWatch) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	c := r.claims[w.id]
	if c == nil || c.token != w.token {
		w.tell(&ClaimLostError{JobID: w.id})
		return
	}
	w.attach(&c.watchers, c.cancelled)
}

func (r *remote) unwatch(w *claimWatch) {
	if w.ended.Load() {
		return // told of the loss: dropped with the claim
	}
	r.cmu.Lock()
	defer r.cmu.Unlock()
	if c := r.claims[w.id]; c != nil && c.token == w.token {
		removeWatch(&c.watchers, w)
	}
}

// eventsPoll is how long one events call waits on the writer; its reply
// also brings the writer's health.
const eventsPoll = 5 * time.Second

// eventsLoop long-polls the writer for the cancels and losses of this
// member's claims, until close or the writer is gone.
func (r *remote) eventsLoop() {
	defer r.wg.Done()
	for failures := 0; r.ctx.Err() == nil; {
		ctx, cancel := context.WithTimeout(r.ctx, eventsPoll+10*time.Second)
		var reply eventsReply
		err := r.call(ctx, rpcEvents, &eventsReq{Member: r.member, Claims: r.heldClaims(), Wait: eventsPoll}, &reply)
		cancel()
		if err != nil {
			if errors.Is(err, errWriterGone) {
				r.unhealthy(err)
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
		r.setHealth(reply.Health)
		for _, ev := range reply.Events {
			if ev.Lost {
				r.dropClaim(ev.ID, ev.Token, &ClaimLostError{JobID: ev.ID})
				continue
			}
			r.cmu.Lock()
			if c := r.claims[ev.ID]; c != nil && c.token == ev.Token && !c.cancelled {
				c.cancelled = true
				for w := c.watchers; w != nil; w = w.next {
					w.tell(ErrJobCancelled)
				}
			}
			r.cmu.Unlock()
		}
		if reply.Closing {
			r.markGone()
			return
		}
	}
}

// renewItem is one claim to renew, with the queue settings of its Queue.
type renewItem struct {
	ref  claimRef
	opts wireOpts
}

// renewCall renews claims in one call: for each, whether its lease is
// lost, or the error of its call. The writer renews with one set of queue
// settings per call: those of the first item, which the others share in
// practice (one Queue per process); items with other settings go in a
// call of their own.
func (r *remote) renewCall(items []renewItem) ([]renewResult, error) {
	res := make([]renewResult, len(items))
	done := make([]bool, len(items))
	for first := range items {
		if done[first] {
			continue
		}
		req := &renewReq{Member: r.member, Opts: items[first].opts}
		var idx []int
		for i := first; i < len(items); i++ {
			if !done[i] && sameOpts(items[i].opts, items[first].opts) {
				req.Claims = append(req.Claims, items[i].ref)
				idx = append(idx, i)
				done[i] = true
			}
		}
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		var reply renewReply
		err := r.call(ctx, rpcRenew, req, &reply)
		cancel()
		if err == nil && len(reply.Lost) != len(idx) {
			err = &outcomeLostError{err: fmt.Errorf("the writer answered %d of %d renewals", len(reply.Lost), len(idx))}
		}
		for k, i := range idx {
			if err != nil {
				res[i].err = err
			} else {
				res[i].lost = reply.Lost[k]
			}
		}
	}
	return res, nil
}

// renewResult is the outcome of one renewal of renewCall.
type renewResult struct {
	lost bool
	err  error
}
