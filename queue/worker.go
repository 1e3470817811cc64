package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/stepwell/stepwell/internal/errtext"
	"github.com/stepwell/stepwell/internal/handoff"

	"github.com/stepwell/stepwell/internal/objstore"
)

// Handler processes one claimed job. Returning nil acknowledges it; an error
// is a failed attempt (retried with backoff, dead-lettered at the attempt
// limit), unless wrapped with Permanent, which dead-letters at once. The ctx
// is cancelled when the claim is lost, the job is cancelled, or the drain
// timeout of a stopping worker passes; context.Cause says which.
type Handler func(ctx context.Context, job *Job) error

// Permanent marks a handler error as not worth retrying: the job is
// dead-lettered at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// ErrDrainTimeout is the context cause a handler sees when a stopping
// worker's drain timeout passes.
var ErrDrainTimeout = errors.New("queue: worker drain timed out")

// WorkOptions configure Work.
type WorkOptions struct {
	// Concurrency is how many jobs run at once. Defaults to 1.
	Concurrency int
	// DrainTimeout bounds how long Work waits for running jobs after its ctx
	// is done; then their contexts are cancelled (cause ErrDrainTimeout) and,
	// once their handlers return, their claims are released (the
	// job is claimable again at once, and the attempt does not count).
	// 0: wait for them.
	DrainTimeout time.Duration
	// PollInterval overrides the Queue's poll interval (WithPollInterval)
	// for this worker.
	PollInterval time.Duration
	// manualSettle leaves settlement to the handler: the runtime's
	// (queuex.API.WithManualSettle).
	manualSettle bool
}

// Work runs h over the named queue until ctx is done, then stops claiming,
// waits for running jobs (see WorkOptions.DrainTimeout) and returns nil. It
// returns early with an error only if the store fails for good (see
// Queue.Err: ErrFenced, ...); it rides out an outage (see Health), claiming
// again once the store answers.
// Leases of long jobs are renewed automatically; a panic in h is a failed
// attempt whose error carries the panic message, and so is an h that
// calls runtime.Goexit (testing.T.FailNow does) instead of returning; an
// error whose Error method panics is read as one that says so. Enqueues
// of this process dispatched by the runtime start jobs directly in its
// idle slots; those count against Concurrency like the jobs it claims
// itself. The
// settlement the loop makes once h returned (Ack, Nack or DeadLetter of
// its job) also claims the slot's next job, in the same transaction (a
// member's: in the same call), and the slot runs it next; a stopping
// loop's claims nothing, and nor does a settlement h makes itself (h
// may work on after it: the next job would wait, its lease running).
func (q *Queue) Work(ctx context.Context, queue string, h Handler, opts WorkOptions) error {
	if err := q.checkClaim(queue, 1); err != nil {
		return err
	}
	claimOpts := q.opts
	if opts.PollInterval > 0 {
		claimOpts.pollInterval = opts.PollInterval
	}
	// Jobs run on a context that outlives ctx until the drain ends.
	jobBase, stopJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopJobs(context.Canceled)
	n := max(opts.Concurrency, 1)
	s := &slots{queue: queue, free: n, total: n, freed: make(chan struct{}, 1), done: ctx.Done()}
	stopping := func() bool { return ctx.Err() != nil || s.isClosed() }
	// A slot's goroutine, its jobs done, waits for the next job handed to
	// the loop (an idle one takes it) until the loop returns: a job does
	// not start a goroutine, nor grow a new one's stack again.
	idle, quit := make(chan slotJob), make(chan struct{})
	defer close(quit)
	// One goroutine renews the leases of all the loop's running jobs,
	// until the loop returns (after the drain).
	rn := newRenewer(q)
	go rn.run(quit)
	slotLoop := func(sj slotJob) {
		running := true
		defer func() {
			if running {
				// A handler called runtime.Goexit (t.FailNow, say), which
				// ends this goroutine whatever it does: runJob settled the
				// job, and the slot is given back here, not lost.
				s.put()
			}
		}()
		for {
			q.runSlot(stopping, jobBase, rn, sj.j, sj.carried, h, opts.manualSettle, sj.dispatched)
			running = false
			s.put()
			select {
			case sj = <-idle:
				running = true
			case <-quit:
				return
			}
		}
	}
	s.run = func(j *Job, dispatched bool, carried any) {
		sj := slotJob{j: j, dispatched: dispatched, carried: carried}
		select {
		case idle <- sj:
		default:
			go slotLoop(sj)
		}
	}
	q.be.addSlots(s)
	var runErr error
	for failures := 0; ctx.Err() == nil; {
		jobs, err := q.be.claimWait(ctx, queue, s.total, claimOpts, s)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			if q.be.err() != nil || !objstore.IsRetryable(err) {
				runErr = mapErr(err)
				break
			}
			// Transient (reading a payload during an outage): try again.
			if failures%100 == 0 {
				q.opts.logf("stepwell: claiming from queue %s failed; retrying: %v", queue, err)
			}
			failures++
			t := time.NewTimer(min(10*time.Millisecond<<min(failures, 9), 5*time.Second))
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		failures = 0
		for _, j := range jobs {
			s.run(j, false, j.carried())
		}
	}
	q.be.removeSlots(s)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	if opts.DrainTimeout > 0 {
		t := time.NewTimer(opts.DrainTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			stopJobs(ErrDrainTimeout)
			rn.drainEnded()
			<-done
		}
	} else {
		<-done
	}
	return runErr
}

