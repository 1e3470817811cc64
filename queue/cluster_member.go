package queue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/handoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// remote is the member's side of cluster mode, its backend: every
// operation is a call to the writer of one epoch (served by
// cluster_writer.go, with the messages of cluster_messages.go). Commits
// from many goroutines share calls (see flush), claims wait on the writer
// (long-poll), and the writer tells the member of the cancels and losses
// of its claims through a long-poll of its own (see eventsLoop; claims
// are in cluster_member_claims.go). A remote never retries with another
// writer: the clustered backend above it does, once it has found the next
// one.
type remote struct {
	c      *cluster.Client
	epoch  uint64
	member string
	opts   options
	calls  atomic.Int64 // calls made to the writer

	cmu    sync.Mutex
	claims map[string]*rclaim // this member's claims, guarded by cmu

	// slotTable holds this member's Work loops: a dispatched enqueue
	// (queuex.API.WithDispatch) takes one of their idle slots before its
	// commit is sent, and the writer claims the job for it.
	slotTable

	// Reads and lease renewals from concurrent goroutines share calls.
	gets    batcher[string, getResult]
	renewer batcher[renewItem, renewResult]

	bmu      sync.Mutex
	pending  []*pendingCommit // guarded by bmu
	riders   []*pendingClaim  // claims waiting to ride a commit call, guarded by bmu
	inflight int              // commit calls in flight, guarded by bmu
	// batches takes each commit call to a flusher goroutine (see
	// flushLoop); after close, flushed is set (guarded by bmu) and calls
	// go on goroutines of their own, which fail at once.
	batches chan commitBatch
	flushed bool

	// replaced is set when the member found another writer and closes
	// this remote (see switchTo): its calls cut short go to the next one,
	// where a close of the Queue fails them.
	replaced atomic.Bool

	watches *watchSet // the store's key watches, carried to the writer by watchLoop

	hlth   atomic.Pointer[Health] // the writer's, as last reported
	gone   chan struct{}          // closed when the writer said it is closing, or failed a call
	goneMu sync.Once

	ctx  context.Context // ends at close
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// rclaim is a member's view of one of its claims.
type rclaim struct {
	token     uint64
	queue     string
	renewed   time.Time   // when the writer last confirmed the lease
	watchers  *claimWatch // told of its cancel and its loss
	cancelled bool
}

// pendingCommit is one transaction waiting for, or in, a commit call.
type pendingCommit struct {
	ops      []txnOp
	size     int // txnSize(ops)
	opts     wireOpts
	refill   *claimWant // see refillFor; nil: none
	sent     bool       // guarded by remote.bmu
	done     chan struct{}
	res      wireTxnResult
	refilled claimReply
	err      error
}

// pendingClaim is a claim waiting for, or riding, a commit call (see
// claimRide).
type pendingClaim struct {
	want  claimWant
	opts  wireOpts
	sent  bool // guarded by remote.bmu
	done  chan struct{}
	reply claimReply
	err   error
}

// commitBatch is what one commit call carries: transactions and claims
// that share one set of queue settings.
type commitBatch struct {
	opts   wireOpts
	txns   []*pendingCommit
	claims []*pendingClaim
}

// maxCommitsInFlight bounds the commit calls a member has in flight: the
// transactions that arrive meanwhile wait and share the next call, as
// transactions share a WAL write on the writer. The second call goes only
// for a full batch (fullCommitBatch transactions waiting): a member that
// is not busy makes one call at a time, and each call carries what waited
// for it, while a busy one does not hold a full batch back for a round
// trip. With one call in flight a busy member (stepwell bench --cluster 2,
// file://) did 10,300 transitions/s at 0.118 calls per transition; with
// two it did 12,100-13,200 at 0.145; with two and no full-batch rule, 6%
// more than with one at 0.196 calls per transition.
const (
	maxCommitsInFlight = 2
	fullCommitBatch    = 12
)

// maxCallTxn is the largest transaction a member sends (txnSize): a call
// carries its values, large ones too, and must fit in a cluster message
// with room for its framing. A variable for tests.
var maxCallTxn = cluster.MaxMessage - 1<<20

// maxCommitBatch and maxCommitBytes bound the transactions of one commit
// call (a larger transaction goes alone).
const (
	maxCommitBatch = 512
	maxCommitBytes = 16 << 20
)

// txnSize is about how many bytes ops take on the wire.
func txnSize(ops []txnOp) int {
	n := 0
	for i := range ops {
		n += 32 + len(ops[i].Key) + len(ops[i].Value) + len(ops[i].Expect)
	}
	return n
}

// newRemote makes the member's backend for the writer of epoch; ws is the
// store's key watches (nil: new ones).
func newRemote(c *cluster.Client, epoch uint64, member string, o options, ws *watchSet) *remote {
	ctx, stop := context.WithCancel(context.Background())
	r := &remote{c: c, epoch: epoch, member: member, opts: o, claims: map[string]*rclaim{},
		gone: make(chan struct{}), ctx: ctx, stop: stop, batches: make(chan commitBatch, maxCommitsInFlight),
		watches: ws}
	if r.watches == nil {
		r.watches = newWatchSet()
	}
	r.gets = batcher[string, getResult]{max: maxGetBatch, call: r.getCall}
	r.renewer = batcher[renewItem, renewResult]{max: maxRenewBatch, call: r.renewCall}
	r.hlth.Store(&Health{Healthy: true, Since: time.Now()})
	return r
}

// start begins the events and watch long-polls and the commit flushers.
func (r *remote) start() {
	r.wg.Add(2 + maxCommitsInFlight)
	go r.eventsLoop()
	go r.watchLoop()
	for range maxCommitsInFlight {
		go r.flushLoop()
	}
}

// flushLoop makes the commit calls that kickLocked hands it, until close.
// The calls run on long-lived goroutines: a goroutine started for each
// call grew its stack through gRPC every time, and the copies cost a busy
// member 5% of its CPU.
func (r *remote) flushLoop() {
	defer r.wg.Done()
	for {
		select {
		case b := <-r.batches:
			r.flushChain(b)
		case <-r.ctx.Done():
			r.bmu.Lock()
			r.flushed = true
			var left []commitBatch
		drain: // the other flushers may be taking batches too: never block
			for {
				select {
				case b := <-r.batches:
					left = append(left, b)
				default:
					break drain
				}
			}
			r.bmu.Unlock()
			for _, b := range left {
				r.flushChain(b) // fails at once: r.ctx is done
			}
			return
		}
	}
}

// markGone records that the writer is gone or failing: the clustered
// backend looks for the next one.
func (r *remote) markGone() { r.goneMu.Do(func() { close(r.gone) }) }

// call makes one call. A refusal (stale epoch, wrong secret, another
// release's wire) changed nothing: errWriterGone. Any other failure may
// have happened after the writer acted: an *outcomeLostError, which also
// wraps errWriterGone.
func (r *remote) call(ctx context.Context, method string, req, reply message) error {
	r.calls.Add(1)
	err := r.c.Call(ctx, method, req, reply)
	switch {
	case err == nil:
		return nil
	case r.replaced.Load() && r.ctx.Err() != nil:
		// This member found another writer and closed this remote with
		// the call on its way (see switchTo): it may have been done, and
		// the next writer takes what is safe to retry.
		return &outcomeLostError{err: errors.New("the member found another writer while the call was on its way")}
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, cluster.ErrStaleEpoch), errors.Is(err, cluster.ErrUnauthenticated), errors.Is(err, cluster.ErrWireVersion):
		r.markGone()
		return fmt.Errorf("%w: %v", errWriterGone, err)
	case status.Code(err) == codes.ResourceExhausted:
		// A message over the transport's limit (a reply: requests are
		// bounded before they are sent). The writer is fine; the call
		// may have been done.
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
	r.markGone()
	return &outcomeLostError{err: err}
}

// outcomeLostError: a call failed in transport; the writer may have acted
// on it.
type outcomeLostError struct{ err error }

func (e *outcomeLostError) Error() string {
	return fmt.Sprintf("queue: the call to the cluster's writer failed: %v", e.err)
}
func (e *outcomeLostError) Unwrap() []error { return []error{errWriterGone, e.err} }

func (r *remote) ping(ctx context.Context) error {
	var h healthReply
	if err := r.call(ctx, rpcHealth, &noArgs{}, &h); err != nil {
		return err
	}
	r.setHealth(h)
	return nil
}

// unhealthy records that the writer cannot be reached.
func (r *remote) unhealthy(err error) {
	h := *r.hlth.Load()
	if h.Healthy {
		h = Health{Since: time.Now()}
	}
	h.LastError = err
	h.Stalled = time.Since(h.Since)
	r.hlth.Store(&h)
}

func (r *remote) setHealth(h healthReply) {
	hh := &Health{Healthy: h.Healthy, Since: h.Since, Stalled: h.Stalled}
	if h.LastError != "" {
		hh.LastError = errors.New(h.LastError)
	}
	r.hlth.Store(hh)
}

func (r *remote) commit(ctx context.Context, ops []txnOp, o options) (TxnResult, error) {
	size := txnSize(ops)
	if size > maxCallTxn {
		// It would not fit in a call: refused here, before anything is
		// sent (the limit is the transport's; see maxCallTxn).
		return TxnResult{}, &TooLargeError{What: "transaction (with the values a member sends its writer)", Size: size, Max: maxCallTxn}
	}
	slotFor := r.takeSlots(ops, time.Now(), true)
	refill := refillFor(ctx, ops)
	res, refilled, err := r.send(ctx, &pendingCommit{ops: dispatchOnly(ops, slotFor), size: size, opts: toWireOpts(o), refill: refill}, o)
	if refill != nil {
		r.refill(ctx, refill.Queue, refilled, o)
	}
	if err != nil {
		// Failed, or its outcome is unknown (ErrOutcomeUnknown): a job the
		// writer did claim for this member then runs again once its lease
		// expires, as any job of a worker that vanished.
		for _, s := range slotFor {
			s.put()
		}
		return res, err
	}
	if slotFor != nil {
		startDispatched(ctx, ops, slotFor, res.Enqueued)
	}
	return res, nil
}

// countEnqueues returns the number of enqueues in ops: a transaction that
// commits has one result for each (TxnResult.Enqueued).
func countEnqueues(ops []txnOp) int {
	n := 0
	for i := range ops {
		if ops[i].Kind == opEnqueue {
			n++
		}
	}
	return n
}

// dispatchOnly returns ops with Dispatch set on the enqueues that have a
// slot in slotFor only: the writer claims the job of each of those for
// this member, and never one the member has no slot for.
func dispatchOnly(ops []txnOp, slotFor map[int]*slots) []txnOp {
	var out []txnOp
	for i := range ops {
		if ops[i].Kind == opEnqueue && ops[i].Dispatch && slotFor[i] == nil {
			if out == nil {
				out = slices.Clone(ops) // the caller's ops may be sent again
			}
			out[i].Dispatch = false
		}
	}
	if out == nil {
		return ops
	}
	return out
}

// refillFor returns the claim that refills the Work slot running the
// caller when ops settle the slot's job without claiming the next one
// (queuex.API.WithClaim), as the handler's last act (handoff.Settling: the
// Work loop's settlement once the handler returned, the runtime's of a
// step), and its worker is not stopping: the slot is about to be free,
// and the claim rides the settlement (a member's call, or in one process
// its transaction: see local.commit), so that its next job comes without
// a claim, a call or a round trip of its own. Nil: ops do not free a
// slot.
func refillFor(ctx context.Context, ops []txnOp) *claimWant {
	queue, jobID, ok := handoff.Open[*Job](ctx)
	if !ok {
		return nil
	}
	settles := false
	for i := range ops {
		switch op := &ops[i]; op.Kind {
		case opAck, opNack, opDeadLetter:
			settles = settles || op.JobID == jobID && op.Queue == queue
		case opEnqueue:
			if op.Claim && op.Queue == queue {
				return nil // the slot runs the claimed job next
			}
		}
	}
	if !settles {
		return nil
	}
	w := &claimWant{Queue: queue, N: 1}
	w.Prefetch, _ = handoff.PrefetchOf(ctx)
	return w
}

// refill hands the job a settlement's refill claimed to the caller's slot,
// to run next; one the slot cannot take is given back.
func (r *remote) refill(ctx context.Context, queue string, reply claimReply, o options) {
	jobs, err := r.claimed(reply, o, nil)
	if err != nil {
		return
	}
	if unrun := giveRefill(ctx, queue, jobs); len(unrun) > 0 {
		go r.releaseUnrun(unrun, o)
	}
}

// giveRefill hands the jobs a settlement's refill claimed (of queue) to
// the caller's slot, to run next, and returns those the slot cannot take
// (see handoff.Give), for the caller to give back.
func giveRefill(ctx context.Context, queue string, jobs []*Job) (unrun []*Job) {
	for _, j := range jobs {
		if !handoff.Give(ctx, queue, j, j.carried()) {
			unrun = append(unrun, j)
		}
	}
	return unrun
}

// send commits p's transaction through a commit call, shared with the
// transactions that wait meanwhile (see kickLocked), with p.refill (nil:
// none) claimed after it if it applies.
func (r *remote) send(ctx context.Context, p *pendingCommit, o options) (TxnResult, claimReply, error) {
	p.done = make(chan struct{})
	ops := p.ops
	r.bmu.Lock()
	r.pending = append(r.pending, p)
	r.kickLocked()
	r.bmu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		if !withdraw(r, &r.pending, p, &p.sent) {
			return TxnResult{}, claimReply{}, ctx.Err()
		}
		if p.refill != nil {
			// The call is on its way: give back the job it may claim
			// for a slot that will not get it.
			go func() {
				<-p.done
				r.releaseClaimed(p.refilled, o)
			}()
		}
		return TxnResult{}, claimReply{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
	if p.err != nil {
		return TxnResult{}, claimReply{}, p.err
	}
	if n := countEnqueues(ops); p.res.Err == nil && len(p.res.Enqueued) != n {
		// Not this package's writer: its answer cannot be matched to the
		// enqueues (and their slots).
		return TxnResult{}, claimReply{}, &outcomeLostError{err: fmt.Errorf("the writer answered %d of %d enqueues", len(p.res.Enqueued), n)}
	}
	res := TxnResult{Cancelled: p.res.Cancelled}
	next := 0 // index in ops of the next enqueue: one result each, in order
	for _, e := range p.res.Enqueued {
		for next < len(ops) && ops[next].Kind != opEnqueue {
			next++
		}
		er := EnqueueResult{JobID: e.JobID, Duplicate: e.Duplicate, claimed: e.Claimed.job()}
		if j := er.claimed; j != nil && next < len(ops) {
			// The writer left out what the member has (see
			// wireEnqueued): the enqueue's, as in a local commit.
			op := &ops[next]
			j.ID, j.Queue, j.Payload, j.Headers, j.Priority, j.DedupKey = e.JobID, op.Queue, op.Value, op.Headers, op.Priority, op.DedupKey
		}
		next++
		if er.claimed != nil {
			r.addClaim(er.claimed.ID, er.claimed.Queue, er.claimed.token, er.claimed.CancelRequested)
		}
		res.Enqueued = append(res.Enqueued, er)
	}
	err := errFromWire(p.res.Err)
	var lost *ClaimLostError
	for _, op := range ops {
		switch op.Kind {
		case opAck, opNack, opDeadLetter, opRelease:
			if err == nil {
				r.dropClaim(op.JobID, op.Token, ErrClaimLost)
			} else if errors.As(err, &lost) && lost.JobID == op.JobID {
				r.dropClaim(op.JobID, op.Token, err)
			}
		}
	}
	return res, p.refilled, err
}

// withdraw takes item, whose caller gave up on it, out of waiting (a list
// guarded by r.bmu) unless a commit call took it already (*sent, guarded
// by r.bmu too), and reports whether one did: its outcome is then the
// call's.
func withdraw[T comparable](r *remote, waiting *[]T, item T, sent *bool) bool {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	if !*sent {
		*waiting = slices.DeleteFunc(*waiting, func(q T) bool { return q == item })
	}
	return *sent
}

// kickLocked starts a commit call if one may start and transactions or
// claims wait (see maxCommitsInFlight).
//
// REQUIRES: r.bmu held.
func (r *remote) kickLocked() {
	b, ok := r.takeBatchLocked()
	switch {
	case !ok:
	case r.flushed:
		go r.flushChain(b)
	default:
		r.batches <- b // never blocks: inflight < maxCommitsInFlight
	}
}

// takeBatchLocked takes the next commit call's batch, if one may start
// and transactions or claims wait (see maxCommitsInFlight), and counts it
// in flight.
//
// REQUIRES: r.bmu held.
func (r *remote) takeBatchLocked() (commitBatch, bool) {
	if r.inflight >= maxCommitsInFlight || len(r.pending) == 0 && len(r.riders) == 0 ||
		r.inflight > 0 && len(r.pending) < fullCommitBatch {
		return commitBatch{}, false
	}
	// One call carries one set of queue settings: take the waiting
	// transactions and claims that share the first one's.
	var b commitBatch
	if len(r.pending) > 0 {
		b.opts = r.pending[0].opts
	} else {
		b.opts = r.riders[0].opts
	}
	rest := r.pending[:0]
	size := 0
	for _, p := range r.pending {
		if len(b.txns) == 0 || len(b.txns) < maxCommitBatch && size+p.size <= maxCommitBytes && sameOpts(p.opts, b.opts) {
			p.sent = true
			size += p.size
			b.txns = append(b.txns, p)
		} else {
			rest = append(rest, p)
		}
	}
	r.pending = rest
	riders := r.riders[:0]
	for _, c := range r.riders {
		if sameOpts(c.opts, b.opts) {
			c.sent = true
			b.claims = append(b.claims, c)
		} else {
			riders = append(riders, c)
		}
	}
	r.riders = riders
	r.inflight++
	return b, true
}

func sameOpts(a, b wireOpts) bool {
	return a.Lease == b.Lease && a.MaxAttempts == b.MaxAttempts && a.BackoffBase == b.BackoffBase &&
		a.BackoffMax == b.BackoffMax && reflect.ValueOf(a.Queues).UnsafePointer() == reflect.ValueOf(b.Queues).UnsafePointer()
}

// flushChain makes the commit call for b, then those of the batches
// waiting when each call ends, on the calling goroutine: the next call
// starts without a hand-off to another flusher.
func (r *remote) flushChain(b commitBatch) {
	for ok := true; ok; {
		b, ok = r.flush(b)
	}
}

// flush sends one commit call for b, and returns the next batch to send,
// if one may start now.
func (r *remote) flush(b commitBatch) (commitBatch, bool) {
	req := commitReq{Member: r.member, Opts: b.opts, Txns: make([][]txnOp, len(b.txns)), Dispatch: true}
	for i, p := range b.txns {
		req.Txns[i] = p.ops
	}
	for _, c := range b.claims {
		req.Claims = append(req.Claims, c.want)
	}
	refills := make([]int, len(b.txns)) // index in req.Claims + 1; 0: none
	for i, p := range b.txns {
		if p.refill != nil {
			w := *p.refill
			w.IfTxn = i + 1
			req.Claims = append(req.Claims, w)
			refills[i] = len(req.Claims)
		}
	}
	var reply commitReply
	var err error
	switch {
	case r.ctx.Err() == nil:
		err = r.call(r.ctx, rpcCommit, &req, &reply)
	case r.replaced.Load():
		// Closed before the call went: nothing was sent, and the next
		// writer takes it (see clustered.do).
		err = fmt.Errorf("%w: the member follows another writer", errWriterGone)
	default:
		err = ErrClosed // nothing was sent
	}
	if err == nil && len(reply.Results) != len(b.txns) {
		err = &outcomeLostError{err: fmt.Errorf("the writer answered %d of %d transactions", len(reply.Results), len(b.txns))}
	}
	if errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, ErrClosed)
	}
	for i, p := range b.txns {
		if err != nil {
			p.err = err
		} else {
			p.res = reply.Results[i]
			if k := refills[i]; k > 0 && k <= len(reply.Claims) {
				p.refilled = reply.Claims[k-1]
			}
		}
		close(p.done)
	}
	for i, c := range b.claims {
		switch {
		case err != nil:
			c.err = err
		case i < len(reply.Claims):
			c.reply = reply.Claims[i]
		} // else a writer that does not take riding claims: none claimed
		close(c.done)
	}
	r.bmu.Lock()
	defer r.bmu.Unlock()
	r.inflight--
	return r.takeBatchLocked()
}

