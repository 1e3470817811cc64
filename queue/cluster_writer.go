package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/handoff"
)

// The writer's side of cluster mode: the methods a writer (a *local)
// serves to the members (methods; their messages are in
// cluster_messages.go), and what it keeps of each member (memberSet). The
// member's side is cluster_member.go.

// memberSet is the writer's view of the cluster's members: for each, the
// events (cancels, losses) of its claims that it has not collected yet.
type memberSet struct {
	mu        sync.Mutex
	m         map[string]*memberState // guarded by mu
	closing   chan struct{}           // closed when the writer starts closing; made by openLocal
	closeOnce sync.Once
}

type memberState struct {
	events []claimEvent
	wake   chan struct{} // capacity 1: an event arrived
	seen   time.Time     // last Events call
}

func (s *memberSet) get(id string) *memberState {
	if s.m == nil {
		s.m = map[string]*memberState{}
	}
	ms := s.m[id]
	if ms == nil {
		ms = &memberState{wake: make(chan struct{}, 1)}
		s.m[id] = ms
	}
	return ms
}

// notify queues an event for member id.
func (s *memberSet) notify(id string, ev claimEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.get(id)
	ms.events = append(ms.events, ev)
	select {
	case ms.wake <- struct{}{}:
	default:
	}
}

// take returns member id's pending events, and the channel that says more
// arrived. Members not heard from for a minute are forgotten.
func (s *memberSet) take(id string, now time.Time) ([]claimEvent, chan struct{}, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, ms := range s.m {
		if other != id && now.Sub(ms.seen) > time.Minute {
			delete(s.m, other)
		}
	}
	ms := s.get(id)
	ms.seen = now
	evs := ms.events
	ms.events = nil
	return evs, ms.wake, s.closing
}

// close tells every waiting member that the writer is closing.
func (s *memberSet) close() { s.closeOnce.Do(func() { close(s.closing) }) }

// maxWait bounds how long the writer holds a long-poll call.
const maxWait = 20 * time.Second

// testHookServe, when set by a test, sees each Commit, Claim and Renew
// call the writer serves, decoded, before it is served.
var testHookServe atomic.Pointer[func(method string, req any)]

// wireJobs returns claimed jobs as they go to the member, each with the
// value its claim prefetched (see prefetchIn): read in the claim's
// transaction, or kept as a blob and read now (unreadable now: the member
// reads it itself).
func (l *local) wireJobs(ctx context.Context, jobs []*Job) []*wireJob {
	var out []*wireJob
	for _, j := range jobs {
		w := toWireJob(j)
		if w.Prefetched = j.prefetched; w.Prefetched == nil && j.prefetchRef != nil {
			w.Prefetched, _ = l.resolve(ctx, j.prefetchRef)
		}
		out = append(out, w)
	}
	return out
}

