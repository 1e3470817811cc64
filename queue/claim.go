package queue

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/handoff"
)

// ClaimOptions configure Claim.
type ClaimOptions struct {
	// Max is how many jobs to claim at most, in one transaction. Defaults
	// to 1; a negative Max is ErrInvalidOption.
	Max int
	// Wait makes Claim wait until at least one job is claimable, or until
	// ctx is done (then it returns ctx's error). It wakes when a job is
	// enqueued or comes due; the poll interval (WithPollInterval) only
	// bounds its sleep. Defaults to false: Claim returns no jobs at once
	// when none is claimable.
	Wait bool
}

// Claim takes up to opts.Max claimable jobs of the queue under a lease,
// highest priority first, FIFO within a priority, in one transaction; none
// (and a nil error) when none is claimable and opts.Wait is false. A job's
// attempt count rises at claim, so a job whose worker crashes every time
// still reaches its limit.
//
// Claim is for programs that pull jobs by hand; Work is the usual way to
// run them. Work renews the leases of the jobs it runs; a job taken with
// Claim is not renewed: settle it (Ack, Nack, DeadLetter, or a Txn) within
// its lease (WithLease, QueueConfig.Lease), or its claim is lost, the job
// runs again elsewhere, and its settlement fails with a *ClaimLostError.
// A cancel request (CancelJob) for a claimed job is seen in
// Job.CancelRequested by GetJob.
func (q *Queue) Claim(ctx context.Context, queue string, opts ClaimOptions) ([]*Job, error) {
	n := opts.Max
	if n == 0 {
		n = 1
	}
	if opts.Wait {
		return q.claimWait(ctx, queue, n)
	}
	return q.claimBatch(ctx, queue, n)
}

// claimOne claims the next claimable job, or returns (nil, nil) when there
// is none.
func (q *Queue) claimOne(ctx context.Context, queue string) (*Job, error) {
	jobs, err := q.claimBatch(ctx, queue, 1)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return jobs[0], nil
}

// claimBatch claims up to n jobs in one transaction.
func (q *Queue) claimBatch(ctx context.Context, queue string, n int) ([]*Job, error) {
	if err := q.checkClaim(queue, n); err != nil {
		return nil, err
	}
	jobs, err := q.be.claim(ctx, queue, n, q.opts, nil)
	return jobs, mapErr(err)
}

// claimWait claims up to n jobs, waiting until at least one is claimable or
// ctx is done (then it returns ctx's error).
func (q *Queue) claimWait(ctx context.Context, queue string, n int) ([]*Job, error) {
	return q.claimWaitOpts(ctx, queue, n, q.opts)
}

func (q *Queue) claimWaitOpts(ctx context.Context, queue string, n int, o options) ([]*Job, error) {
	if err := q.checkClaim(queue, n); err != nil {
		return nil, err
	}
	jobs, err := q.be.claimWait(ctx, queue, n, o, nil)
	return jobs, mapErr(err)
}

func (q *Queue) checkClaim(queue string, n int) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	if queue == "" {
		return ErrEmptyQueueName
	}
	if n < 1 {
		return invalid("claim count %d must be at least 1", n)
	}
	return nil
}

// claim takes up to n claimable jobs from the queue, highest priority first,
// FIFO within a priority. The attempt count rises at claim.
func (l *local) claim(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error) {
	c, err := l.claimApply(ctx, queue, n, o, s, new(int64))
	if err != nil {
		return nil, err
	}
	return l.claimAwait(ctx, c)
}

// claimState is a claim between its stages: applied (claimApply), then
// durable (claimAwait). A member's commit call applies its claims with its
// transactions, so that they share a WAL write.
type claimState struct {
	o        options
	queue    string           // the claim's queue
	n        int              // its jobs at most (a refill's: 0 means 1)
	used     *int64           // the payload bytes its call's claims took (see maxMemberClaimBytes); a refill's may be nil
	prefetch handoff.Prefetch // read with each job (see prefetchIn); zero: none
	s        *slots
	jobs     []*Job
	encs     [][]byte // payload values not in the records (see payloadValue)
	wait     func(context.Context) error
	taken    int // slots of s taken

	// claimApply's transaction (see ApplyTx).
	l      *local
	now    time.Time
	size   int64      // payload bytes claimed
	limits limitTaken // tokens of queue limits taken
}

// putTaken gives back the slots the claim took.
func (c *claimState) putTaken() {
	for ; c.taken > 0; c.taken-- {
		c.s.put()
	}
}

// maxMemberClaimBytes bounds the payload bytes of the jobs a member's call
// claims (a claim call, or all the claims of a commit call), as its reply
// carries them: the claims take fewer jobs (the first at least one)
// rather than fail in the transport with their jobs claimed. A variable
// for tests.
var maxMemberClaimBytes = int64(cluster.MaxMessage / 4)