// get reads a key. Reads from many goroutines share calls (see batcher):
// one call in flight, the reads that arrive meanwhile go in the next.
func (r *remote) get(ctx context.Context, key string) ([]byte, error) {
	res, err := r.gets.do(ctx, key)
	if err != nil {
		return nil, err
	}
	return res.val, res.err
}

type getResult struct {
	val []byte
	err error
}

// maxGetBatch bounds the reads of one get call, maxRenewBatch the claims
// of one renew call.
const (
	maxGetBatch   = 512
	maxRenewBatch = 512
)

// getCall reads keys in one call.
func (r *remote) getCall(keys []string) ([]getResult, error) {
	var reply getReply
	err := r.call(r.ctx, rpcGet, &getReq{Keys: keys}, &reply)
	if err == nil && (len(reply.Values) != len(keys) || len(reply.Errs) != len(keys)) {
		err = &outcomeLostError{err: fmt.Errorf("the writer answered %d of %d reads", len(reply.Values), len(keys))}
	}
	if err != nil {
		return nil, err
	}
	res := make([]getResult, len(keys))
	for i := range keys {
		res[i] = getResult{val: reply.Values[i], err: errFromWire(reply.Errs[i])}
	}
	return res, nil
}

func (r *remote) scan(ctx context.Context, prefix, after string, limit int) ([]KV, bool, error) {
	var reply scanReply
	if err := r.call(ctx, rpcScan, &scanReq{Prefix: prefix, After: after, Limit: limit}, &reply); err != nil {
		return nil, false, err
	}
	return reply.KVs, reply.More, errFromWire(reply.Err)
}

