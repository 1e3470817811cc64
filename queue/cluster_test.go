package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/stepwell/stepwell/internal/testenv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// openMember opens url in cluster mode as a process of its own would: not
// through this process's registry, which would hand back the writer.
func openMember(t *testing.T, url string, opts ...Option) *Queue {
	t.Helper()
	o := defaultOptions()
	for _, opt := range append([]Option{WithCluster(ClusterConfig{Listen: "127.0.0.1:0"})}, opts...) {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := openClustered(ctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	q := &Queue{url: url, opts: o, be: c, sh: &shared{be: c, refs: 1}}
	t.Cleanup(func() { _ = q.Close(context.Background()) })
	return q
}

// advertised reads the owner object of w's store, in which w, the writer,
// advertises its address and its epoch's secret.
func advertised(t *testing.T, w *Queue) *format.Owner {
	t.Helper()
	own, err := engine.ReadOwner(context.Background(), w.be.(*clustered).bucket)
	if err != nil || own == nil || own.Addr == "" || len(own.Secret) == 0 {
		t.Fatalf("owner = %+v, %v", own, err)
	}
	return own
}

func clusterStores(t *testing.T) map[string]func(testing.TB) string {
	return map[string]func(testing.TB) string{
		"file": func(t testing.TB) string { return "file://" + t.TempDir() },
		"s3": func(t testing.TB) string {
			return testenv.S3(t)
		},
	}
}

func waitRole(t *testing.T, q *Queue, want Role, within time.Duration) time.Duration {
	t.Helper()
	return testenv.Eventually(t, within, "role "+want.String(), func() bool { return q.Role() == want })
}

// WithCluster refuses addresses whose port is no port, and an Advertise
// address members cannot dial (port 0), with ErrInvalidOption; it used to
// take them, and Open then looked for a writer until ctx ended, or members
// dialled port 0. (Checked on the option itself: on a mem:// store, which
// cannot be shared, every WithCluster fails Open.)
func TestClusterConfigPorts(t *testing.T) {
	for cfg, ok := range map[ClusterConfig]bool{
		{Listen: "127.0.0.1:0"}:                           true,
		{Listen: ":7420"}:                                 true,
		{Listen: "127.0.0.1:65535"}:                       true,
		{Listen: ":7420", Advertise: "10.0.0.5:7420"}:     true,
		{Listen: "127.0.0.1:99999"}:                       false,
		{Listen: "127.0.0.1:abc"}:                         false,
		{Listen: "127.0.0.1:-1"}:                          false,
		{Listen: ":7420", Advertise: "127.0.0.1:0"}:       false,
		{Listen: ":7420", Advertise: "127.0.0.1:abc"}:     false,
		{Listen: ":7420", Advertise: "host:99999"}:        false,
		{Listen: ":7420", Advertise: "host:"}:             false,
		{Listen: ":7420", Advertise: "[::1]:7420"}:        true,
		{Listen: ":7420", Advertise: "pod.example.:7420"}: true,
	} {
		o := defaultOptions()
		err := WithCluster(cfg)(&o)
		if ok && err != nil || !ok && !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithCluster(%+v) = %v, want ok %v", cfg, err, ok)
		}
	}
}

// An Open in cluster mode of a free store, whose Listen address no
// process can listen on (192.0.2.1 is a documentation address, on no
// host), fails at once saying why. It used to take the failure for a
// writer holding the port and look for that writer until ctx ended ("no
// writer found nor became one").
func TestClusterUnusableListenFailsOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "file://" + t.TempDir()
	start := time.Now()
	q, err := Open(ctx, url, WithCluster(ClusterConfig{Listen: "192.0.2.1:0"}))
	if err == nil {
		q.Close(ctx)
		t.Fatal("Open succeeded")
	}
	if !strings.Contains(err.Error(), "cannot listen on 192.0.2.1:0") || ctx.Err() != nil || errors.Is(err, ErrStoreLocked) {
		t.Fatalf("Open = %v (after %v), want it to say it cannot listen", err, time.Since(start))
	}
	// Nothing else stops the store being opened.
	q, err = Open(ctx, url, WithCluster(ClusterConfig{Listen: "127.0.0.1:0"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every operation works from a member, with the writer's guarantees.
func TestClusterMemberOperations(t *testing.T) {
	for name, store := range clusterStores(t) {
		t.Run(name, func(t *testing.T) {
			url := store(t)
			ctx := context.Background()
			w := openMember(t, url, WithLease(5*time.Second), WithHeartbeat(200*time.Millisecond))
			m := openMember(t, url, WithLease(5*time.Second), WithHeartbeat(200*time.Millisecond))
			if w.Role() != RoleWriter || m.Role() != RoleMember {
				t.Fatalf("roles: %v, %v", w.Role(), m.Role())
			}
			// KV, read-your-writes through the member.
			if err := m.Put(ctx, []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			for _, q := range []*Queue{w, m} {
				if v, err := q.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
					t.Fatalf("Get = %q, %v", v, err)
				}
			}
			if err := m.CompareAndPut(ctx, []byte("k"), []byte("x"), []byte("y")); !errors.Is(err, ErrConditionFailed) {
				t.Fatalf("CompareAndPut with a wrong old value: %v", err)
			}
			if _, err := m.Get(ctx, []byte("missing")); !errors.Is(err, ErrKeyNotFound) {
				t.Fatalf("Get of a missing key: %v", err)
			}
			page, err := m.Scan(ctx, []byte("k"), ScanOptions{})
			if err != nil || len(page.Items) != 1 {
				t.Fatalf("Scan = %+v, %v", page, err)
			}
			// Enqueue from the member, claim there, ack; typed errors.
			res, err := m.Enqueue(ctx, "q", []byte("p1"), EnqueueOptions{JobID: "job-1", Headers: map[string]string{"h": "1"}})
			if err != nil || res.JobID != "job-1" {
				t.Fatalf("Enqueue = %+v, %v", res, err)
			}
			if _, err := m.Enqueue(ctx, "q", nil, EnqueueOptions{JobID: "job-1"}); !errors.Is(err, ErrJobExists) {
				t.Fatalf("second enqueue of job-1: %v", err)
			}
			j, err := m.claimOne(ctx, "q")
			if err != nil || j == nil || string(j.Payload) != "p1" || j.Headers["h"] != "1" || j.Attempt != 1 {
				t.Fatalf("Claim = %+v, %v", j, err)
			}
			if st, err := w.Stats(ctx, "q"); err != nil || st.Claimed != 1 {
				t.Fatalf("writer's Stats = %+v, %v", st, err)
			}
			if err := m.renew(j); err != nil {
				t.Fatal(err)
			}
			if err := m.Ack(ctx, j); err != nil {
				t.Fatal(err)
			}
			if err := m.Ack(ctx, j); !IsClaimLost(err) {
				t.Fatalf("second Ack: %v, want a lost claim", err)
			}
			if _, err := m.GetJob(ctx, "job-1"); !errors.Is(err, ErrJobNotFound) {
				t.Fatalf("GetJob of an acked job: %v", err)
			}
			// Dead letters: list and requeue from the member.
			if _, err := w.Enqueue(ctx, "q", []byte("p2"), EnqueueOptions{JobID: "job-2", MaxAttempts: 1}); err != nil {
				t.Fatal(err)
			}
			j2, err := m.claimOne(ctx, "q")
			if err != nil || j2 == nil {
				t.Fatalf("Claim = %v, %v", j2, err)
			}
			if err := m.DeadLetter(ctx, j2, "bad"); err != nil {
				t.Fatal(err)
			}
			dead, err := m.DeadJobs(ctx, "q", "", 10)
			if err != nil || len(dead.Jobs) != 1 || dead.Jobs[0].ID != "job-2" {
				t.Fatalf("DeadJobs = %+v, %v", dead, err)
			}
			if err := m.RequeueDead(ctx, "job-2"); err != nil {
				t.Fatal(err)
			}
			if err := m.RequeueDead(ctx, "job-2"); !errors.Is(err, ErrNotDead) {
				t.Fatalf("second RequeueDead: %v", err)
			}
			names, err := m.Queues(ctx)
			if err != nil || len(names) == 0 {
				t.Fatalf("Queues = %v, %v", names, err)
			}
			if st := m.StorageStats(); st.ClusterCalls == 0 || st.Puts != 0 {
				t.Fatalf("member's StorageStats = %+v: want calls and no object requests", st)
			}
		})
	}
}

// A cancel from any process reaches the step running in another: the
// writer tells the member holding the claim.
func TestClusterCancelReachesMember(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	w := openMember(t, url)
	m := openMember(t, url)
	if _, err := w.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{JobID: "long"}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	cause := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- m.Work(wctx, "q", func(ctx context.Context, j *Job) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return context.Cause(ctx)
		}, WorkOptions{})
	}()
	<-started
	out, err := w.CancelJob(ctx, "long")
	if err != nil || out != CancelRequested {
		t.Fatalf("CancelJob = %v, %v", out, err)
	}
	select {
	case c := <-cause:
		if !errors.Is(c, ErrJobCancelled) {
			t.Fatalf("the member's handler saw %v, want ErrJobCancelled", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the member's handler was not cancelled")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A writer's clean Close hands the store to a member at once, and the
// member's running job keeps its claim: it settles with the token it got
// from the old writer.
func TestClusterCleanHandover(t *testing.T) {
	for name, store := range clusterStores(t) {
		t.Run(name, func(t *testing.T) {
			url := store(t)
			ctx := context.Background()
			w := openMember(t, url, WithHeartbeat(200*time.Millisecond))
			m := openMember(t, url, WithHeartbeat(200*time.Millisecond))
			if _, err := m.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{JobID: "held"}); err != nil {
				t.Fatal(err)
			}
			j, err := m.claimOne(ctx, "q")
			if err != nil || j == nil {
				t.Fatalf("Claim = %v, %v", j, err)
			}
			jctx, stop := m.claimContext(ctx, j)
			defer stop()
			began := time.Now()
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			took := waitRole(t, m, RoleWriter, 10*time.Second)
			t.Logf("handover after Close: %v (Close took %v)", took, time.Since(began)-took)
			if err := jctx.Err(); err != nil {
				t.Fatalf("the claim's context ended at the handover: %v", context.Cause(jctx))
			}
			if err := m.renew(j); err != nil {
				t.Fatalf("Renew after the handover: %v", err)
			}
			// The claim's watch moved to the new writer: its cancel reaches
			// the context.
			if out, err := m.CancelJob(ctx, "held"); err != nil || out != CancelRequested {
				t.Fatalf("CancelJob after the handover = %v, %v", out, err)
			}
			testenv.Eventually(t, 10*time.Second, "the cancel to reach the claim's context", func() bool {
				return errors.Is(context.Cause(jctx), ErrJobCancelled)
			})
			if err := m.Ack(ctx, j); err != nil {
				t.Fatalf("Ack after the handover: %v", err)
			}
			if _, err := m.GetJob(ctx, "held"); !errors.Is(err, ErrJobNotFound) {
				t.Fatalf("GetJob after the ack: %v", err)
			}
		})
	}
}

// Calls without the epoch's secret, with a wrong one, or for another epoch
// are refused and change nothing.
func TestClusterRefusesBadCalls(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	w := openMember(t, url)
	own := advertised(t, w)
	put := &commitReq{Member: "intruder", Txns: [][]txnOp{{{Kind: opPut, Key: []byte("evil"), Value: []byte("x")}}}}
	for name, cfg := range map[string]cluster.Config{
		"wrong secret": {Epoch: own.Epoch, Secret: []byte("not the secret")},
		"stale epoch":  {Epoch: own.Epoch - 1, Secret: own.Secret},
	} {
		cl, err := cluster.Dial(own.Addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var reply commitReply
		err = cl.Call(ctx, rpcCommit, put, &reply)
		_ = cl.Close()
		if !errors.Is(err, cluster.ErrUnauthenticated) && !errors.Is(err, cluster.ErrStaleEpoch) {
			t.Fatalf("%s: call = %v, want a refusal", name, err)
		}
	}
	if _, err := w.Get(ctx, []byte("evil")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("a refused call changed the store: Get = %v", err)
	}
	// The right secret works: the test above could not pass by accident.
	cl, err := cluster.Dial(own.Addr, cluster.Config{Epoch: own.Epoch, Secret: own.Secret})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var reply commitReply
	if err := cl.Call(ctx, rpcCommit, put, &reply); err != nil || len(reply.Results) != 1 || reply.Results[0].Err != nil {
		t.Fatalf("an authenticated call: %+v, %v", reply, err)
	}
	if _, err := w.Get(ctx, []byte("evil")); err != nil {
		t.Fatal(err)
	}
}

// Many members' commits share calls: the member's commit batching.
func TestClusterCommitsShareCalls(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	_ = openMember(t, url)
	m := openMember(t, url)
	const n = 400
	var failed atomic.Int32
	done := make(chan struct{})
	before := m.StorageStats().ClusterCalls
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := m.Put(ctx, []byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
				failed.Add(1)
			}
		}()
	}
	for range n {
		<-done
	}
	if failed.Load() > 0 {
		t.Fatalf("%d puts failed", failed.Load())
	}
	calls := m.StorageStats().ClusterCalls - before
	t.Logf("%d concurrent puts took %d commit calls", n, calls)
	if calls >= n {
		t.Fatalf("%d puts took %d calls: no batching", n, calls)
	}
}

// cuttable is a dialer whose connections a test can cut, and keep cut.
type cuttable struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cuttable) dial(ctx context.Context, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("test: network cut")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cuttable) setCut(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.conns = nil
	}
}

func withDialer(d func(context.Context, string) (net.Conn, error)) Option {
	return func(o *options) error { o.clusterDialer = d; return nil }
}

// A member cut off from the writer does not fence it: takeover is decided
// by the store, which says the writer lives. The cut-off member's claim
// runs out after its lease, on both sides: its handler is told, and the
// writer gives the job to another member.
func TestClusterPartitionedMemberDoesNotFence(t *testing.T) {
	for name, store := range clusterStores(t) {
		t.Run(name, func(t *testing.T) {
			url := store(t)
			ctx := context.Background()
			const lease, hb = time.Second, 200 * time.Millisecond
			opts := []Option{WithLease(lease), WithHeartbeat(hb)}
			w := openMember(t, url, opts...)
			var link cuttable
			var looks atomic.Int64 // the cut-off member's failed looks for the writer
			cut := openMember(t, url, append(opts, withDialer(link.dial),
				WithLogger(slog.New(countingHandler{"does not answer", &looks})))...)
			other := openMember(t, url, opts...)
			if w.Role() != RoleWriter || cut.Role() != RoleMember || other.Role() != RoleMember {
				t.Fatalf("roles: %v %v %v", w.Role(), cut.Role(), other.Role())
			}
			if _, err := w.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{JobID: "j"}); err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			lost := make(chan error, 1)
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			go cut.Work(wctx, "q", func(ctx context.Context, j *Job) error {
				close(started)
				<-ctx.Done()
				lost <- context.Cause(ctx)
				return nil
			}, WorkOptions{})
			<-started
			link.setCut(true)
			looksAtCut := looks.Load()
			// Its lease runs out on the writer, and another member runs the
			// job: attempt 2.
			ran := make(chan *Job, 1)
			octx, ostop := context.WithCancel(ctx)
			defer ostop()
			go other.Work(octx, "q", func(ctx context.Context, j *Job) error {
				ran <- j
				return nil
			}, WorkOptions{})
			select {
			case j := <-ran:
				if j.Attempt != 2 {
					t.Fatalf("the job ran elsewhere at attempt %d, want 2", j.Attempt)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the cut-off member's job did not run elsewhere")
			}
			select {
			case c := <-lost:
				if !IsClaimLost(c) {
					t.Fatalf("the cut-off member's handler saw %v, want a lost claim", c)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the cut-off member's handler was not told its claim ran out")
			}
			if h := cut.Health(); h.Healthy || h.LastError == nil {
				t.Fatalf("the cut-off member's Health = %+v, want unhealthy with an error", h)
			}
			// Well past 3 heartbeats (and the lease): nobody was fenced. The
			// cut-off member's monitor looks at the store once a heartbeat
			// and fails to reach the writer: wait for 5 such looks, so that
			// its takeover check has run, before checking.
			testenv.Eventually(t, 30*time.Second, "5 looks for the writer by the cut-off member", func() bool {
				return looks.Load() >= looksAtCut+5
			})
			if w.Role() != RoleWriter || cut.Role() != RoleMember || w.Err() != nil {
				t.Fatalf("after the cut: writer role %v (err %v), cut-off member role %v", w.Role(), w.Err(), cut.Role())
			}
			// Healed, the member works again with the same writer.
			link.setCut(false)
			var putErr error
			var h Health
			defer func() {
				if t.Failed() {
					t.Logf("last Put: %v; last Health: %+v", putErr, h)
				}
			}()
			testenv.Eventually(t, 30*time.Second, "a Put through the member after the network healed", func() bool {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				putErr = cut.Put(cctx, []byte("healed"), []byte("1"))
				return putErr == nil
			})
			testenv.Eventually(t, 30*time.Second, "the healed member to be healthy", func() bool {
				h = cut.Health()
				return h.Healthy
			})
			if v, err := w.Get(ctx, []byte("healed")); err != nil || string(v) != "1" {
				t.Fatalf("writer Get = %q, %v", v, err)
			}
		})
	}
}

// killWriter makes w's process stop as a crash would: no more heartbeats,
// calls, or a release of the store.
func killWriter(t *testing.T, w *Queue) {
	t.Helper()
	c := w.be.(*clustered)
	c.mu.Lock()
	loc, srv := c.loc, c.srv
	c.closed = true
	close(c.stop)
	c.mu.Unlock()
	if loc == nil {
		t.Fatal("not the writer")
	}
	srv.Stop()
	loc.eng.Kill()
	c.wg.Wait()
}

// When the writer dies, a member takes over (bucket: once the heartbeat
// stopped; file://: once the lock is free, which Kill's closing of the
// bucket does as a dead process's exit would), and its running job keeps
// its claim across the switch. The time is logged; its target is
// measured by stepwell bench, not asserted here.
func TestClusterFailoverOnWriterDeath(t *testing.T) {
	for name, store := range clusterStores(t) {
		t.Run(name, func(t *testing.T) {
			url := store(t)
			ctx := context.Background()
			const hb = 400 * time.Millisecond
			w := openMember(t, url, WithHeartbeat(hb), WithLease(time.Minute))
			m := openMember(t, url, WithHeartbeat(hb), WithLease(time.Minute))
			if _, err := m.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{JobID: "held"}); err != nil {
				t.Fatal(err)
			}
			j, err := m.claimOne(ctx, "q")
			if err != nil || j == nil {
				t.Fatalf("Claim = %v, %v", j, err)
			}
			jctx, stop := m.claimContext(ctx, j)
			defer stop()
			killWriter(t, w)
			took := waitRole(t, m, RoleWriter, 30*hb)
			t.Logf("%s: a member took over %v after the writer died (heartbeat %v)", name, took, hb)
			if err := jctx.Err(); err != nil {
				t.Fatalf("the claim's context ended at the takeover: %v", context.Cause(jctx))
			}
			if err := m.Ack(ctx, j); err != nil {
				t.Fatalf("Ack after the takeover: %v", err)
			}
		})
	}
}

// A store held by a writer without WithCluster cannot be joined: Open in
// cluster mode says so (ErrStoreLocked) instead of waiting for its ctx.
func TestClusterRefusesNonClusterWriter(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	plain, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	o := defaultOptions()
	if err := WithCluster(ClusterConfig{Listen: "127.0.0.1:0"})(&o); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = openClustered(octx, url, o)
	if !errors.Is(err, ErrStoreLocked) || octx.Err() != nil {
		t.Fatalf("joining a non-cluster writer: %v (ctx: %v), want ErrStoreLocked", err, octx.Err())
	}
}

// With ClusterConfig.TLS, members and writer talk mutual TLS; a member
// without a certificate the writer trusts cannot join.
func TestClusterMutualTLS(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	ca := testenv.NewCA(t)
	cfg := ClusterConfig{Listen: "127.0.0.1:0", TLS: ca.MutualTLS(t)}
	w := openMember(t, url, WithCluster(cfg))
	m := openMember(t, url, WithCluster(cfg))
	if w.Role() != RoleWriter || m.Role() != RoleMember {
		t.Fatalf("roles: %v, %v", w.Role(), m.Role())
	}
	if err := m.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := w.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	// A member whose certificate another CA issued cannot join.
	other := testenv.NewCA(t)
	bad := ClusterConfig{Listen: "127.0.0.1:0", TLS: other.MutualTLS(t), DialTimeout: 500 * time.Millisecond}
	bad.TLS.RootCAs = ca.Pool // it trusts the writer; the writer does not trust it
	o := defaultOptions()
	if err := WithCluster(bad)(&o); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if c, err := openClustered(octx, url, o); err == nil {
		_ = c.close(ctx)
		t.Fatal("a member with an untrusted certificate joined")
	}
}

// A call without any credentials is refused before any handler runs.
func TestClusterRefusesUnauthenticatedCall(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	w := openMember(t, url)
	own := advertised(t, w)
	conn, err := grpc.NewClient(own.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(cluster.CodecName)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	put := &commitReq{Member: "anonymous", Txns: [][]txnOp{{{Kind: opPut, Key: []byte("anon"), Value: []byte("x")}}}}
	var reply commitReply
	err = conn.Invoke(ctx, "/"+cluster.ServiceName+"/"+rpcCommit, put, &reply)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a call without credentials: %v, want Unauthenticated", err)
	}
	if _, err := w.Get(ctx, []byte("anon")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("the refused call changed the store: %v", err)
	}
}

// clusterWriterOnS3 opens a cluster writer, beating every 100ms, on a
// fresh MinIO store, and returns it with the store's URL.
func clusterWriterOnS3(t *testing.T) (*Queue, string) {
	t.Helper()
	url := testenv.S3(t)
	w := openMember(t, url, WithHeartbeat(100*time.Millisecond))
	if w.Role() != RoleWriter {
		t.Fatalf("role %v, want writer", w.Role())
	}
	return w, url
}

// A cluster writer fenced by another writer does not fail its Work loops
// with ErrFenced: they wait for the next writer and work with it (here the
// fenced process itself, once the fencing writer closed).
func TestClusterFencedWriterKeepsWorking(t *testing.T) {
	w, url := clusterWriterOnS3(t)
	ctx := context.Background()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- w.Work(wctx, "q", func(ctx context.Context, j *Job) error {
			ran <- j.ID
			return nil
		}, WorkOptions{})
	}()
	// A writer outside the cluster fences it, and enqueues a job.
	other, err := Open(ctx, url, WithTakeover(), WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{JobID: "after-fence"}); err != nil {
		t.Fatal(err)
	}
	// The fenced writer notices within six beats (it becomes a member of
	// the fencing writer), and must keep working.
	testenv.Eventually(t, 10*time.Second, "the fenced writer to notice and become a member", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Work of the fenced writer returned: %v", err)
		default:
		}
		return w.Role() == RoleMember
	})
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id != "after-fence" {
			t.Fatalf("ran %s", id)
		}
	case err := <-done:
		t.Fatalf("Work returned: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the job enqueued by the fencing writer never ran")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Work: %v", err)
	}
}

