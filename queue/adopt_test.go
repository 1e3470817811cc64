package queue

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// writerLease returns the writer's lease of job id: its holder and whether
// it still waits for one to confirm it (ok false: no lease).
func writerLease(w *Queue, id string) (holder string, adopted, ok bool) {
	loc := w.be.(*clustered).loc
	loc.lmu.Lock()
	defer loc.lmu.Unlock()
	ls := loc.leases[id]
	if ls == nil {
		return "", false, false
	}
	return ls.holder, ls.adopted, true
}

// memberID is the ID with which the member m holds its claims.
func memberID(m *Queue) string { return m.be.(*clustered).member }

// waitConfirmed waits until the member m has confirmed its claim on job id
// with the writer w.
func waitConfirmed(t *testing.T, w, m *Queue, id string) {
	t.Helper()
	want := memberID(m)
	var holder string
	var adopted, ok bool
	testenv.Eventually(t, 30*time.Second, "the member to confirm its claim on "+id+" with the new writer", func() bool {
		holder, adopted, ok = writerLease(w, id)
		return !ok || holder == want && !adopted
	})
	if !ok {
		t.Fatalf("the writer has no lease on %s", id)
	}
}

func jobStateOf(t *testing.T, q *Queue, id string) State {
	t.Helper()
	j, err := q.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j.State
}