func (r *remote) stats(ctx context.Context, queue string) (Stats, error) {
	var reply statsReply
	if err := r.call(ctx, rpcStats, &statsReq{Queue: queue}, &reply); err != nil {
		return Stats{}, err
	}
	return reply.Stats, errFromWire(reply.Err)
}

func (r *remote) queues(ctx context.Context) ([]string, error) {
	var reply queuesReply
	if err := r.call(ctx, rpcQueues, &noArgs{}, &reply); err != nil {
		return nil, err
	}
	return reply.Names, errFromWire(reply.Err)
}

func (r *remote) limits(ctx context.Context) (map[string]Limit, error) {
	var reply limitsReply
	if err := r.call(ctx, rpcLimits, &noArgs{}, &reply); err != nil {
		return nil, err
	}
	if err := errFromWire(reply.Err); err != nil {
		return nil, err
	}
	if len(reply.Limits) != len(reply.Names) {
		return nil, fmt.Errorf("%w: limits reply: %d names, %d limits", ErrCorrupt, len(reply.Names), len(reply.Limits))
	}
	m := make(map[string]Limit, len(reply.Names))
	for i, name := range reply.Names {
		m[name] = reply.Limits[i]
	}
	return m, nil
}

func (r *remote) getJob(ctx context.Context, id string) (*Job, error) {
	var reply jobReply
	if err := r.call(ctx, rpcGetJob, &getJobReq{ID: id}, &reply); err != nil {
		return nil, err
	}
	if err := errFromWire(reply.Err); err != nil {
		return nil, err
	}
	return reply.Job.job(), nil
}

