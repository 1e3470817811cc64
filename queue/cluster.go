package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
)

// clustered is the backend of a Queue in cluster mode: it sends each call
// to the backend of this process's current role, a local writer
// (cluster_writer.go serves the members) or a remote member
// (cluster_member.go), switched when the role changes (cluster_failover.go). It retries what a change
// of writer interrupted (see do) and carries the claims of running jobs
// across the change (see switchTo).
type clustered struct {
	url         string
	opts        options
	cfg         ClusterConfig
	member      string // this process's member ID
	bucket      objstore.Bucket
	log         *slog.Logger
	bucketStore bool // no OS lock: liveness comes from the owner heartbeat

	mu       sync.Mutex
	cur      backend
	loc      *local // cur, when the writer
	rem      *remote
	srv      *cluster.Server
	epoch    uint64
	switched chan struct{} // closed at the next switch
	slots    []*slots      // Work loops, moved to each new backend
	// watchers: the claim watches of running jobs, registered again with
	// each new backend; each maps to its registration with the current one.
	watchers map[*claimWatch]*claimWatch
	closed   bool
	wake     chan struct{} // capacity 1: look at the store now
	watches  *watchSet     // key watches, shared by each role's backend in turn

	stop chan struct{}
	wg   sync.WaitGroup
}

func openClustered(ctx context.Context, rawURL string, o options) (*clustered, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if u.Scheme == "mem" {
		return nil, invalid("cluster: a mem:// store cannot be shared between processes")
	}
	bucket, err := objstore.Open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	_, locks := objstore.AsLocker(bucket)
	c := &clustered{url: rawURL, opts: o, cfg: *o.cluster, member: ulid.Make().String(), bucket: bucket,
		log: o.logger, bucketStore: !locks, switched: make(chan struct{}), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), watches: newWatchSet()}
	if c.log == nil {
		c.log = slog.Default()
	}
	var notCluster time.Time // since when the writer was seen serving no members
	for attempt := 0; ; attempt++ {
		err := c.join(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errNoWriter) {
			_ = bucket.Close()
			return nil, err
		}
		if !errors.Is(err, errNotCluster) {
			notCluster = time.Time{}
		} else if notCluster.IsZero() {
			notCluster = time.Now()
		} else if time.Since(notCluster) > max(2*o.heartbeat, 2*time.Second) {
			_ = bucket.Close()
			return nil, fmt.Errorf("%w: its writer is not in cluster mode: open it WithCluster too, so that other processes join it", ErrStoreLocked)
		}
		select {
		case <-time.After(min(20*time.Millisecond<<min(attempt, 6), time.Second)):
		case <-ctx.Done():
			_ = bucket.Close()
			return nil, fmt.Errorf("queue: cluster: no writer found nor became one: %w (%v)", ctx.Err(), err)
		}
	}
	c.wg.Add(1)
	go c.monitor()
	return c, nil
}

// do runs f on the current backend, and again on the next one while the
// writer it reached is gone, until ctx ends. A call whose outcome the
// failure left unknown is retried only if retrySafe: a second application
// of it would fail rather than apply twice.
func (c *clustered) do(ctx context.Context, retrySafe bool, f func(be backend) error) error {
	for attempt := 0; ; attempt++ {
		be, switched := c.current()
		err := f(be)
		if err == nil || !c.writerGone(be, err) {
			return err
		}
		var lost *outcomeLostError
		if errors.As(err, &lost) && !retrySafe {
			return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
		}
		c.lookNow()
		t := time.NewTimer(min(10*time.Millisecond<<min(attempt, 7), time.Second))
		select {
		case <-switched:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if errors.As(err, &lost) {
				return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
			}
			return ctx.Err()
		case <-c.stop:
			t.Stop()
			return ErrClosed
		}
		t.Stop()
	}
}

// writerGone reports whether err from be means the writer is gone (this
// process's own engine fenced, or a remote writer closed, fenced or
// unreachable), so that the call should go to the next writer.
func (c *clustered) writerGone(be backend, err error) bool {
	if errors.Is(err, errWriterGone) {
		return true
	}
	// engine.ErrFenced: the local backend returns the engine's errors
	// (queue.ErrFenced wraps it; the engine's own do not wrap that).
	if _, ok := be.(*local); ok && errors.Is(err, engine.ErrFenced) {
		return true
	}
	return false
}

// retrySafe reports whether a transaction cannot apply twice, or applying
// it twice does no harm (SetLimit's, which puts the same record): one of its
// operations fails when applied a second time (a settlement by its claim
// token, a compare-and-put or -delete that changes its key, an enqueue
// with a JobID, a RequeueDead), and a transaction applies whole or not at
// all.
func retrySafe(ops []txnOp) bool {
	for _, op := range ops {
		switch op.Kind {
		case opAck, opNack, opDeadLetter, opRelease, opCompareAndDelete, opRequeueDead:
			return true
		case opCompareAndPut:
			if op.Absent || !bytes.Equal(op.Expect, op.Value) {
				return true
			}
		case opEnqueue:
			if op.JobID != "" {
				return true
			}
		}
	}
	// SetLimit's transaction (its one op) puts the same record again.
	return len(ops) == 1 && ops[0].Kind == opSetLimit
}

func (c *clustered) commit(ctx context.Context, ops []txnOp, o options) (res TxnResult, err error) {
	err = c.do(ctx, retrySafe(ops), func(be backend) error {
		res, err = be.commit(ctx, ops, o)
		return err
	})
	return res, err
}