// A claim whose holder died with its writer runs again within a lease of
// its claim, however many writers take over meanwhile, while a live
// member's claim survives every takeover, also once it is older than a
// lease. Before, each new writer adopted every claim with a lease from its
// own open, so that a dead writer's step waited until the takeovers
// stopped.
func TestAdoptedClaimExpiresFromItsClaim(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	clock := newFakeClock()
	const lease = time.Minute
	opts := []Option{withClock(clock), WithLease(lease)}
	// The member never becomes the writer: its Listen address is taken.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	w := openMember(t, url, opts...)
	m := openMember(t, url, append(opts, WithCluster(ClusterConfig{Listen: busy.Addr().String()}))...)
	if w.Role() != RoleWriter || m.Role() != RoleMember {
		t.Fatalf("roles %v, %v", w.Role(), m.Role())
	}
	for _, id := range []string{"dead", "live"} {
		if _, err := w.Enqueue(ctx, "q", nil, EnqueueOptions{JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// The writer runs "dead" itself; the member runs "live".
	if j, err := w.claimOne(ctx, "q"); err != nil || j == nil || j.ID != "dead" {
		t.Fatalf("writer's Claim = %v, %v", j, err)
	}
	live, err := m.claimOne(ctx, "q")
	if err != nil || live == nil || live.ID != "live" {
		t.Fatalf("member's Claim = %v, %v", live, err)
	}
	claimed := clock.Now()
	reap := func() {
		t.Helper()
		if err := w.be.(*clustered).loc.reap(ctx); err != nil {
			t.Fatal(err)
		}
	}
	takeOver := func() {
		t.Helper()
		killWriter(t, w)
		w = openMember(t, url, opts...)
		if w.Role() != RoleWriter {
			t.Fatalf("role %v, want writer", w.Role())
		}
		waitConfirmed(t, w, m, "live")
	}
	// Five writers die within the lease of the claims; each next one
	// adopts both.
	const takeovers = 5
	for range takeovers {
		clock.Advance(lease / 8)
		takeOver()
	}
	clock.Advance(claimed.Add(lease).Sub(clock.Now()) + time.Millisecond)
	reap()
	// Requeued for its next attempt (after the retry backoff).
	if j, err := w.GetJob(ctx, "dead"); err != nil || j.State != JobPending && j.State != JobScheduled ||
		len(j.History) != 1 || !strings.Contains(j.History[0].Error, "lease expired") {
		t.Fatalf("a lease after its claim and %d takeovers, the dead writer's job is %+v (%v), want requeued by its lease's expiry", takeovers, j, err)
	}
	if s := jobStateOf(t, w, "live"); s != JobClaimed {
		t.Fatalf("the member's job is %v, want claimed", s)
	}
	// The member's claim, now older than a lease, survives another
	// takeover: the new writer keeps it for a grace, in which the member
	// confirms it.
	takeOver()
	clock.Advance(lease / 2)
	reap()
	if s := jobStateOf(t, w, "live"); s != JobClaimed {
		t.Fatalf("after a takeover past its first lease, the member's job is %v, want claimed", s)
	}
	if err := m.Ack(ctx, live); err != nil {
		t.Fatalf("the member's Ack: %v", err)
	}
}

// A member that takes over keeps the claims of its own running jobs, also
// those older than a lease: they are confirmed as it switches, not left to
// the grace of the claims no one holds, which is shorter than the time
// until its Work loop's next renewal.
func TestTakeoverKeepsOwnRunningClaims(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	clock := newFakeClock()
	const lease = 4 * time.Second // above the grace (a second)
	opts := []Option{withClock(clock), WithLease(lease)}
	w := openMember(t, url, opts...)
	m := openMember(t, url, opts...)
	if _, err := w.Enqueue(ctx, "q", nil, EnqueueOptions{JobID: "x"}); err != nil {
		t.Fatal(err)
	}
	j, err := m.claimOne(ctx, "q")
	if err != nil || j == nil {
		t.Fatalf("Claim = %v, %v", j, err)
	}
	// Renewed once, and older than a lease at the takeover.
	clock.Advance(3 * time.Second)
	// A member's renewal makes a call only a quarter lease (real time)
	// after the last: date the last one back rather than wait.
	rem := m.be.(*clustered).rem
	rem.cmu.Lock()
	rem.claims["x"].renewed = time.Now().Add(-lease)
	rem.cmu.Unlock()
	if err := m.renew(j); err != nil {
		t.Fatal(err)
	}
	wloc := w.be.(*clustered).loc
	wloc.lmu.Lock()
	renewedTo := wloc.leases["x"].expires
	wloc.lmu.Unlock()
	if want := clock.Now().Add(lease); !renewedTo.Equal(want) {
		t.Fatalf("the writer's lease after the renewal ends at %v, want %v (the renewal made no call)", renewedTo, want)
	}
	clock.Advance(2 * time.Second)
	killWriter(t, w)
	waitRole(t, m, RoleWriter, 30*time.Second)
	if _, adopted, ok := writerLease(m, "x"); !ok || adopted {
		t.Fatalf("after the takeover: lease %v, still waiting for confirmation %v", ok, adopted)
	}
	clock.Advance(2 * time.Second) // past the grace
	if err := m.be.(*clustered).loc.reap(ctx); err != nil {
		t.Fatal(err)
	}
	if s := jobStateOf(t, m, "x"); s != JobClaimed {
		t.Fatalf("the new writer's own running job is %v, want claimed", s)
	}
	if err := m.Ack(ctx, j); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

// An adopted claim's grace runs from when the writer serves its members,
// not from its open: before, a writer whose open (recovery) took longer
// than the grace, as under load, had spent it before any member could
// reach it to confirm a claim, and a live member's step ran twice.
func TestAdoptedGraceStartsWhenServing(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	clock := newFakeClock()
	const lease = 4 * time.Second
	w := openMember(t, url, withClock(clock), WithLease(lease))
	if _, err := w.Enqueue(ctx, "q", nil, EnqueueOptions{JobID: "x"}); err != nil {
		t.Fatal(err)
	}
	if j, err := w.claimOne(ctx, "q"); err != nil || j == nil {
		t.Fatalf("Claim = %v, %v", j, err)
	}
	killWriter(t, w)
	// The next writer opens the store, as becomeWriter does, a lease
	// after the claim: the claim rests on the grace.
	clock.Advance(lease)
	o := defaultOptions()
	for _, opt := range []Option{WithCluster(ClusterConfig{Listen: "127.0.0.1:0"}), withClock(clock), WithLease(lease)} {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	l, err := openLocal(ctx, url, o, newWatchSet())
	if err != nil {
		t.Fatal(err)
	}
	q := &Queue{url: url, opts: o, be: l, sh: &shared{be: l, refs: 1}}
	t.Cleanup(func() { _ = q.Close(context.Background()) })
	grace := l.adoptGrace(lease)
	state := func() State {
		t.Helper()
		if err := l.reap(ctx); err != nil {
			t.Fatal(err)
		}
		return jobStateOf(t, q, "x")
	}
	// Its open takes longer than the grace: the claim stays.
	clock.Advance(2 * grace)
	if s := state(); s != JobClaimed {
		t.Fatalf("%v after an open longer than the grace, before the writer serves, the job is %v, want claimed", 2*grace, s)
	}
	l.serveAdopted()
	clock.Advance(grace - time.Millisecond)
	if s := state(); s != JobClaimed {
		t.Fatalf("within the grace after the writer serves, the job is %v, want claimed", s)
	}
	clock.Advance(time.Millisecond)
	if s := state(); s == JobClaimed {
		t.Fatalf("a grace after the writer serves, with no one to confirm it, the job is %v, want requeued", s)
	}
}