// Closing a cluster writer that another writer fenced, before it found
// the next writer to join, succeeds: in a cluster a fenced writer is a
// member looking for its writer (Role says so), not a failed Queue, and
// everything it acknowledged was durable before the fence. It leaves the
// fencing writer's store alone. (The crash test's helpers met this under
// load: a writer fenced as the test ended failed its Close.)
func TestClusterFencedWriterCloses(t *testing.T) {
	w, url := clusterWriterOnS3(t)
	ctx := context.Background()
	if _, err := w.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{JobID: "before-fence"}); err != nil {
		t.Fatal(err)
	}
	// A writer outside the cluster fences it: w finds no writer to join
	// (this one serves no members), so it stays a fenced writer looking.
	other, err := Open(ctx, url, WithTakeover(), WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	testenv.Eventually(t, 10*time.Second, "the fenced writer to notice", func() bool {
		return w.Role() == RoleMember
	})
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close of a fenced cluster writer: %v", err)
	}
	if _, err := other.Enqueue(ctx, "q", []byte("y"), EnqueueOptions{JobID: "after-close"}); err != nil {
		t.Fatalf("the fencing writer, after the fenced one closed: %v", err)
	}
	for _, id := range []string{"before-fence", "after-close"} {
		if _, err := other.GetJob(ctx, id); err != nil {
			t.Errorf("job %s: %v", id, err)
		}
	}
}

