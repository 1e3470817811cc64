package queue

import (
	"context"
	"errors"
	"time"
)

// Enqueue adds one job to the named queue and returns once it is durable.
// With a DedupKey that matches a pending or scheduled job of the queue, it
// returns that job's ID with Duplicate set and writes nothing.
func (q *Queue) Enqueue(ctx context.Context, queue string, payload []byte, opts EnqueueOptions) (EnqueueResult, error) {
	res, err := q.Commit(ctx, new(Txn).Enqueue(queue, payload, opts))
	if err != nil {
		return EnqueueResult{}, err
	}
	return res.Enqueued[0], nil
}

// EnqueueRequest is one job of an EnqueueBatch.
type EnqueueRequest struct {
	Queue   string
	Payload []byte
	Options EnqueueOptions
}

// EnqueueBatch adds jobs atomically: all become durable together, or none.
func (q *Queue) EnqueueBatch(ctx context.Context, reqs []EnqueueRequest) ([]EnqueueResult, error) {
	t := new(Txn)
	for _, r := range reqs {
		t.Enqueue(r.Queue, r.Payload, r.Options)
	}
	res, err := q.Commit(ctx, t)
	return res.Enqueued, err
}

// Claim takes the next claimable job of the queue under a lease, or returns
// (nil, nil) when there is none. The job's attempt count rises at claim, so
// a job whose worker crashes every time still reaches its limit.
func (q *Queue) Claim(ctx context.Context, queue string) (*Job, error) {
	jobs, err := q.ClaimBatch(ctx, queue, 1)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return jobs[0], nil
}

// ClaimBatch claims up to n jobs in one transaction.
func (q *Queue) ClaimBatch(ctx context.Context, queue string, n int) ([]*Job, error) {
	if err := q.checkClaim(queue, n); err != nil {
		return nil, err
	}
	jobs, err := q.be.claim(ctx, queue, n, q.opts, nil)
	return jobs, mapErr(err)
}

// ClaimWait claims up to n jobs, waiting until at least one is claimable or
// ctx is done (then it returns ctx's error). It wakes when a job is enqueued
// or comes due; the poll interval (WithPollInterval) only bounds its sleep.
func (q *Queue) ClaimWait(ctx context.Context, queue string, n int) ([]*Job, error) {
	if err := q.checkClaim(queue, n); err != nil {
		return nil, err
	}
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

// Ack settles a claimed job as done. It fails with a *ClaimLostError,
// changing nothing, if the claim was lost.
func (q *Queue) Ack(ctx context.Context, job *Job) error {
	_, err := q.Commit(ctx, new(Txn).Ack(job))
	return err
}

// Nack settles a claimed job as failed: retried after retryAfter (0: the
// queue's exponential backoff with jitter; pass a server's Retry-After
// here), or dead-lettered if that was its last attempt.
func (q *Queue) Nack(ctx context.Context, job *Job, cause error, retryAfter time.Duration) error {
	_, err := q.Commit(ctx, new(Txn).Nack(job, cause, retryAfter))
	return err
}

// DeadLetter settles a claimed job as dead at once.
func (q *Queue) DeadLetter(ctx context.Context, job *Job, reason string) error {
	_, err := q.Commit(ctx, new(Txn).DeadLetter(job, reason))
	return err
}

// Release returns a claimed job to the queue without counting the attempt
// (see Txn.Release).
func (q *Queue) Release(ctx context.Context, job *Job) error {
	_, err := q.Commit(ctx, new(Txn).Release(job))
	return err
}

// Renew extends a claimed job's lease by the queue's lease duration. It is
// process state, not a write. It fails with a *ClaimLostError if the lease
// already expired.
func (q *Queue) Renew(job *Job) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	return q.be.renew(job.ID, job.token, q.opts)
}

// ClaimContext returns a context derived from parent that is cancelled when
// the job's claim is lost (cause: a *ClaimLostError) or the job is cancelled
// (cause: ErrJobCancelled). Call stop when done with the job.
func (q *Queue) ClaimContext(parent context.Context, job *Job) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	lost, cancelled, cause := q.be.watch(job.ID, job.token)
	done := make(chan struct{})
	go func() {
		select {
		case <-lost:
			c := cause()
			if c == nil {
				c = &ClaimLostError{JobID: job.ID}
			}
			cancel(c)
		case <-cancelled:
			cancel(ErrJobCancelled)
		case <-done:
		case <-ctx.Done():
		}
	}()
	return ctx, func() { close(done); cancel(context.Canceled) }
}

// CancelJob cancels a job: a pending or scheduled job is removed; a claimed
// job gets a durable cancel request, seen by its worker through
// ClaimContext and Job.CancelRequested.
func (q *Queue) CancelJob(ctx context.Context, id string) (CancelOutcome, error) {
	res, err := q.Commit(ctx, new(Txn).CancelJob(id))
	if err != nil {
		return 0, err
	}
	return res.Cancelled[0], nil
}

// Stats returns the counts of a queue's jobs. An unknown queue has zero
// counts.
func (q *Queue) Stats(ctx context.Context, queueName string) (Stats, error) {
	if err := q.checkOpen(); err != nil {
		return Stats{}, err
	}
	s, err := q.be.stats(ctx, queueName)
	return s, mapErr(err)
}

// Queues lists the names of the queues that have or had jobs.
func (q *Queue) Queues(ctx context.Context) ([]string, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	names, err := q.be.queues(ctx)
	return names, mapErr(err)
}

// GetJob returns a job by ID, with its payload and attempt history, or
// ErrJobNotFound.
func (q *Queue) GetJob(ctx context.Context, id string) (*Job, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	j, err := q.be.getJob(ctx, id)
	return j, mapErr(err)
}

// JobPage is one page of a job listing.
type JobPage struct {
	Jobs []*Job
	// Next is the cursor of the next page; "" on the last page.
	Next string
}

// DeadJobs lists a queue's dead jobs, oldest death first. Pass the previous
// page's Next as after; limit 0 means DefaultScanLimit.
func (q *Queue) DeadJobs(ctx context.Context, queue string, after string, limit int) (JobPage, error) {
	if err := q.checkOpen(); err != nil {
		return JobPage{}, err
	}
	if limit <= 0 {
		limit = DefaultScanLimit
	}
	jobs, next, err := q.be.deadJobs(ctx, queue, after, min(limit, MaxScanLimit))
	return JobPage{Jobs: jobs, Next: next}, mapErr(err)
}

// RequeueDead makes a dead job pending again with a fresh attempt budget
// (its history is kept).
func (q *Queue) RequeueDead(ctx context.Context, id string) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	return mapErr(q.be.requeueDead(ctx, id))
}

// IsClaimLost reports whether err says a claim was lost.
func IsClaimLost(err error) bool { return errors.Is(err, ErrClaimLost) }