// claimApply applies a claim of up to n jobs: claimed in the engine, on
// their way to a WAL write. For a member, *used counts the payload bytes
// its call's claims took (see maxMemberClaimBytes).
func (l *local) claimApply(ctx context.Context, queue string, n int, o options, s *slots, used *int64) (*claimState, error) {
	// A stalled store claims nothing: a claim now would only wait for the
	// store, holding jobs another process could run once it is back.
	if err := l.eng.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	c := &claimState{o: o, s: s, l: l, queue: queue, n: n, used: used, now: l.now()}
	// The claims of a Work loop bring what it prefetches (a member's:
	// its call's ctx carries its Prefetch).
	c.prefetch, _ = handoff.PrefetchOf(ctx)
	wait, err := l.eng.ApplyTo(ctx, c)
	if err != nil {
		c.putTaken()
		return nil, err
	}
	*used += c.size
	c.wait = wait
	return c, nil
}

// ApplyTx claims c's jobs: claimApply's transaction (engine.Applier).
func (c *claimState) ApplyTx(tx *engine.Tx) error {
	l := c.l
	c.jobs, c.encs, c.size = nil, nil, 0
	qi := l.ix.queues[c.queue]
	if qi == nil {
		return nil
	}
	qi.promote(c.now.UnixNano())
	err := l.claimReady(tx, qi, c, c.n, c.s, c.used, &c.size, c.now, &c.limits)
	if err != nil {
		c.limits.untake()
		return err
	}
	l.grantLeases(c.jobs, c.o.config(c.queue), c.now, c.o.member)
	l.prefetchIn(&tx.Reader, c.jobs, c.prefetch)
	return nil
}

// claimReady claims up to n of qi's ready jobs into c, as far as the
// queue's limit (if any) and the slots of s let it.
//
// REQUIRES: inside an engine transaction.
func (l *local) claimReady(tx *engine.Tx, qi *queueIndex, c *claimState, n int, s *slots, used, size *int64, now time.Time, taken *limitTaken) error {
	o := c.o
	for len(c.jobs) < n {
		it, ok := qi.ready.Min()
		if !ok {
			break
		}
		id := it.id()
		v, ok := tx.GetIn(jobSpace, id)
		if !ok {
			qi.ready.Delete(it) // cannot happen: the index follows the tree
			continue
		}
		rec, err := decodeJob(v)
		if err != nil {
			return err
		}
		if o.member != "" && *used+*size > 0 && *used+*size+rec.Size > maxMemberClaimBytes {
			break // the reply carries the payloads
		}
		if qi.limit != nil && !qi.limit.allows(len(qi.claimed), now.UnixNano()) {
			break // held back: the job stays pending
		}
		if s != nil {
			if !s.take(false) {
				break
			}
			c.taken++
		}
		if qi.limit != nil {
			admitLimited(qi, now.UnixNano(), taken)
		}
		*size += rec.Size
		rec.State = stateClaimed
		rec.Attempts++
		rec.UpdatedAt = now.UnixNano()
		rec.Claim = l.nextToken.Add(1)
		tx.PutIn(jobSpace, id, l.ix.jobValue(rec)) // removes it from ready
		j := rec.toJob(id, now)
		j.Payload = bytes.Clone(rec.Payload)
		j.token = rec.Claim
		c.jobs = append(c.jobs, j)
		c.encs = append(c.encs, l.payloadValue(&tx.Reader, id, rec))
	}
	return nil
}

// prefetchIn sets the prefetched value (see handoff.Prefetch) of each of
// jobs, claimed just now, if it is in the engine's records; one that is
// absent is left for the handler to read, and one kept as a blob too, but
// for a member's claim (see wireJobs), which keeps its reference.
//
// REQUIRES: inside an engine transaction or view.
func (l *local) prefetchIn(r *engine.Reader, jobs []*Job, p handoff.Prefetch) {
	if p.Header == "" {
		return
	}
	for _, j := range jobs {
		v, ok := r.Get(kvSpace + p.Prefix + j.Headers[p.Header])
		if !ok {
			continue
		}
		switch d, err := engine.Decode(v); {
		case err != nil:
		case d.BlobKey == "":
			j.prefetched = bytes.Clone(d.Data)
		default:
			j.prefetchRef = bytes.Clone(v)
		}
	}
}

// refillApply claims the next job (rf.n jobs at most) of rf's queue into
// rf, for the Work slot whose job the transaction settles (see
// refillFor), within the slot: it takes no slot of its own. It claims
// nothing when the store is stalled or no job is claimable now, and a
// failure to claim ends only the claim, not the settlement.
//
// REQUIRES: inside the settlement's engine transaction.
func (l *local) refillApply(tx *engine.Tx, rf *claimState, now time.Time, taken *limitTaken) {
	rf.jobs, rf.encs = nil, nil
	qi := l.ix.queues[rf.queue]
	if qi == nil || l.eng.Stalled() {
		return
	}
	qi.promote(now.UnixNano())
	used := rf.used
	if used == nil {
		used = new(int64)
	}
	var size int64
	// An error (a record that does not decode) ends the claim there: the
	// jobs claimed before it are kept, with their leases.
	_ = l.claimReady(tx, qi, rf, max(rf.n, 1), nil, used, &size, now, taken)
	*used += size
	l.grantLeases(rf.jobs, rf.o.config(rf.queue), now, rf.o.member)
	l.prefetchIn(&tx.Reader, rf.jobs, rf.prefetch)
}

