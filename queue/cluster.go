package queue

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// ClusterConfig configures cluster mode (see WithCluster).
type ClusterConfig struct {
	// Listen is the address this process serves the cluster's members on
	// while it is the writer, e.g. "127.0.0.1:0" or ":7420". A member
	// binds it only while it tries to become the writer, when the store
	// may be free.
	Listen string
	// Advertise is the address members dial, written into the store: a
	// host and a port (build it with net.JoinHostPort). It defaults to
	// Listen's address as bound, with the host name in place of an
	// unspecified host (":7420" -> "HOSTNAME:7420").
	Advertise string
	// TLS, if set, secures the cluster's calls: this process serves with
	// it as the writer (Certificates; ClientAuth and ClientCAs for mutual
	// TLS) and dials with it as a member (RootCAs; Certificates for mutual
	// TLS). Nil: plaintext HTTP/2, each call authenticated by the epoch's
	// secret only, for a trusted network.
	TLS *tls.Config
	// DialTimeout bounds how long a member waits for a writer it found in
	// the store to answer before it looks again. Defaults to 2s.
	DialTimeout time.Duration
}

// Role is what this process is to a store in cluster mode.
type Role uint8

// Roles.
const (
	// RoleWriter: this process is the store's writer; in cluster mode it
	// also serves the members.
	RoleWriter Role = iota + 1
	// RoleMember: another process is the writer; this one forwards every
	// operation to it, and takes over when the store says it is dead.
	RoleMember
	// RoleReadOnly: opened WithReadOnly; it reads the store, writes nothing.
	RoleReadOnly
)

func (r Role) String() string {
	switch r {
	case RoleWriter:
		return "writer"
	case RoleMember:
		return "member"
	case RoleReadOnly:
		return "read-only"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// WithCluster opens the store in cluster mode: any number of processes
// open the same URL with it, one is the writer and the others are members
// that forward to it, and a member takes over when the writer dies. See
// the package documentation, "Cluster mode".
func WithCluster(c ClusterConfig) Option {
	return func(o *options) error {
		if c.Listen == "" {
			return invalid("cluster: Listen must be set (e.g. \"127.0.0.1:0\")")
		}
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return invalid("cluster: Listen %q: %v", c.Listen, err)
		}
		if c.Advertise != "" {
			// Dialled by the other processes: a host is needed (an
			// address built from an unset variable has none).
			if host, port, err := net.SplitHostPort(c.Advertise); err != nil || host == "" || port == "" {
				return invalid("cluster: Advertise %q: want a host and a port members can dial", c.Advertise)
			}
		}
		if c.DialTimeout < 0 {
			return invalid("cluster: DialTimeout must not be negative")
		}
		if c.DialTimeout == 0 {
			c.DialTimeout = 2 * time.Second
		}
		o.cluster = &c
		return nil
	}
}

// Role reports what this process is to the store: RoleWriter, RoleMember
// (cluster mode only) or RoleReadOnly. A member's role changes to
// RoleWriter when it takes over, and a writer's to RoleMember if another
// process fenced it.
func (q *Queue) Role() Role {
	if c, ok := q.be.(*clustered); ok {
		return c.role()
	}
	if q.opts.readOnly {
		return RoleReadOnly
	}
	return RoleWriter
}

// clustered is the backend of a Queue in cluster mode: a local writer or a
// remote member, switched when the role changes. It retries what a change
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
	closed   bool
	wake     chan struct{} // capacity 1: look at the store now

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
		stop: make(chan struct{})}
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

// errNoWriter: the store names no writer this process could reach, and
// this process could not become it: look again.
var errNoWriter = errors.New("queue: cluster: no reachable writer")