// countingHandler counts the log records whose message contains sub.
type countingHandler struct {
	sub string
	n   *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.sub) {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// A member whose writer stopped answering looks at the store at the
// monitor's pace, not in a loop: the closed channel that told it the
// writer is gone must not wake it again and again.
func TestClusterMemberDoesNotSpinOnDeadWriter(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url)
	var looks atomic.Int64
	m := openMember(t, url, WithLogger(slog.New(countingHandler{"does not answer", &looks})))
	if m.Role() != RoleMember {
		t.Fatalf("role %v", m.Role())
	}
	// The writer stops serving (its process still holds the lock).
	wc := w.be.(*clustered)
	wc.mu.Lock()
	srv := wc.srv
	wc.mu.Unlock()
	srv.Stop()
	// The member has noticed (it looks for a writer): from then on, count
	// its looks over a second. The monitor ticks every 200ms on file://;
	// some slack for wake-ups by calls that failed. (The second is the
	// span of a rate, not a wait for something to happen.)
	testenv.Eventually(t, 10*time.Second, "the member to look for a writer", func() bool { return looks.Load() > 0 })
	first := looks.Load()
	time.Sleep(time.Second)
	if n := looks.Load() - first; n > 20 || n == 0 {
		t.Fatalf("the member looked for a writer %d times in a second, want 1 to 20", n)
	} else {
		t.Logf("the member looked for a writer %d times in a second", n)
	}
	if m.Role() != RoleMember {
		t.Fatalf("the member took over a live writer's store: role %v", m.Role())
	}
}

