package queue

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
)

// Failover: how a process of a cluster becomes the writer or a member
// (join), follows the writer the store names (monitor, follow), takes
// over from a dead one (takeOver) and switches its backend when its role
// changes (switchTo). The timings are described in CLUSTER.md, "Failover".

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

// badListen reports whether err, from listening on ClusterConfig.Listen,
// says that no process can listen there (a host that does not resolve or
// is not this machine's, a port it may not use), as opposed to a port
// that another process holds now.
func badListen(err error) bool {
	var addrErr *net.AddrError
	var dnsErr *net.DNSError
	return errors.As(err, &addrErr) || errors.As(err, &dnsErr) ||
		errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EACCES)
}

// errNotCluster: the store's live writer is not in cluster mode.
var errNotCluster = fmt.Errorf("%w: its writer is not in cluster mode", errNoWriter)

// becomeWriter opens the store as its writer and serves the members.
func (c *clustered) becomeWriter(ctx context.Context, takeover bool) error {
	lis, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		if badListen(err) {
			// No process can serve there: say so, rather than look for
			// a writer that does not exist until ctx ends.
			c.log.Warn("stepwell: cluster: cannot listen on ClusterConfig.Listen, so this process cannot become the writer",
				"listen", c.cfg.Listen, "err", err)
			return fmt.Errorf("queue: cluster: cannot listen on %s (ClusterConfig.Listen): %w", c.cfg.Listen, err)
		}
		// The address is taken (a writer on this host serves on it):
		// this process cannot be the writer now.
		return fmt.Errorf("%w: cluster: cannot listen on %s: %v", ErrStoreLocked, c.cfg.Listen, err)
	}
	secret := make([]byte, 32)
	_, _ = crand.Read(secret)
	o := c.opts
	o.takeover = takeover
	o.clusterAddr, o.clusterSecret = advertise(c.cfg, lis.Addr()), secret
	l, err := openLocal(ctx, c.url, o, c.watches)
	if err != nil {
		_ = lis.Close()
		return mapErr(err)
	}
	srv := cluster.NewServer(lis, cluster.Config{Epoch: l.eng.Epoch(), Secret: secret, TLS: c.cfg.TLS, Logger: c.log}, l.methods())
	go func() { _ = srv.Serve() }()
	l.serveAdopted()
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
	// Commit calls go on the pipe: they are most of a member's calls, and
	// the writer answers each without waiting for anything but its WAL.
	cl, err := cluster.Dial(own.Addr, cluster.Config{Epoch: own.Epoch, Secret: own.Secret, TLS: c.cfg.TLS, Logger: c.log,
		Dialer: c.opts.clusterDialer, Pipe: []string{rpcCommit}})
	if err != nil {
		return fmt.Errorf("%w: %v", errNoWriter, err)
	}
	r := newRemote(cl, own.Epoch, c.member, c.opts, c.watches)
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
	for w := range c.watchers {
		c.watchers[w] = c.watchOn(be, c.switched, w)
	}
	c.mu.Unlock()
	if r != nil {
		r.start()
	}
	// Key watches read again from the new writer, and watch again there:
	// a key may have changed during the switch.
	c.watches.fireAll()
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
// WithHeartbeat, by which this member judges it. The heartbeat alone would
// thus make a member fence a live writer after any store outage of over
// 2.25 beats, and at once when the writer's interval is over 2.25 of the
// member's.)
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