// join makes this process the writer or a member, whichever the store
// allows now.
func (c *clustered) join(ctx context.Context) error {
	own, err := engine.ReadOwner(ctx, c.bucket)
	if err != nil {
		return err
	}
	// A live-looking writer is tried first on a bucket: becoming the
	// writer there takes watching its heartbeat for a few intervals.
	if c.bucketStore && own != nil && !own.Closed && own.Addr != "" {
		if err := c.becomeMember(ctx, own); err == nil {
			return nil
		}
	}
	err = c.becomeWriter(ctx, false)
	// Locked: a live writer holds the store. Fenced: a member took over
	// while this process was opening it (both fenced the dead writer; the
	// later one won). Either way another process is the writer: join it.
	if err == nil || !errors.Is(err, ErrStoreLocked) && !errors.Is(err, engine.ErrFenced) {
		return err
	}
	if own, err = engine.ReadOwner(ctx, c.bucket); err != nil {
		return err
	}
	if own != nil && !own.Closed && own.Addr == "" {
		// The writer serves no members: opened without WithCluster (or
		// it has just opened and not written its address yet).
		return errNotCluster
	}
	return c.becomeMember(ctx, own)
}

// errNotCluster: the store's live writer is not in cluster mode.
var errNotCluster = fmt.Errorf("%w: its writer is not in cluster mode", errNoWriter)

// becomeWriter opens the store as its writer and serves the members.
func (c *clustered) becomeWriter(ctx context.Context, takeover bool) error {
	lis, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		// The address is taken (a writer on this host serves on it):
		// this process cannot be the writer now.
		return fmt.Errorf("%w: cluster: cannot listen on %s: %v", ErrStoreLocked, c.cfg.Listen, err)
	}
	secret := make([]byte, 32)
	_, _ = crand.Read(secret)
	o := c.opts
	o.takeover = takeover
	o.clusterAddr, o.clusterSecret = advertise(c.cfg, lis.Addr()), secret
	l, err := openLocal(ctx, c.url, o)
	if err != nil {
		_ = lis.Close()
		return mapErr(err)
	}
	srv := cluster.NewServer(lis, cluster.Config{Epoch: l.eng.Epoch(), Secret: secret, TLS: c.cfg.TLS, Logger: c.log}, l.methods())
	go func() { _ = srv.Serve() }()
	c.switchTo(l, nil, srv, l.eng.Epoch())
	c.log.Info("stepwell: cluster: this process is the writer", "addr", o.clusterAddr, "epoch", l.eng.Epoch())
	return nil
}