// slotJob is a job handed to a slot's goroutine (slots.run).
type slotJob struct {
	j          *Job
	dispatched bool
	carried    any
}

// slots are a Work loop's job slots. The loop's claims and dispatched
// enqueues (queuex.API.WithDispatch) both take them, so that together they
// never run more than the loop's Concurrency jobs at once.
type slots struct {
	queue string
	total int                                        // Concurrency
	run   func(j *Job, dispatched bool, carried any) // runs j in a taken slot, then puts it back
	freed chan struct{}                              // signalled (capacity 1) when a slot is put back
	done  <-chan struct{}                            // the loop's ctx.Done(): no more takes
	wg    sync.WaitGroup                             // one per taken slot

	mu     sync.Mutex
	free   int
	closed bool // the loop is stopping: no more takes
	// parked: the loop's claim call is at its writer (a member's
	// long-poll, which waits there while its queue has nothing ready).
	// Only then does a member's dispatched enqueue take a slot (see
	// slotTable.takeSlots).
	parked bool
}

// take takes a free slot, if there is one and the loop is not stopping
// (and, if parkedOnly, waits on its writer for a job).
func (s *slots) take(parkedOnly bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.free == 0 || parkedOnly && !s.parked {
		return false
	}
	select {
	case <-s.done:
		return false // stopping: a job taken now would only be released
	default:
	}
	s.free--
	s.wg.Add(1)
	return true
}

