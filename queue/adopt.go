package queue

import "time"

// adoptGraceMin is the least time a writer that took over keeps a claim
// it adopted whose lease, counted from the claim, has run out: time for a
// live member holding it to reach this writer and say so (see
// adoptedExpiry).
const adoptGraceMin = time.Second

// adoptGrace is how long, at least, an adopted claim is kept for its
// holder to confirm it once the writer serves (serveAdopted): a second, or
// half a heartbeat on slow beats (a member on a bucket store finds the new
// writer by reading the owner object every quarter heartbeat, then pings
// it and lists its claims), but never more than the lease. It must
// stay short against the time between takeovers, which is what bounds
// how long a dead process's claim can be carried from writer to writer.
func (l *local) adoptGrace(lease time.Duration) time.Duration {
	return adoptGraceFor(lease, l.opts.heartbeat)
}

// adoptGraceFor is adoptGrace for a lease and a heartbeat interval.
func adoptGraceFor(lease, heartbeat time.Duration) time.Duration {
	return min(lease, max(adoptGraceMin, heartbeat/2))
}

// adoptedExpiry is when the lease of a claim adopted at a takeover (at
// now) expires unless its holder confirms it: one lease after the claim,
// as the claim's holder would have seen it expire had its writer lived,
// but no sooner than the grace from now and no later than a lease from
// now (serveAdopted moves the grace to when the writer serves, which no
// member can reach before). The claim's time is the record's UpdatedAt,
// written with the claim (a later rewrite of the claimed record, a cancel
// request, only moves it later). A renewal, or a member's events call listing the claim, confirms
// it (confirmAdopted): its holder lives, and it gets a lease from then, as
// every adopted claim did before. A claim no one confirms is one whose
// holder died with the writer (a step the writer ran itself) or cannot
// reach this writer: it expires, and its job runs again, within a lease of
// its claim however many writers take over in between, rather than a
// lease after the last of them.
//
// The record's time is the claiming writer's clock: a skew between the two
// writers' clocks moves the expiry by as much, within [grace, lease]. Nor
// does the lease counted from the claim exclude a store stall before the
// takeover, as a lease does (see expired): the stall was the dead
// writer's to see, and this engine's StallTime starts at its open. An
// outage is when takeovers happen, so a claim of a live member may have
// only the grace left; a stall after the open extends it as any lease.
func (l *local) adoptedExpiry(rec *jobRec, now time.Time) time.Time {
	lease := l.opts.config(rec.Queue).Lease
	exp := time.Unix(0, rec.UpdatedAt).Add(lease)
	if floor := now.Add(l.adoptGrace(lease)); exp.Before(floor) {
		exp = floor
	}
	if ceil := now.Add(lease); exp.After(ceil) {
		exp = ceil
	}
	return exp
}

// serveAdopted starts the grace of the adopted claims no one confirmed
// yet: it is called once the writer serves its members, and until then
// none expires (see expired). Opening the store (recovery, requeueClaimed)
// and starting to serve may take a while under load, and a member needs
// the writer served to confirm a claim: a grace from the open could be
// spent before it could even reach the writer, and a live member's step
// would run twice.
func (l *local) serveAdopted() {
	now, stall := l.now(), l.eng.StallTime()
	l.lmu.Lock()
	defer l.lmu.Unlock()
	l.serving = true
	for _, ls := range l.leases {
		if !ls.adopted {
			continue
		}
		if floor := now.Add(l.adoptGrace(l.opts.config(ls.queue).Lease)); ls.expires.Before(floor) {
			ls.expires, ls.stallAt = floor, stall
		}
	}
}

// confirmAdopted gives an adopted claim whose holder just showed itself a
// lease from now, once. An expired one is not revived: the reaper
// requeues it, and its holder learns it lost it.
//
// REQUIRES: l.lmu held.
func (l *local) confirmAdopted(ls *lease, now time.Time) {
	if !ls.adopted || l.expired(ls, now) {
		return
	}
	ls.adopted = false
	if exp := now.Add(l.opts.config(ls.queue).Lease); exp.After(ls.expires) {
		ls.expires, ls.stallAt = exp, l.eng.StallTime()
	}
}

// confirmHeld confirms the adopted claims of this process's own running
// jobs: a member that took over brings the claims of its steps along
// (clustered.switchTo), and they must not wait on the grace for their next
// renewal.
func (l *local) confirmHeld(refs []claimRef) {
	now := l.now()
	l.lmu.Lock()
	defer l.lmu.Unlock()
	for _, c := range refs {
		if ls := l.leases[c.ID]; ls != nil && ls.token == c.Token {
			l.confirmAdopted(ls, now)
		}
	}
}

// adoptedReapEvery is the reaper's pace while adopted claims wait for
// their expiry (see reaperLoop).
const adoptedReapEvery = 100 * time.Millisecond

// adoptedUntil is when the last adopted claim not confirmed yet expires
// (wall clock), plus slack; the past if there is none. Before the writer
// serves, each expires a grace from now at the earliest (serveAdopted).
func (l *local) adoptedUntil(slack time.Duration) time.Time {
	now := l.now()
	var last time.Time
	l.lmu.Lock()
	for _, ls := range l.leases {
		if !ls.adopted {
			continue
		}
		exp := ls.expires
		if floor := now.Add(l.adoptGrace(l.opts.config(ls.queue).Lease)); !l.serving && exp.Before(floor) {
			exp = floor
		}
		if exp.After(last) {
			last = exp
		}
	}
	l.lmu.Unlock()
	if last.IsZero() {
		return time.Time{}
	}
	return time.Now().Add(last.Sub(now) + slack)
}