func (c *clustered) get(ctx context.Context, key string) (v []byte, err error) {
	err = c.do(ctx, true, func(be backend) error { v, err = be.get(ctx, key); return err })
	return v, err
}

func (c *clustered) scan(ctx context.Context, prefix, after string, limit int) (kvs []KV, more bool, err error) {
	err = c.do(ctx, true, func(be backend) error { kvs, more, err = be.scan(ctx, prefix, after, limit); return err })
	return kvs, more, err
}

func (c *clustered) claim(ctx context.Context, queue string, n int, o options, s *slots) (jobs []*Job, err error) {
	err = c.do(ctx, true, func(be backend) error { jobs, err = be.claim(ctx, queue, n, o, s); return err })
	return jobs, err
}

func (c *clustered) claimWait(ctx context.Context, queue string, n int, o options, s *slots) (jobs []*Job, err error) {
	err = c.do(ctx, true, func(be backend) error { jobs, err = be.claimWait(ctx, queue, n, o, s); return err })
	return jobs, err
}

func (c *clustered) addSlots(s *slots) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slots = append(c.slots, s)
	c.cur.addSlots(s)
}

func (c *clustered) removeSlots(s *slots) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.slots {
		if x == s {
			c.slots = append(c.slots[:i], c.slots[i+1:]...)
			break
		}
	}
	c.cur.removeSlots(s)
}

func (c *clustered) renew(id string, token uint64, o options) error {
	be, _ := c.current()
	err := be.renew(id, token, o)
	if err != nil && c.writerGone(be, err) {
		return nil // the claim stands until the next writer says otherwise
	}
	return err
}

// watch follows a claim's loss and cancel across role changes: w is
// registered with the current backend, and again with each next one
// (switchTo) while it is watched; what an earlier backend tells of the
// claim once it was replaced is not w's (the claim moved on).
func (c *clustered) watch(w *claimWatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watchers == nil {
		c.watchers = map[*claimWatch]*claimWatch{}
	}
	c.watchers[w] = c.watchOn(c.cur, c.switched, w)
}

// watchOn registers w with be, the backend until switched.
//
// REQUIRES: c.mu held.
func (c *clustered) watchOn(be backend, switched chan struct{}, w *claimWatch) *claimWatch {
	in := &claimWatch{id: w.id, token: w.token}
	in.tell = func(cause error) {
		if !isClosed(switched) {
			w.tell(cause)
		}
	}
	be.watch(in)
	return in
}

func (c *clustered) unwatch(w *claimWatch) {
	c.mu.Lock()
	in := c.watchers[w]
	delete(c.watchers, w)
	be := c.cur
	c.mu.Unlock()
	if in != nil {
		be.unwatch(in)
	}
}

func (c *clustered) stats(ctx context.Context, queue string) (s Stats, err error) {
	err = c.do(ctx, true, func(be backend) error { s, err = be.stats(ctx, queue); return err })
	return s, err
}

func (c *clustered) queues(ctx context.Context) (names []string, err error) {
	err = c.do(ctx, true, func(be backend) error { names, err = be.queues(ctx); return err })
	return names, err
}

func (c *clustered) limits(ctx context.Context) (m map[string]Limit, err error) {
	err = c.do(ctx, true, func(be backend) error { m, err = be.limits(ctx); return err })
	return m, err
}

func (c *clustered) getJob(ctx context.Context, id string) (j *Job, err error) {
	err = c.do(ctx, true, func(be backend) error { j, err = be.getJob(ctx, id); return err })
	return j, err
}

func (c *clustered) deadJobs(ctx context.Context, queue, after string, limit int) (jobs []*Job, next string, err error) {
	err = c.do(ctx, true, func(be backend) error { jobs, next, err = be.deadJobs(ctx, queue, after, limit); return err })
	return jobs, next, err
}

func (c *clustered) requeueDead(ctx context.Context, id string) error {
	return c.do(ctx, true, func(be backend) error { return be.requeueDead(ctx, id) })
}

func (c *clustered) refresh(context.Context) error { return nil }

func (c *clustered) storageStats() StorageStats {
	be, _ := c.current()
	return be.storageStats()
}

func (c *clustered) health() Health {
	be, _ := c.current()
	return be.health()
}

func (c *clustered) heldClaims() []claimRef {
	be, _ := c.current()
	return be.heldClaims()
}

func (c *clustered) adopt([]claimRef) {}

// err reports a final error: a writer's own failure other than being
// fenced (a member then takes over), or nil.
func (c *clustered) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.loc != nil {
		if err := c.loc.err(); err != nil && !errors.Is(err, engine.ErrFenced) {
			return err
		}
	}
	return nil
}

// close leaves the cluster. A writer tells its members first (their
// long-polls return), lets the calls in progress finish, then closes the
// store, which marks it free: a member takes over at once.
func (c *clustered) close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	c.mu.Unlock()
	c.wg.Wait()
	c.mu.Lock()
	loc, rem, srv := c.loc, c.rem, c.srv
	c.mu.Unlock()
	var err error
	if loc != nil {
		loc.members.close()
		if srv != nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			srv.GracefulStop(sctx)
			cancel()
		}
		err = loc.close(ctx)
		if errors.Is(err, engine.ErrFenced) && !errors.Is(err, engine.ErrOutcomeUnknown) {
			// A writer fenced before it joined the next one: a member
			// looking for its writer (see role), not a failed Queue. Its
			// engine acknowledged nothing after the fence, and the calls it
			// failed were told.
			err = nil
		}
	}
	if rem != nil {
		err = rem.close(ctx)
	}
	_ = c.bucket.Close()
	return err
}