// refill hands the jobs refillApply claimed to the caller's slot once
// their claim is durable; one the slot cannot take is given back.
func (l *local) refill(ctx context.Context, rf *claimState, wait func(context.Context) error) {
	if len(rf.jobs) == 0 {
		return
	}
	rf.wait = wait
	jobs, err := l.claimAwait(ctx, rf)
	if err != nil {
		return
	}
	if unrun := giveRefill(ctx, rf.queue, jobs); len(unrun) > 0 {
		go l.releaseUnrun(unrun, rf.o)
	}
}

// claimAwait waits until the claim claimApply applied is durable, and
// returns its jobs with their payloads.
func (l *local) claimAwait(ctx context.Context, c *claimState) ([]*Job, error) {
	jobs, o := c.jobs, c.o
	err := c.wait(ctx)
	if errors.Is(err, engine.ErrOutcomeUnknown) {
		// ctx ended before the claim was durable. Nobody will run the
		// jobs: once it is, release them (the attempt does not count).
		go func() {
			if c.wait(context.Background()) == nil {
				l.releaseUnrun(jobs, o)
			}
			c.putTaken()
		}()
		return nil, ctx.Err()
	}
	if err != nil {
		c.putTaken()
		return nil, err
	}
	l.startLeases(jobs, o)
	for i, j := range jobs {
		if c.encs[i] == nil {
			continue
		}
		if j.Payload, err = l.resolve(ctx, c.encs[i]); err != nil {
			// The jobs are not run: release them, and free their slots.
			go l.releaseUnrun(jobs, o)
			c.putTaken()
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

// testHookClaimWait, when set by a test, runs before each claim of
// claimWait.
var testHookClaimWait func()

// claimWait claims up to n jobs, waiting until at least one is claimable or
// ctx is done. Enqueues and due times wake it; the poll interval bounds the
// sleep.
func (l *local) claimWait(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error) {
	for {
		if err := s.waitIdle(ctx); err != nil {
			return nil, err
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
			if ql := qi.limit; ql != nil && qi.ready.Len() > 0 {
				// Held back by the rate: wake when it admits one. (Held
				// back by MaxRunning: the end of a claim wakes notify.)
				if at := ql.nextAt(l.now().UnixNano()); at != 0 && (due == 0 || at < due) {
					due = at
				}
			}
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

// slotTable holds a process's Work loops by queue: where a dispatched
// job can start (queuex.API.WithDispatch). A writer takes a slot for its
// own commits; a member takes one before it sends a commit to the writer,
// which claims the job for it in the transaction.
type slotTable struct {
	smu   sync.Mutex
	slots map[string][]*slots // guarded by smu
}

func (t *slotTable) addSlots(s *slots) {
	t.smu.Lock()
	defer t.smu.Unlock()
	if t.slots == nil {
		t.slots = map[string][]*slots{}
	}
	t.slots[s.queue] = append(t.slots[s.queue], s)
}

func (t *slotTable) removeSlots(s *slots) {
	t.smu.Lock()
	defer t.smu.Unlock()
	s.close()
	t.slots[s.queue] = slices.DeleteFunc(t.slots[s.queue], func(x *slots) bool { return x == s })
	if len(t.slots[s.queue]) == 0 {
		delete(t.slots, s.queue)
	}
}

// takeSlot takes an idle slot of a Work loop serving queue (with
// parkedOnly, of a loop parked on its writer), or returns nil.
func (t *slotTable) takeSlot(queue string, parkedOnly bool) *slots {
	t.smu.Lock()
	defer t.smu.Unlock()
	for _, s := range t.slots[queue] {
		if s.take(parkedOnly) {
			return s
		}
	}
	return nil
}

// takeSlots takes an idle slot for each dispatched enqueue of ops, before
// the commit, so that the claim granted in the transaction has somewhere
// to run. It returns them by op index (nil: none taken).
//
// With parkedOnly (a member), only the slots of a loop parked on its
// writer (its claim call there, waiting if nothing is ready) are taken:
// the writer grants a dispatched enqueue only when nothing else in its
// queue is ready, and a loop that is not parked found jobs to claim a
// moment ago, or is about to claim. A slot taken then would come back
// unused a round trip later, idle all along, and its return would wake
// the loop for nothing: at saturation, with 2 members of 16 slots, about
// 3 such wake-ups per commit call. (A parked loop's call may still be
// claiming ready jobs, when none of its claims rode a commit call first:
// such a slot comes back too, but the member was not busy.)
func (t *slotTable) takeSlots(ops []txnOp, now time.Time, parkedOnly bool) map[int]*slots {
	var slotFor map[int]*slots
	for i := range ops {
		op := &ops[i]
		// A job not due at commit time cannot be granted: take no slot.
		if op.Kind == opEnqueue && op.Dispatch && resolveTime(op.RunAt, now) <= now.UnixNano() {
			if s := t.takeSlot(op.Queue, parkedOnly); s != nil {
				if slotFor == nil {
					slotFor = map[int]*slots{}
				}
				slotFor[i] = s
			}
		}
	}
	return slotFor
}
