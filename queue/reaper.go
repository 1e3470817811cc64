package queue

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/queuex"
)

// reap requeues (or dead-letters, at the attempt limit) every job whose
// lease has expired, and deletes done and dead jobs past their retention.
//
// While the store is stalled it does nothing: its transaction could not be
// committed, and a lease whose holder cannot settle must not run out.
func (l *local) reap(ctx context.Context) error {
	if !l.eng.Health().Healthy {
		return l.eng.Err()
	}
	now := l.now()
	type expired struct {
		id    string
		token uint64
	}
	var exp []expired
	l.lmu.Lock()
	for id, ls := range l.leases {
		if l.expired(ls, now) {
			exp = append(exp, expired{id, ls.token})
		}
	}
	l.lmu.Unlock()
	// Deterministic order: notices and retries of jobs expiring together
	// get the same FIFO positions on every run.
	slices.SortFunc(exp, func(a, b expired) int { return strings.Compare(a.id, b.id) })
	return l.eng.Update(ctx, func(tx *engine.Tx) error {
		for _, e := range exp {
			rec, err := l.claimedRec(tx, e.id, e.token, true)
			if err != nil {
				continue // settled meanwhile
			}
			l.lmu.Lock()
			ls := l.leases[e.id]
			stillExpired := ls != nil && l.expired(ls, now) // not renewed meanwhile
			l.lmu.Unlock()
			if !stillExpired {
				continue
			}
			cfg := l.opts.config(rec.Queue)
			l.retryTx(tx, e.id, rec, cfg, queuex.LeaseExpired, 0, now)
			l.release(e.id, e.token, &ClaimLostError{JobID: e.id})
		}
		l.expireRetainedTx(tx, now)
		return nil
	})
}

// expireRetainedTx deletes done and dead jobs older than their retention.
//
// REQUIRES: inside an engine transaction.
func (l *local) expireRetainedTx(tx *engine.Tx, now time.Time) {
	for name, qi := range l.ix.queues {
		cfg := l.opts.config(name)
		for _, t := range []struct {
			tree interface {
				Min() (timeItem, bool)
			}
			keep time.Duration
		}{{qi.done, cfg.DoneRetention}, {qi.dead, cfg.DeadRetention}} {
			if t.keep <= 0 {
				continue
			}
			cutoff := now.Add(-t.keep).UnixNano()
			for {
				it, ok := t.tree.Min()
				if !ok || it.at > cutoff {
					break
				}
				tx.Delete(jobSpace + it.id) // removes it from the tree
				tx.Delete(payloadSpace + it.id)
			}
		}
	}
}

// requeueClaimed makes every job left claimed by a dead process claimable
// again (or dead, at its attempt limit). Run once at Open. In cluster mode
// a claim recorded with its token is kept instead: its holder may be a
// live member, which confirms, renews and settles it with this writer.
func (l *local) requeueClaimed(ctx context.Context) error {
	now := l.now()
	return l.eng.Update(ctx, func(tx *engine.Tx) error {
		var ids []string
		for _, qi := range l.ix.queues {
			for id := range qi.claimed {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			v, ok := tx.Get(jobSpace + id)
			if !ok {
				continue
			}
			rec, err := decodeJob(v)
			if err != nil {
				return err
			}
			if l.opts.cluster != nil && rec.Claim != 0 {
				// A member may be running it: honour the claim until
				// a lease after it was made, or a grace for its holder
				// to confirm it (see adoptedExpiry).
				l.adoptClaim(id, rec, now)
				continue
			}
			// A cancel request stays: the next claim sees it at once.
			if rec.Attempts >= rec.MaxAttempts {
				l.deadTx(tx, id, rec, queuex.WorkerStoppedLast, now)
				continue
			}
			rec.addHistory(now, queuex.WorkerStopped)
			rec.State, rec.RunAt, rec.UpdatedAt = statePending, now.UnixNano(), now.UnixNano()
			tx.Put(jobSpace+id, encodeJob(rec))
		}
		return nil
	})
}

func (l *local) reaperLoop() {
	defer l.wg.Done()
	every := l.opts.lease / 4
	for _, c := range l.opts.queues {
		if c.Lease > 0 {
			every = min(every, c.Lease/4)
		}
	}
	every = min(max(every, 5*time.Millisecond), time.Second)
	// Until the last claim adopted at Open and not confirmed would have
	// expired, reap at a faster pace: each expires at a time of its own,
	// and another takeover may follow soon (see adoptedExpiry). Their
	// expiries move when the writer starts serving (serveAdopted): the
	// window is read again when it ends.
	pace := every
	fastUntil := l.adoptedUntil(every)
	if time.Now().Before(fastUntil) {
		pace = min(every, adoptedReapEvery)
	}
	t := time.NewTicker(pace)
	defer t.Stop()
	// A reap caught by a stall stops waiting for it at Close.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-t.C:
		case <-l.stop:
			return
		}
		if pace != every && !time.Now().Before(fastUntil) {
			if fastUntil = l.adoptedUntil(every); !time.Now().Before(fastUntil) {
				pace = every
				t.Reset(every)
			}
		}
		if err := l.reap(ctx); err != nil && !errors.Is(err, ErrOutcomeUnknown) {
			return // the engine has failed or closed
		}
	}
}
