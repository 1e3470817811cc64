package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
)

// Stats describe one queue.
type Stats struct {
	Pending, Scheduled, Claimed, Dead int64
	// Done counts acknowledged jobs kept by the done retention.
	Done int64
	// OldestPendingAge is how long the oldest claimable job has waited; 0
	// when none is pending.
	OldestPendingAge time.Duration
	// Limit is the queue's limit (SetLimit); the zero Limit: none.
	Limit Limit
	// Throttled: the Limit holds the queue's claimable jobs back now:
	// MaxRunning of its jobs are claimed, or its token bucket is empty.
	// A Queue opened WithReadOnly does not know the writer's token
	// buckets, and judges by MaxRunning alone.
	Throttled bool
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
		if qi.limit != nil {
			s.Limit, s.Throttled = qi.limit.Limit, qi.throttled(now.UnixNano(), l.opts.readOnly)
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