// advertise is the address members dial.
func advertise(cfg ClusterConfig, bound net.Addr) string {
	if cfg.Advertise != "" {
		return cfg.Advertise
	}
	host, port, _ := net.SplitHostPort(bound.String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// becomeMember dials the writer the owner object names.
func (c *clustered) becomeMember(ctx context.Context, own *format.Owner) error {
	if own == nil || own.Closed || own.Addr == "" || len(own.Secret) == 0 {
		return errNoWriter
	}
	cl, err := cluster.Dial(own.Addr, cluster.Config{Epoch: own.Epoch, Secret: own.Secret, TLS: c.cfg.TLS, Logger: c.log, Dialer: c.opts.clusterDialer})
	if err != nil {
		return fmt.Errorf("%w: %v", errNoWriter, err)
	}
	r := newRemote(cl, own.Epoch, c.member, c.opts)
	pctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	err = r.ping(pctx)
	cancel()
	if err != nil {
		_ = cl.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: %v", errNoWriter, own.Addr, err)
	}
	c.switchTo(r, r, nil, own.Epoch)
	c.log.Info("stepwell: cluster: this process is a member", "writer", own.Addr, "epoch", own.Epoch)
	return nil
}

// switchTo makes be (a *local, or r) the backend: the Work loops and the
// claims of running jobs move to it, and whatever waited for a writer
// retries.
func (c *clustered) switchTo(be backend, r *remote, srv *cluster.Server, epoch uint64) {
	c.mu.Lock()
	old, oldRem, oldSrv := c.cur, c.rem, c.srv
	c.cur, c.rem, c.srv, c.epoch = be, r, srv, epoch
	c.loc, _ = be.(*local)
	slots := c.slots
	var held []claimRef
	if old != nil {
		held = old.heldClaims()
	}
	be.adopt(held)
	for _, s := range slots {
		be.addSlots(s)
	}
	close(c.switched)
	c.switched = make(chan struct{})
	c.mu.Unlock()
	if r != nil {
		r.start()
	}
	// What the old backend still holds is dropped without waiting: a
	// deposed writer's engine has failed already, and a remote's writer is
	// gone.
	if oldSrv != nil {
		oldSrv.Stop()
	}
	if oldRem != nil {
		oldRem.replaced.Store(true)
		go func() { _ = oldRem.close(context.Background()) }()
	} else if l, ok := old.(*local); ok {
		go func() { _ = l.close(context.Background()) }()
	}
}

func (c *clustered) role() Role {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loc != nil && !errors.Is(c.loc.err(), engine.ErrFenced) {
		return RoleWriter
	}
	return RoleMember // a fenced writer is a member looking for the writer
}

// current returns the backend and the channel closed when it is replaced.
func (c *clustered) current() (backend, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur, c.switched
}

// lookNow asks the monitor to look at the store at once.
func (c *clustered) lookNow() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// monitor watches the store while this process runs: a member follows the
// writer the owner object names, and takes over once the store says the
// writer is dead (a file:// lock free, tried as soon as the connection to
// the writer breaks, then every 200ms while it stays broken, and every 2s
// besides; a bucket
// heartbeat seen unchanged for 2.25 intervals, read every quarter
// interval, then a random pause of up to a quarter interval: within 3
// intervals of the last beat; or a clean
// Close); a writer fenced by another becomes a
// member. Takeover is decided by the store alone, never by a failed call:
// a member cut off from a live writer waits.
func (c *clustered) monitor() {
	defer c.wg.Done()
	every := 200 * time.Millisecond
	if c.bucketStore {
		every = max(c.opts.heartbeat/4, 50*time.Millisecond)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	var lastBeat uint64
	var lastEpoch uint64
	beatSeen := time.Now()
	var woke *remote // the remote whose loss woke the monitor already
	var lockTried time.Time
	for {
		c.mu.Lock()
		rem, loc := c.rem, c.loc
		c.mu.Unlock()
		var gone <-chan struct{}
		if rem != nil && rem != woke {
			gone = rem.gone
		}
		select {
		case <-t.C:
		case <-gone:
			woke = rem // from now on, look again at the ticker's pace
		case <-c.wake:
		case <-c.stop:
			return
		}
		if loc != nil {
			if errors.Is(loc.err(), engine.ErrFenced) {
				c.log.Warn("stepwell: cluster: this writer was fenced; joining as a member")
				c.rejoin(ctx)
			}
			continue
		}
		lost := rem != nil && isClosed(rem.gone) // the connection to the writer broke
		if !c.bucketStore {
			// file://: the lock holder is the writer, and a free lock a
			// dead (or closed) writer. A dead writer's connections break
			// with it, so the lock is tried then, and every 2s besides.
			if lost || time.Since(lockTried) >= 2*time.Second {
				lockTried = time.Now()
				if err := c.becomeWriter(ctx, false); err == nil {
					continue
				}
			}
			if lost {
				c.follow(ctx)
			}
			continue
		}
		own, err := engine.ReadOwner(ctx, c.bucket)
		if err != nil || own == nil {
			continue
		}
		c.mu.Lock()
		epoch := c.epoch
		c.mu.Unlock()
		if own.Epoch != lastEpoch || own.Beat != lastBeat {
			lastEpoch, lastBeat, beatSeen = own.Epoch, own.Beat, time.Now()
		}
		switch {
		case own.Closed:
			c.takeOver(ctx, false)
		case time.Since(beatSeen) > c.opts.heartbeat*9/4:
			// The heartbeat stopped: the writer is dead.
			c.takeOver(ctx, true)
			beatSeen = time.Now()
		case own.Epoch != epoch || lost:
			c.follow(ctx)
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// follow dials the writer the owner object names now, if it is not the one
// this member calls.
func (c *clustered) follow(ctx context.Context) {
	own, err := engine.ReadOwner(ctx, c.bucket)
	if err != nil || own == nil {
		return
	}
	c.mu.Lock()
	same := own.Epoch == c.epoch && c.rem != nil && !isClosed(c.rem.gone)
	c.mu.Unlock()
	if same {
		return
	}
	if err := c.becomeMember(ctx, own); err != nil && ctx.Err() == nil {
		c.log.Debug("stepwell: cluster: the writer named in the store does not answer yet", "addr", own.Addr, "err", err)
	}
}

// takeOver makes this member the writer, once the store says the writer
// is dead; with takeover, by fencing it. Members racing for it are spread
// out, and each looks again before fencing, and asks the writer: one that
// answers is alive, whatever its heartbeat shows. (It stops beating while
// the store does not answer it, and resumes only once its requests' own
// retries do; its interval may be longer than this process's
// WithHeartbeat, by which this member judges it. Before, either made a
// member fence a live writer: after any store outage of over 2.25 beats,
// and at once when the writer's interval was over 2.25 of the member's.)
// A writer cut off from the store but not from its members is waited for,
// as a single process waits out an outage.
func (c *clustered) takeOver(ctx context.Context, fence bool) {
	if fence {
		select {
		case <-time.After(rand.N(c.opts.heartbeat/4 + time.Millisecond)):
		case <-ctx.Done():
			return
		}
		own, err := engine.ReadOwner(ctx, c.bucket)
		c.mu.Lock()
		epoch := c.epoch
		c.mu.Unlock()
		if err != nil || own != nil && own.Epoch != epoch {
			c.follow(ctx) // another member was faster
			return
		}
		if c.writerAnswers(ctx) {
			return
		}
	}
	if err := c.becomeWriter(ctx, fence); err != nil {
		c.log.Debug("stepwell: cluster: taking over failed", "err", err)
		c.follow(ctx)
	}
}

// writerAnswers reports whether the writer this member calls answers a
// health call within DialTimeout.
func (c *clustered) writerAnswers(ctx context.Context) bool {
	c.mu.Lock()
	r := c.rem
	c.mu.Unlock()
	if r == nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	return r.ping(pctx) == nil
}

// rejoin makes a deposed writer a member of the writer that fenced it.
func (c *clustered) rejoin(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := c.join(ctx)
		if err == nil {
			return
		}
		select {
		case <-time.After(min(20*time.Millisecond<<min(attempt, 6), time.Second)):
		case <-ctx.Done():
		}
	}
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

// retrySafe reports whether a transaction cannot apply twice: one of its
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
	return false
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

// watch reports a claim's loss and cancel across role changes: it follows
// the claim from backend to backend.
func (c *clustered) watch(id string, token uint64) (lost, cancel <-chan struct{}, cause func() error) {
	lostC, cancelC := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var why error
	go func() {
		cancelled := false
		for { // once per backend
			be, switched := c.current()
			l, cn, cs := be.watch(id, token)
		wait:
			for {
				if cancelled {
					cn = nil
				}
				select {
				case <-l:
					if isClosed(switched) {
						break wait // the claim moved to the next backend
					}
					mu.Lock()
					why = cs()
					mu.Unlock()
					close(lostC)
					return
				case <-cn:
					cancelled = true
					close(cancelC)
				case <-switched:
					break wait
				case <-c.stop:
					return
				}
			}
		}
	}()
	return lostC, cancelC, func() error {
		mu.Lock()
		defer mu.Unlock()
		return why
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
	}
	if rem != nil {
		err = rem.close(ctx)
	}
	_ = c.bucket.Close()
	return err
}