// methods returns the writer's cluster methods, served to members.
func (l *local) methods() map[string]cluster.Handler {
	return map[string]cluster.Handler{
		rpcCommit: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req commitReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			if h := testHookServe.Load(); h != nil {
				(*h)(rpcCommit, &req)
			}
			l.eng.SetLinger(false) // members batch their own calls
			o := req.Opts.apply(l.opts, req.Member)
			if !req.Dispatch {
				for _, ops := range req.Txns {
					for k := range ops {
						ops[k].Dispatch = false
					}
				}
			}
			results, errs, claims := l.commitAll(ctx, req.Txns, o, req.Claims)
			reply := &commitReply{Results: make([]wireTxnResult, len(req.Txns))}
			for i, res := range results {
				w := wireTxnResult{Cancelled: res.Cancelled, Err: toWireErr(errs[i])}
				for _, e := range res.Enqueued {
					claimed := e.claimed
					if claimed != nil {
						// The member has these: its enqueue's (see
						// wireEnqueued).
						j := *claimed
						j.ID, j.Queue, j.Payload, j.Headers, j.Priority, j.DedupKey = "", "", nil, nil, 0, ""
						claimed = &j
					}
					w.Enqueued = append(w.Enqueued, wireEnqueued{JobID: e.JobID, Duplicate: e.Duplicate, Claimed: toWireJob(claimed)})
				}
				reply.Results[i] = w
			}
			for _, c := range claims {
				reply.Claims = append(reply.Claims, claimReply{Jobs: l.wireJobs(ctx, c.jobs), Err: toWireErr(c.err)})
			}
			return reply, nil
		},
		rpcClaim: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req claimReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			if h := testHookServe.Load(); h != nil {
				(*h)(rpcClaim, &req)
			}
			o := req.Opts.apply(l.opts, req.Member)
			var jobs []*Job
			var err error
			if req.Wait > 0 {
				wctx, cancel := context.WithTimeout(ctx, min(req.Wait, maxWait))
				stop := context.AfterFunc(ctx, cancel)
				go func() {
					select {
					case <-l.members.closing:
						cancel()
					case <-wctx.Done():
					}
				}()
				jobs, err = l.claimWait(handoff.WithPrefetch(wctx, req.Prefetch), req.Queue, req.N, o, nil)
				stop()
				cancel()
				if err != nil && ctx.Err() == nil && wctx.Err() != nil {
					err = nil // the wait ended: no job
				}
			} else {
				jobs, err = l.claim(handoff.WithPrefetch(ctx, req.Prefetch), req.Queue, req.N, o, nil)
			}
			return &claimReply{Jobs: l.wireJobs(ctx, jobs), Err: toWireErr(err)}, nil
		},
		rpcRenew: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req renewReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			if h := testHookServe.Load(); h != nil {
				(*h)(rpcRenew, &req)
			}
			o := req.Opts.apply(l.opts, req.Member)
			reply := &renewReply{Lost: make([]bool, len(req.Claims))}
			for i, c := range req.Claims {
				l.hold(c, req.Member)
				reply.Lost[i] = l.renew(c.ID, c.Token, o) != nil
			}
			return reply, nil
		},
		rpcEvents: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req eventsReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			var lost []claimEvent
			for _, c := range req.Claims {
				if ev, ok := l.hold(c, req.Member); ok {
					lost = append(lost, ev)
				}
			}
			evs, wake, closing := l.members.take(req.Member, l.now())
			evs = append(lost, evs...)
			if len(evs) == 0 && req.Wait > 0 {
				t := time.NewTimer(min(req.Wait, maxWait))
				defer t.Stop()
				select {
				case <-wake:
					evs, _, _ = l.members.take(req.Member, l.now())
				case <-closing:
				case <-t.C:
				case <-ctx.Done():
				}
			}
			reply := &eventsReply{Events: evs, Health: l.healthReply()}
			select {
			case <-closing:
				reply.Closing = true
			default:
			}
			return reply, nil
		},
		rpcWatch: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req watchReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			return l.serveWatch(ctx, &req, l.members.closing)
		},
		rpcGet: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req getReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			reply := &getReply{Values: make([][]byte, len(req.Keys)), Errs: make([]*wireErr, len(req.Keys))}
			var wg sync.WaitGroup
			for i, key := range req.Keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := l.get(ctx, key)
					reply.Values[i], reply.Errs[i] = v, toWireErr(err)
				}()
			}
			wg.Wait()
			return reply, nil
		},
		rpcScan: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req scanReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			kvs, more, err := l.scan(ctx, req.Prefix, req.After, req.Limit)
			return &scanReply{KVs: kvs, More: more, Err: toWireErr(err)}, nil
		},
		rpcStats: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req statsReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			s, err := l.stats(ctx, req.Queue)
			return &statsReply{Stats: s, Err: toWireErr(err)}, nil
		},
		rpcQueues: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req noArgs
			if err := dec(&req); err != nil {
				return nil, err
			}
			names, err := l.queues(ctx)
			return &queuesReply{Names: names, Err: toWireErr(err)}, nil
		},
		rpcLimits: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req noArgs
			if err := dec(&req); err != nil {
				return nil, err
			}
			m, err := l.limits(ctx)
			reply := &limitsReply{Err: toWireErr(err)}
			for name, lim := range m {
				reply.Names = append(reply.Names, name)
				reply.Limits = append(reply.Limits, lim)
			}
			return reply, nil
		},
		rpcGetJob: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req getJobReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			j, err := l.getJob(ctx, req.ID)
			return &jobReply{Job: toWireJob(j), Err: toWireErr(err)}, nil
		},
		rpcRequeueDead: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req getJobReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			return &jobReply{Err: toWireErr(l.requeueDead(ctx, req.ID))}, nil
		},
		rpcDeadJobs: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req deadJobsReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			jobs, next, err := l.deadJobs(ctx, req.Queue, req.After, req.Limit)
			reply := &deadJobsReply{Next: next, Err: toWireErr(err)}
			for _, j := range jobs {
				reply.Jobs = append(reply.Jobs, toWireJob(j))
			}
			return reply, nil
		},
		rpcHealth: func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req noArgs
			if err := dec(&req); err != nil {
				return nil, err
			}
			if err := l.err(); err != nil {
				// Failed for good (or fenced): no longer the writer, though
				// its process lives. A member about to take over asks this
				// (see takeOver), and must not be told the writer is alive.
				return nil, err
			}
			h := l.healthReply()
			return &h, nil
		},
	}
}

func (l *local) healthReply() healthReply {
	h := l.health()
	r := healthReply{Healthy: h.Healthy, Since: h.Since, Stalled: h.Stalled}
	if h.LastError != nil {
		r.LastError = h.LastError.Error()
	}
	return r
}

// hold records member as the holder of claim c, so that its cancel and
// loss are told to it, and confirms it if it was adopted (confirmAdopted).
// A claim this writer does not hold (lost, settled, or of another token)
// is returned as a loss event, with ok.
func (l *local) hold(c claimRef, member string) (ev claimEvent, ok bool) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[c.ID]
	if ls == nil || ls.token != c.Token {
		return claimEvent{ID: c.ID, Token: c.Token, Lost: true}, true
	}
	l.confirmAdopted(ls, l.now())
	if ls.holder != member {
		ls.holder = member
		if ls.cancelled {
			l.members.notify(member, claimEvent{ID: c.ID, Token: c.Token, Cancel: true})
		}
	}
	return claimEvent{}, false
}