// put gives back a slot taken by take.
func (s *slots) put() {
	s.mu.Lock()
	s.free++
	s.mu.Unlock()
	s.wg.Done()
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// start runs a dispatched job in the slot taken for it, with what the
// commit's context carried for it (see handoff.WithDispatched).
func (s *slots) start(j *Job, carried any) { s.run(j, true, carried) }

// waitIdle returns once s has an idle slot (every slot may run a job: one
// must come back first), or with ctx's error. A nil s has no limit.
func (s *slots) waitIdle(ctx context.Context) error {
	for s != nil && s.idle() == 0 {
		select {
		case <-s.freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// park records whether the loop's claim call is at its writer.
func (s *slots) park(on bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.parked = on
	s.mu.Unlock()
}

func (s *slots) idle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free
}

func (s *slots) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *slots) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// runSlot runs j (its handler finds carried with handoff.Carried) and then
// every job its handlers hand off, until there is none or the worker is
// stopping. A job the worker did not claim just now (waited: dispatched to
// the slot, or handed off) is admitted first.
func (q *Queue) runSlot(stopping func() bool, base context.Context, rn *renewer, j *Job, carried any, h Handler, manual, waited bool) {
	for ; j != nil; waited = true {
		if waited && !q.admit(stopping(), base, j) {
			return
		}
		ho := &handoff.Slot[*Job]{Queue: j.Queue, JobID: j.ID, Stopping: stopping, Carried: carried}
		q.runJob(handoff.With(base, ho), rn, j, h, manual)
		j, carried, _ = ho.Next()
	}
}

// admit reports whether a job claimed for a slot before the slot was free
// may start there. A stopping worker releases it instead (the attempt does
// not count). Nothing renewed its lease while it waited: if the lease ran
// out, the claim is lost (the reaper requeues the job, another worker may
// run it) and the job is skipped.
func (q *Queue) admit(stopping bool, base context.Context, j *Job) bool {
	if stopping {
		if err := q.release(context.WithoutCancel(base), j); err != nil && !IsClaimLost(err) {
			q.opts.logf("stepwell: releasing job %s failed: %v", j.ID, err)
		}
		return false
	}
	return q.renew(j) == nil
}

// runJob runs one job with lease renewal (rn's, until it is settled) and
// settles it.
func (q *Queue) runJob(base context.Context, rn *renewer, j *Job, h Handler, manual bool) {
	lease := q.opts.config(j.Queue).Lease
	cc := q.watchClaim(base, j)
	cc.handler = true // rn tells it of a drain (see onClaimEnd)
	rn.add(cc, max(lease/3, time.Millisecond))
	jctx := context.Context(cc)
	returned := false
	defer func() {
		if !returned {
			// h called runtime.Goexit: its goroutine ends after these
			// deferred calls, and nothing after callHandler runs. Its
			// attempt failed, settled as a returned error would be (the
			// slot is given back by the loop's).
			q.settleJob(base, jctx, j, errHandlerGoexit, manual)
		}
		rn.remove(cc)
		cc.stop(q)
	}()
	err := callHandler(jctx, j, h)
	returned = true
	handoff.Settling[*Job](base) // h returned: its settlement may refill the slot
	q.settleJob(base, jctx, j, err, manual)
}

// settleJob settles j once its handler returned err (or called
// runtime.Goexit: errHandlerGoexit), unless the handler settles its own
// jobs (manual) and did.
func (q *Queue) settleJob(base, jctx context.Context, j *Job, err error, manual bool) {
	// Made only to settle: the runtime's handler settles its own jobs.
	settle := func() context.Context { return context.WithoutCancel(base) }
	cause := context.Cause(jctx)
	switch {
	case IsClaimLost(cause):
		return // the reaper or a settle elsewhere owns the job now
	case manual && errors.Is(cause, ErrDrainTimeout):
		err = q.release(settle(), j) // stopped by the drain: the attempt does not count
	case manual && err != nil && (isPanic(err) || errors.Is(err, errHandlerGoexit)):
		err = q.Nack(settle(), j, err, 0)
	case manual:
		return
	case errors.Is(cause, ErrJobCancelled) || j.CancelRequested:
		err = q.Ack(settle(), j) // cancelled: the job is finished
	case errors.Is(cause, ErrDrainTimeout):
		err = q.release(settle(), j) // stopped by the drain: the attempt does not count
	case err == nil:
		err = q.Ack(settle(), j)
	case IsPermanent(err):
		err = q.DeadLetter(settle(), j, err.Error())
	default:
		err = q.Nack(settle(), j, err, 0)
	}
	if err != nil && !IsClaimLost(err) {
		q.opts.logf("stepwell: settling job %s failed: %v", j.ID, err)
	}
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

// isPanic reports whether err is a recovered handler panic (a function
// of its own: its target escapes, and only a failed job pays for it).
func isPanic(err error) bool {
	var p *panicError
	return errors.As(err, &p)
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n%s", e.value, e.stack) }

func callHandler(ctx context.Context, j *Job, h Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return errtext.Safe(h(ctx, j))
}

// errHandlerGoexit is the failure of an attempt whose handler called
// runtime.Goexit (testing.T.FailNow does) instead of returning.
var errHandlerGoexit = errors.New("queue: the handler called runtime.Goexit instead of returning")