func TestRetrySafe(t *testing.T) {
	put := txnOp{Kind: opPut, Key: []byte("k"), Value: []byte("v")}
	for _, tc := range []struct {
		name string
		ops  []txnOp
		want bool
	}{
		{"a put", []txnOp{put}, false},
		{"a put and a settlement", []txnOp{put, {Kind: opAck, JobID: "j", Token: 1}}, true},
		{"a compare-and-put that changes the key", []txnOp{put, {Kind: opCompareAndPut, Key: []byte("r"), Expect: []byte("a"), Value: []byte("b")}}, true},
		{"a compare-and-put of the same value", []txnOp{{Kind: opCompareAndPut, Key: []byte("r"), Expect: []byte("a"), Value: []byte("a")}}, false},
		{"a create", []txnOp{{Kind: opCompareAndPut, Key: []byte("r"), Absent: true, Value: []byte("a")}}, true},
		{"an enqueue without a JobID", []txnOp{{Kind: opEnqueue, Queue: "q"}}, false},
		{"an enqueue with a JobID", []txnOp{{Kind: opEnqueue, Queue: "q", JobID: "x"}}, true},
		{"a cancel", []txnOp{{Kind: opCancelJob, JobID: "x"}}, false},
		{"a state check", []txnOp{put, {Kind: opRequireJob, JobID: "x", States: 2}}, false},
	} {
		if got := retrySafe(tc.ops); got != tc.want {
			t.Errorf("%s: retrySafe = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A member does not fence a writer that answers it, whatever the heartbeat
// shows: here the writer beats every second and the member, by its own
// WithHeartbeat, expects a beat every 100ms (as a CLI with the default
// interval would of a service that set a longer one). Judged by the
// heartbeat alone, the member would fence the live writer within half a
// second. (A store outage longer than 2.25 beats would do the same once
// it ended: runtime's TestStoreOutageFailsNoRun in member mode.)
func TestClusterMemberDoesNotFenceLiveWriter(t *testing.T) {
	url := testenv.S3(t)
	w := openMember(t, url, WithHeartbeat(time.Second))
	m := openMember(t, url, WithHeartbeat(100*time.Millisecond))
	// Every 2.25 of its own beats the member finds the writer's beat stale
	// and asks the writer (a call), which answers: wait for 8 such
	// questions, checking the roles all along.
	start, calls := time.Now(), m.StorageStats().ClusterCalls
	testenv.Eventually(t, 10*time.Second, "8 questions of the member to the writer", func() bool {
		if w.Role() != RoleWriter || m.Role() != RoleMember {
			t.Fatalf("after %v: the writer is %v, the member %v", time.Since(start).Round(time.Millisecond), w.Role(), m.Role())
		}
		return m.StorageStats().ClusterCalls >= calls+8
	})
	if err := m.Put(context.Background(), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// A writer whose store failed for good, in a process that lives on and
// still serves, stops beating and is taken over: it does not answer the
// member's last question (see takeOver) as a live writer would.
func TestClusterMemberTakesOverFailedWriter(t *testing.T) {
	url := testenv.S3(t)
	const hb = 100 * time.Millisecond
	w := openMember(t, url, WithHeartbeat(hb))
	m := openMember(t, url, WithHeartbeat(hb))
	if w.Role() != RoleWriter || m.Role() != RoleMember {
		t.Fatalf("roles: %v, %v", w.Role(), m.Role())
	}
	w.be.(*clustered).loc.eng.Kill() // its cluster server still serves
	took := waitRole(t, m, RoleWriter, 50*hb)
	t.Logf("the member took over %v after the writer's store failed (heartbeat %v)", took, hb)
	if err := m.Put(context.Background(), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// An enqueue with Dispatch from a member starts in an idle slot of the
// member's own Work loop, claimed for it by the writer in the same
// transaction: no claim call. With no idle slot there, it waits in the
// queue like any job, and another worker (here the writer's) claims it.
func TestClusterMemberDispatch(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url)
	m := openMember(t, url)
	if w.Role() != RoleWriter || m.Role() != RoleMember {
		t.Fatalf("roles: %v, %v", w.Role(), m.Role())
	}
	onMember, onWriter := make(chan *Job, 2), make(chan *Job, 2)
	release := make(chan struct{})
	startWork(t, m, "w", func(ctx context.Context, j *Job) error {
		onMember <- j
		<-release
		return nil
	}, WorkOptions{Concurrency: 1})
	// Before the Work loop's stop (cleanups run last first), which waits
	// for its job, when the test fails first.
	releaseJob := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseJob)
	// A member dispatches only to a loop parked on the writer.
	testenv.Eventually(t, 10*time.Second, "one idle slot on the member, parked", func() bool { return m.parkedIdleSlots("w") == 1 })

	// Commit calls with transactions the writer serves from now: the
	// Work loop's claims may also ride commit calls of their own, or
	// long-poll again, when a loaded machine delays them (and
	// ClusterCalls would also count the events long-poll).
	var commits atomic.Int32
	hookServe(t, nil, func(r *commitReq) {
		if len(r.Txns) > 0 {
			commits.Add(1)
		}
	})
	r := mustEnqueue(t, m, "w", "first", EnqueueOptions{dispatch: true})
	if !r.dispatched || r.claimed != nil {
		t.Fatalf("result %+v, want Dispatched", r)
	}
	select {
	case j := <-onMember:
		if j.ID != r.JobID || j.Attempt != 1 || string(j.Payload) != "first" {
			t.Fatalf("member ran %+v, want the dispatched job", j)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dispatched job did not start in the member's slot")
	}
	if c := commits.Load(); c != 1 {
		t.Fatalf("%d commit calls for a dispatched job, want 1", c)
	}

	// The member's only slot is busy: the next job is not dispatched, and
	// the writer's own Work loop claims it.
	startWork(t, w, "w", func(ctx context.Context, j *Job) error {
		onWriter <- j
		return nil
	}, WorkOptions{Concurrency: 1})
	r2 := mustEnqueue(t, m, "w", "second", EnqueueOptions{dispatch: true})
	if r2.dispatched {
		t.Fatalf("result %+v: dispatched with no idle slot in the member", r2)
	}
	select {
	case j := <-onWriter:
		if j.ID != r2.JobID {
			t.Fatalf("writer ran %s, want %s", j.ID, r2.JobID)
		}
	case j := <-onMember:
		t.Fatalf("the member's busy slot ran %s", j.ID)
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not claim the job that was not dispatched")
	}
	releaseJob()
	testenv.Eventually(t, 10*time.Second, "no job pending or claimed", func() bool { s, _ := m.Stats(t0ctx, "w"); return s.Pending+s.Claimed == 0 })
}

// hookServe has the writer call onClaim and onCommit (either may be nil)
// with each Claim and Commit call it serves, until the test ends.
func hookServe(t *testing.T, onClaim func(*claimReq), onCommit func(*commitReq)) {
	hook := func(method string, req any) {
		switch r := req.(type) {
		case *claimReq:
			if onClaim != nil {
				onClaim(r)
			}
		case *commitReq:
			if onCommit != nil {
				onCommit(r)
			}
		}
	}
	testHookServe.Store(&hook)
	t.Cleanup(func() { testHookServe.Store(nil) })
}

// TestClusterClaimsRideCommitCalls: a member's Work loop that wants a job
// while a commit call is in flight claims it with the next commit call
// instead of a claim call of its own; a ride that finds nothing is
// followed by a waiting claim call, and so is a ride that a writer
// without riding claims ignores.
func TestClusterClaimsRideCommitCalls(t *testing.T) {
	for _, tc := range []struct {
		name        string
		enqueue     bool // a job is claimable when the ride arrives
		oldWriter   bool // the writer drops the riding claims
		claimCalls  int32
		rideClaimed bool
	}{
		{name: "claimed", enqueue: true, claimCalls: 0, rideClaimed: true},
		{name: "nothing", enqueue: false, claimCalls: 1},
		{name: "old-writer", enqueue: true, oldWriter: true, claimCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "file://" + t.TempDir()
			w := openMember(t, url)
			m := openMember(t, url)
			if w.Role() != RoleWriter || m.Role() != RoleMember {
				t.Fatalf("roles: %v, %v", w.Role(), m.Role())
			}
			entered, unblock := make(chan struct{}), make(chan struct{})
			var unblockOnce sync.Once
			release := func() { unblockOnce.Do(func() { close(unblock) }) }
			var claimCalls, rides atomic.Int32
			hookServe(t, func(r *claimReq) {
				if r.Queue == "w" {
					claimCalls.Add(1)
				}
			}, func(r *commitReq) {
				if len(r.Txns) == 1 && len(r.Txns[0]) == 1 && string(r.Txns[0][0].Key) == "slow" {
					close(entered)
					<-unblock
				}
				for _, c := range r.Claims {
					if c.Queue == "w" {
						rides.Add(1)
					}
				}
				if tc.oldWriter {
					r.Claims = nil
				}
			})
			t.Cleanup(release) // before the queues close, if the test failed

			// A commit call in flight, held on the writer.
			slow := make(chan error, 1)
			go func() {
				_, err := m.Commit(t0ctx, new(Txn).Put([]byte("slow"), []byte("v")))
				slow <- err
			}()
			<-entered
			ran := make(chan *Job, 1)
			startWork(t, m, "w", func(ctx context.Context, j *Job) error {
				ran <- j
				return nil
			}, WorkOptions{Concurrency: 1})
			// The loop's claim waits for the next call.
			r := m.be.(*clustered).rem
			testenv.Eventually(t, 10*time.Second, "one rider in the commit batch", func() bool { r.bmu.Lock(); defer r.bmu.Unlock(); return len(r.riders) == 1 })
			var id string
			if tc.enqueue {
				id = mustEnqueue(t, w, "w", "job", EnqueueOptions{}).JobID
			}
			release()
			if err := <-slow; err != nil {
				t.Fatal(err)
			}
			if !tc.enqueue {
				// The ride found nothing; the loop waits on the writer.
				testenv.Eventually(t, 10*time.Second, "one claim call", func() bool { return claimCalls.Load() == 1 })
				id = mustEnqueue(t, w, "w", "job", EnqueueOptions{}).JobID
			}
			select {
			case j := <-ran:
				if j.ID != id || string(j.Payload) != "job" || j.Attempt != 1 {
					t.Fatalf("ran %+v, want job %s", j, id)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the job did not run in the member")
			}
			if got := claimCalls.Load(); got != tc.claimCalls {
				t.Fatalf("%d claim calls, want %d", got, tc.claimCalls)
			}
			if rides.Load() == 0 {
				t.Fatal("no claim rode a commit call")
			}
			testenv.Eventually(t, 10*time.Second, "no job pending or claimed", func() bool { s, _ := m.Stats(t0ctx, "w"); return s.Pending+s.Claimed == 0 })
		})
	}
}

// TestClusterSecondCommitCallOnlyForFullBatch: while one commit call is in
// flight, a member's transactions wait for it, unless a full batch
// (fullCommitBatch) waits: that goes in a second call at once.
func TestClusterSecondCommitCallOnlyForFullBatch(t *testing.T) {
	url := "file://" + t.TempDir()
	openMember(t, url) // the writer
	m := openMember(t, url)
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	hookServe(t, nil, func(r *commitReq) {
		if len(r.Txns) == 1 && string(r.Txns[0][0].Key) == "slow" {
			close(entered)
			<-unblock
		}
	})
	t.Cleanup(release)

	put := func(key string, done chan<- error) {
		_, err := m.Commit(t0ctx, new(Txn).Put([]byte(key), []byte("v")))
		done <- err
	}
	slow := make(chan error, 1)
	go put("slow", slow)
	<-entered
	r := m.be.(*clustered).rem
	state := func() (pending, inflight int) {
		r.bmu.Lock()
		defer r.bmu.Unlock()
		return len(r.pending), r.inflight
	}
	done := make(chan error, fullCommitBatch)
	for i := range fullCommitBatch - 1 {
		go put(fmt.Sprint("k", i), done)
	}
	testenv.Eventually(t, 10*time.Second, "a commit batch one short of full", func() bool { p, _ := state(); return p == fullCommitBatch-1 })
	if p, n := state(); n != 1 {
		t.Fatalf("%d calls in flight with %d transactions waiting, want 1", n, p)
	}
	go put("last", done)
	for range fullCommitBatch {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a full batch waited for the call in flight")
		}
	}
	select {
	case <-slow:
		t.Fatal("the held call returned")
	default:
	}
	release()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// setForTest sets *p to v until the test ends.
func setForTest[T any](t *testing.T, p *T, v T) {
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

// TestClusterOversizeTransactionRefused: a member's transaction that would
// not fit in a call is a *TooLargeError before anything is sent; the
// member stays a member and goes on.
func TestClusterOversizeTransactionRefused(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url)
	m := openMember(t, url)
	setForTest(t, &maxCallTxn, 4096)
	var commits atomic.Int32 // commit calls the writer served (ClusterCalls also counts the events long-poll)
	hookServe(t, nil, func(*commitReq) { commits.Add(1) })
	_, err := m.Commit(t0ctx, new(Txn).Put([]byte("big"), make([]byte, 8192)))
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) || tl.Max != 4096 || tl.Size < 8192 {
		t.Fatalf("Commit = %v, want a *TooLargeError of the call's limit", err)
	}
	if n := commits.Load(); n != 0 {
		t.Fatalf("%d commit calls for a refused transaction", n)
	}
	if _, err := w.Get(t0ctx, []byte("big")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("Get = %v: the refused transaction changed the store", err)
	}
	if err := m.Put(t0ctx, []byte("small"), []byte("v")); err != nil || m.Role() != RoleMember {
		t.Fatalf("after the refusal: Put = %v, role %v", err, m.Role())
	}
}

// TestClusterMemberClaimBoundedBySize: a member's claim takes no more
// payload bytes than its reply may carry (at least one job).
func TestClusterMemberClaimBoundedBySize(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url)
	m := openMember(t, url)
	setForTest(t, &maxMemberClaimBytes, 2500)
	for range 4 {
		if _, err := w.Enqueue(t0ctx, "q", make([]byte, 1000), EnqueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	for range 3 {
		jobs, err := m.claimBatch(t0ctx, "q", 10)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, len(jobs))
	}
	if fmt.Sprint(got) != "[2 2 0]" {
		t.Fatalf("claims of 10 took %v jobs, want [2 2 0] (2500 bytes a claim)", got)
	}
	// The bound is per call: the claims riding one commit call share it.
	for _, q := range []string{"q1", "q2"} {
		for range 2 {
			mustEnqueue(t, w, q, strings.Repeat("x", 1000), EnqueueOptions{})
		}
	}
	loc := w.be.(*clustered).loc
	o := loc.opts
	o.member = "m"
	_, _, claims := loc.commitAll(t0ctx, nil, o, []claimWant{{Queue: "q1", N: 10}, {Queue: "q2", N: 10}})
	if len(claims[0].jobs) != 2 || len(claims[1].jobs) != 0 || claims[0].err != nil || claims[1].err != nil {
		t.Fatalf("two claims of one call took %d and %d jobs (%v, %v), want 2 and 0",
			len(claims[0].jobs), len(claims[1].jobs), claims[0].err, claims[1].err)
	}
	// The writer's own claims are not bounded.
	for range 3 {
		mustEnqueue(t, w, "r", strings.Repeat("x", 1000), EnqueueOptions{})
	}
	if jobs, err := w.claimBatch(t0ctx, "r", 10); err != nil || len(jobs) != 3 {
		t.Fatalf("the writer's claim took %d jobs, %v", len(jobs), err)
	}
}

// TestClusterRenewalsShareCalls: a member's concurrent lease renewals
// share calls to the writer, and each extends its own lease there; a
// renewal of a lease the writer lost reports the loss, alone.
func TestClusterRenewalsShareCalls(t *testing.T) {
	w, m, jobs := claimedInMember(t, 21, WithLease(time.Minute))
	loc := w.be.(*clustered).loc
	before := map[string]time.Time{}
	for _, j := range jobs {
		before[j.ID] = leaseExpiry(w, j.ID)
	}
	// One lease the writer no longer has (as after its expiry).
	lostJob := jobs[20]
	loc.lmu.Lock()
	loc.leases[lostJob.ID].token++
	loc.lmu.Unlock()
	// The member renews a lease confirmed less than a quarter lease ago
	// without a call: age its confirmations.
	r := m.be.(*clustered).rem
	r.cmu.Lock()
	for _, c := range r.claims {
		c.renewed = c.renewed.Add(-time.Minute)
	}
	r.cmu.Unlock()

	// The writer holds the first Renew call until the other 20 renewals
	// wait in the member's batcher, so that how they are batched does not
	// depend on how fast this machine starts goroutines.
	var renewCalls, renewed atomic.Int64
	release := make(chan struct{})
	hook := func(method string, req any) {
		if method != rpcRenew {
			return
		}
		renewed.Add(int64(len(req.(*renewReq).Claims)))
		if renewCalls.Add(1) == 1 {
			<-release
		}
	}
	testHookServe.Store(&hook)
	t.Cleanup(func() { testHookServe.Store(nil) })
	go func() {
		testenv.Eventually(t, 10*time.Second, "20 renewals waiting behind the first call", func() bool {
			r.renewer.mu.Lock()
			defer r.renewer.mu.Unlock()
			return len(r.renewer.waiting) == len(jobs)-1
		})
		close(release)
	}()
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.renew(j); err != nil && j != lostJob {
				errs <- fmt.Errorf("Renew %s: %w", j.ID, err)
			} else if err == nil && j == lostJob {
				errs <- fmt.Errorf("Renew of the lost lease %s = nil", j.ID)
			} else if j == lostJob && !IsClaimLost(err) {
				errs <- fmt.Errorf("Renew of the lost lease = %v, want a ClaimLostError", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// 21 renewals: the first goes alone, the 20 that waited share one call.
	if n, k := renewCalls.Load(), renewed.Load(); n != 2 || k != int64(len(jobs)) {
		t.Errorf("%d Renew calls carried %d renewals, want 2 calls for %d", n, k, len(jobs))
	}
	for _, j := range jobs[:20] {
		if !leaseExpiry(w, j.ID).After(before[j.ID]) {
			t.Errorf("the lease of %s was not extended on the writer", j.ID)
		}
	}
}

// TestClusterSettlementRefillsSlot: in a member, the settlement that frees
// a Work slot (its transaction claims no next job) also claims the slot's
// next job, in the same call: the job runs there with no claim of its own.
// A settlement that chains (EnqueueOptions.Claim) refills nothing, and nor
// does one whose transaction fails.
func TestClusterSettlementRefillsSlot(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url)
	m := openMember(t, url)
	var claimCalls, refills atomic.Int32
	hookServe(t, func(r *claimReq) {
		if r.Queue == "w" {
			claimCalls.Add(1)
		}
	}, func(r *commitReq) {
		for _, c := range r.Claims {
			if c.IfTxn > 0 {
				refills.Add(1)
			}
		}
	})

	a := mustEnqueue(t, w, "w", "a", EnqueueOptions{}).JobID
	b := mustEnqueue(t, w, "w", "b", EnqueueOptions{}).JobID
	ran := make(chan string, 4)
	var claimsBeforeB atomic.Int32
	startWork(t, m, "w", func(ctx context.Context, j *Job) error {
		if string(j.Payload) == "b" {
			claimsBeforeB.Store(claimCalls.Load())
		}
		ran <- string(j.Payload)
		return nil
	}, WorkOptions{Concurrency: 1})
	for _, want := range []string{"a", "b"} {
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("ran %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("job %q did not run", want)
		}
	}
	testenv.Eventually(t, 10*time.Second, "no job pending or claimed", func() bool { s, _ := m.Stats(t0ctx, "w"); return s.Pending+s.Claimed == 0 })
	// One claim for a (the loop's first), none for b: a's Ack claimed it.
	if n := claimsBeforeB.Load(); n != 1 {
		t.Errorf("%d claim calls before b ran, want 1 (b comes with a's settlement)", n)
	}
	if refills.Load() == 0 {
		t.Error("no settlement carried a refill")
	}
	for _, id := range []string{a, b} {
		if j, err := w.GetJob(t0ctx, id); err == nil && j.State != JobDone {
			t.Errorf("job %s is %v", id, j.State)
		}
	}

	// No refill for a settlement that chains, or that fails, or that
	// settles a job the slot does not run, or in a stopping worker (queue
	// v: no Work loop there).
	refills.Store(0)
	c := mustEnqueue(t, w, "v", "c", EnqueueOptions{}).JobID
	jc, err := m.claimOne(t0ctx, "v")
	if err != nil || jc == nil || jc.ID != c {
		t.Fatalf("Claim = %v, %v", jc, err)
	}
	stopping := func() bool { return true }
	for _, slot := range []*handoff.Slot[*Job]{{Queue: "v", JobID: "another"}, {Queue: "v", JobID: jc.ID, Stopping: stopping}} {
		jo := *jc
		jo.token++ // a settlement that fails: nothing changes
		sctx := handoff.With(t0ctx, slot)
		handoff.Settling[*Job](sctx)
		if _, err := m.Commit(sctx, new(Txn).Ack(&jo)); !IsClaimLost(err) {
			t.Fatalf("Ack with a wrong token = %v", err)
		}
	}
	if n := refills.Load(); n != 0 {
		t.Fatalf("%d refills for settlements of another job or in a stopping worker", n)
	}
	ctx := settlingSlot(t0ctx, "v", jc.ID)
	mustEnqueue(t, w, "v", "waiting", EnqueueOptions{})
	if _, err := m.Commit(ctx, new(Txn).Ack(jc).Enqueue("v", []byte("next"), EnqueueOptions{claim: true})); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, new(Txn).Ack(jc)); !IsClaimLost(err) {
		t.Fatalf("a second Ack = %v, want a ClaimLostError", err)
	}
	if n := refills.Load(); n != 1 {
		t.Fatalf("%d refills sent, want 1 (the failed settlement's)", n)
	}
	if s, _ := w.Stats(t0ctx, "v"); s.Claimed != 1 || s.Pending != 1 {
		t.Fatalf("stats %+v: want the chained job claimed, the other pending", s)
	}
}

// TestClusterRenewalsGroupBySettings: renewals of claims with other queue
// settings go in calls of their own, each with its own settings, and each
// gets its own result.
func TestClusterRenewalsGroupBySettings(t *testing.T) {
	w, m, jobs := claimedInMember(t, 3)
	r := m.be.(*clustered).rem
	short, long := toWireOpts(m.opts), toWireOpts(m.opts)
	short.Lease, long.Lease = time.Minute, time.Hour
	var calls atomic.Int32
	hook := func(method string, _ any) {
		if method == rpcRenew {
			calls.Add(1)
		}
	}
	testHookServe.Store(&hook)
	t.Cleanup(func() { testHookServe.Store(nil) })
	res, err := r.renewCall([]renewItem{
		{ref: claimRef{ID: jobs[0].ID, Token: jobs[0].token}, opts: long},
		{ref: claimRef{ID: jobs[1].ID, Token: jobs[1].token + 1}, opts: short}, // not this claim's token
		{ref: claimRef{ID: jobs[2].ID, Token: jobs[2].token}, opts: short},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != (renewResult{}) || !res[1].lost || res[1].err != nil || res[2] != (renewResult{}) {
		t.Fatalf("results %+v: want renewed, lost, renewed", res)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d renew calls for two groups of settings", n)
	}
	if left := time.Until(leaseExpiry(w, jobs[0].ID)); left < 50*time.Minute {
		t.Errorf("the long group's lease has %v left, want about an hour", left)
	}
	if left := time.Until(leaseExpiry(w, jobs[2].ID)); left > 2*time.Minute {
		t.Errorf("the short group's lease has %v left, want about a minute", left)
	}
}

// claimedInMember opens a writer and a member of a new store (with opts),
// and returns them with n jobs of queue "q" the member claimed.
func claimedInMember(t *testing.T, n int, opts ...Option) (w, m *Queue, jobs []*Job) {
	t.Helper()
	url := "file://" + t.TempDir()
	w = openMember(t, url, opts...)
	m = openMember(t, url, opts...)
	for range n {
		mustEnqueue(t, w, "q", "x", EnqueueOptions{})
	}
	jobs, err := m.claimBatch(t0ctx, "q", n)
	if err != nil || len(jobs) != n {
		t.Fatalf("ClaimBatch: %d jobs, %v", len(jobs), err)
	}
	return w, m, jobs
}

// leaseExpiry returns when the writer w's lease of job id expires.
func leaseExpiry(w *Queue, id string) time.Time {
	loc := w.be.(*clustered).loc
	loc.lmu.Lock()
	defer loc.lmu.Unlock()
	return loc.leases[id].expires
}

// TestClusterMemberCloseUnderLoad: a member closed while its goroutines
// commit as fast as they can closes, and every commit returns (committed,
// or an error). Its commit calls in flight and waiting are failed at
// close, by flushers that race each other for them.
func TestClusterMemberCloseUnderLoad(t *testing.T) {
	url := "file://" + t.TempDir()
	openMember(t, url) // the writer
	for round := range 20 {
		m := openMember(t, url)
		var wg sync.WaitGroup
		var committed atomic.Int64
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					key := fmt.Appendf(nil, "r%d-g%d-%d", round, g, i)
					if _, err := m.Commit(t0ctx, new(Txn).Put(key, []byte("v"))); err != nil {
						return
					}
					committed.Add(1)
				}
			}()
		}
		testenv.Eventually(t, 10*time.Second, "more than 50 commits", func() bool { return committed.Load() > 50 })
		closed := make(chan error, 1)
		go func() { closed <- m.Close(context.Background()) }()
		select {
		case <-closed:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: Close hung with commits in flight", round)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: commits did not return after Close", round)
		}
	}
}

// TestClusterRefillGivenBackWhenCallerGivesUp: a settlement whose caller
// gives up (its ctx ends) once its call is on its way still refills on
// the writer; the member gives the job back at once rather than leave it
// to its lease.
func TestClusterRefillGivenBackWhenCallerGivesUp(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url)
	m := openMember(t, url)
	mustEnqueue(t, w, "v", "j", EnqueueOptions{})
	j, err := m.claimOne(t0ctx, "v")
	if err != nil || j == nil {
		t.Fatalf("Claim = %v, %v", j, err)
	}
	k := mustEnqueue(t, w, "v", "k", EnqueueOptions{}).JobID
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	released := make(chan string, 4)
	hookServe(t, nil, func(r *commitReq) {
		for _, ops := range r.Txns {
			for _, op := range ops {
				if op.Kind == opRelease {
					released <- op.JobID
				}
			}
		}
		if len(r.Claims) == 1 && r.Claims[0].IfTxn == 1 {
			close(entered)
			<-unblock
		}
	})
	ctx, cancel := context.WithCancel(settlingSlot(t0ctx, "v", j.ID))
	res := make(chan error, 1)
	go func() {
		_, err := m.Commit(ctx, new(Txn).Ack(j))
		res <- err
	}()
	<-entered
	cancel()
	if err := <-res; !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Commit = %v, want ErrOutcomeUnknown (its call was on its way)", err)
	}
	release()
	// The writer acks j and claims k for the slot; the member gives k back
	// (with 30s leases, nothing else would make it pending again soon).
	select {
	case id := <-released:
		if id != k {
			t.Fatalf("released %s, want k (%s)", id, k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refilled job was not given back")
	}
	testenv.Eventually(t, 10*time.Second, "the first job done or gone and the second pending", func() bool {
		jj, err1 := w.GetJob(t0ctx, j.ID)
		jk, err2 := w.GetJob(t0ctx, k)
		jDone := errors.Is(err1, ErrJobNotFound) || err1 == nil && jj.State == JobDone
		return jDone && err2 == nil && jk.State == JobPending
	})
	if jk, err := w.GetJob(t0ctx, k); err != nil || jk.State != JobPending {
		t.Fatalf("k = %+v, %v: want pending again", jk, err)
	}
}

// TestClusterClaimedPayloadStaysWithMember: a job a member claims at its
// enqueue comes back without its payload (the member has it), and the
// member hands it out with it.
func TestClusterClaimedPayloadStaysWithMember(t *testing.T) {
	url := "file://" + t.TempDir()
	w := openMember(t, url)
	m := openMember(t, url)
	payload := bytes.Repeat([]byte("p"), 64<<10)

	serve := w.be.(*clustered).loc.methods()[rpcCommit]
	req := commitReq{Member: "a-member", Txns: [][]txnOp{{
		{Kind: opPut, Key: []byte("k"), Value: []byte("v")},
		{Kind: opEnqueue, Queue: "direct", Value: payload, Claim: true},
	}}}
	got, err := serve(t0ctx, func(v cluster.Message) error { *v.(*commitReq) = req; return nil })
	if err != nil {
		t.Fatal(err)
	}
	res := got.(*commitReply).Results
	if len(res) != 1 || res[0].Err != nil || len(res[0].Enqueued) != 1 || res[0].Enqueued[0].Claimed == nil {
		t.Fatalf("%+v", res)
	}
	if j := res[0].Enqueued[0].Claimed.Job; j.Payload != nil || j.ID != "" || j.Queue != "" || j.Headers != nil {
		t.Fatalf("the reply carries what the member has: %d bytes of payload, %+v", len(j.Payload), j)
	}

	// A duplicate (dedup key) before the claimed enqueue: each result
	// still meets its own enqueue.
	mustEnqueue(t, m, "q", "held", EnqueueOptions{DedupKey: "d"})
	res2, err := m.Commit(t0ctx, new(Txn).
		Enqueue("q", []byte("dup"), EnqueueOptions{DedupKey: "d"}).
		Put([]byte("k2"), []byte("v")).
		Enqueue("q", payload, EnqueueOptions{claim: true, Headers: map[string]string{"h": "v"}, Priority: 3, DedupKey: "d2"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res2.Enqueued) != 2 || !res2.Enqueued[0].Duplicate || res2.Enqueued[1].claimed == nil {
		t.Fatalf("enqueued: %+v", res2.Enqueued)
	}
	if j := res2.Enqueued[1].claimed; !bytes.Equal(j.Payload, payload) || j.ID != res2.Enqueued[1].JobID {
		t.Fatalf("the claimed job %s has %d bytes of payload, want %d", j.ID, len(j.Payload), len(payload))
	} else if j.Queue != "q" || j.Headers["h"] != "v" || j.Priority != 3 || j.DedupKey != "d2" || j.State != JobClaimed || j.Attempt != 1 {
		t.Fatalf("the claimed job, as the member has it: %+v", j)
	}
	if err := m.Ack(t0ctx, res2.Enqueued[1].claimed); err != nil {
		t.Fatal(err)
	}
}

// remoteOf returns a member's remote of a writer whose Commit method is
// commit (its other methods are not served), started; the test's end
// stops both.
func remoteOf(t *testing.T, commit cluster.Handler) (*remote, options) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.Config{Epoch: 7, Secret: []byte("secret")}
	srv := cluster.NewServer(lis, cfg, map[string]cluster.Handler{rpcCommit: commit})
	go func() { _ = srv.Serve() }()
	t.Cleanup(srv.Stop)
	c, err := cluster.Dial(srv.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := defaultOptions()
	r := newRemote(c, cfg.Epoch, "a-member", o, nil)
	r.start()
	t.Cleanup(func() { _ = r.close(context.Background()) })
	return r, o
}

// TestClusterMemberRefusesMismatchedReply: a reply whose enqueue results do
// not match the transaction's enqueues (not this package's writer) is an
// unknown outcome, not a panic or a payload given to the wrong job.
func TestClusterMemberRefusesMismatchedReply(t *testing.T) {
	r, o := remoteOf(t, func(_ context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
		var req commitReq
		if err := dec(&req); err != nil {
			return nil, err
		}
		return &commitReply{Results: make([]wireTxnResult, len(req.Txns))}, nil // no enqueue results
	})
	_, err := r.commit(t0ctx, new(Txn).Enqueue("q", []byte("x"), EnqueueOptions{claim: true}).ops, o)
	if !errors.Is(err, errWriterGone) || !strings.Contains(err.Error(), "0 of 1 enqueues") {
		t.Fatalf("commit: %v", err)
	}
}

// TestClusterReplacedRemoteHandsCallsOn: a commit call on its way when the
// member finds another writer (its remote replaced and closed) fails as a
// writer gone with an unknown outcome, which the member retries with the
// next writer if the transaction is safe to retry; a close of the member
// itself fails it as closed. A member's Runtime.Run once returned
// "outcome unknown: store is closed" at a failover, and its process
// stopped.
func TestClusterReplacedRemoteHandsCallsOn(t *testing.T) {
	for _, replaced := range []bool{true, false} {
		entered := make(chan struct{}, 1)
		r, o := remoteOf(t, func(ctx context.Context, dec func(cluster.Message) error) (cluster.Message, error) {
			var req commitReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			entered <- struct{}{}
			<-ctx.Done() // the member gives up on it first
			return nil, ctx.Err()
		})
		errc := make(chan error, 1)
		go func() {
			_, err := r.commit(t0ctx, new(Txn).Put([]byte("k"), []byte("v")).ops, o)
			errc <- err
		}()
		<-entered
		r.replaced.Store(replaced)
		_ = r.close(context.Background())
		err := <-errc
		var lost *outcomeLostError
		switch {
		case replaced && (!errors.Is(err, errWriterGone) || !errors.As(err, &lost)):
			t.Errorf("replaced: %v, want a writer gone with an unknown outcome", err)
		case !replaced && (!errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrClosed) || errors.Is(err, errWriterGone)):
			t.Errorf("closed: %v, want an unknown outcome of a closed store", err)
		}
	}
}