func (r *remote) deadJobs(ctx context.Context, queue, after string, limit int) ([]*Job, string, error) {
	var reply deadJobsReply
	if err := r.call(ctx, rpcDeadJobs, &deadJobsReq{Queue: queue, After: after, Limit: limit}, &reply); err != nil {
		return nil, "", err
	}
	if err := errFromWire(reply.Err); err != nil {
		return nil, "", err
	}
	jobs := make([]*Job, len(reply.Jobs))
	for i, w := range reply.Jobs {
		jobs[i] = w.job()
	}
	return jobs, reply.Next, nil
}

func (r *remote) requeueDead(ctx context.Context, id string) error {
	var reply jobReply
	if err := r.call(ctx, rpcRequeueDead, &getJobReq{ID: id}, &reply); err != nil {
		return err
	}
	return errFromWire(reply.Err)
}

func (r *remote) refresh(context.Context) error { return nil }

func (r *remote) storageStats() StorageStats {
	return StorageStats{ClusterCalls: r.calls.Load(), Health: r.health()}
}

// health is the writer's store health, as its last reply said, or
// unhealthy since the member lost its connection to the writer.
func (r *remote) health() Health { return *r.hlth.Load() }

func (r *remote) err() error { return nil }

func (r *remote) close(context.Context) error {
	r.stop()
	r.wg.Wait()
	return r.c.Close()
}
