package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
)

// Wait returns a run's final status (as Status reports it, with its
// result) once the run has ended, at once if it has already. It returns
// ErrInvalidRunID for an ID that Submit would refuse, ErrRunNotFound for
// an unknown run (and for one whose record expired after the terminal
// retention while Wait waited), ctx.Err() if ctx ends first, and
// queue.ErrClosed once the Runtime's Queue handle is closed.
//
// Wait returns once the run's end has committed, and does not wait for
// the terminal hook: the hook is called from the notification queue that
// the end's transaction wrote to, by a Run of a Runtime with a hook on
// that notify queue (at least once, with retries). A process that stops
// its Run as soon as Wait returns may stop before the hook is called; the
// next such Run on the store calls it then (a mem:// store is gone with
// its process).
//
// Wait does not poll: it reads the run record and watches its key; the
// commit that writes the record wakes it (then it reads again: a step's
// settlement also writes the record). Wait blocks its caller's goroutine
// and starts none; a waiter costs a few hundred bytes of memory besides
// (docs/BENCHMARKS.md, BenchmarkWait10k). It works on every Runtime of the store, client
// Runtimes (nil Runner) included: on the writer the commit wakes the
// waiter itself; in a cluster member, the waiters of the process ride one
// long-poll to the writer, and across a change of writer they read the
// run again from the next writer and wait there, so a run that ended
// during the switch is seen. On a Queue opened WithReadOnly, which learns
// of no commit as it happens, Wait refreshes the queue (queue.Refresh) and
// reads the run every poll interval (WithPollInterval) instead.
func (rt *Runtime) Wait(ctx context.Context, runID string) (RunStatus, error) {
	if err := ValidateRunID(runID); err != nil {
		return RunStatus{}, err
	}
	key := kvrecord.RunKey(runID)
	for {
		if err := ctx.Err(); err != nil {
			return RunStatus{}, err
		}
		if h := testHookWait.Load(); h != nil {
			(*h)(runID, false)
		}
		b, err := rt.q.Get(ctx, key)
		if errors.Is(err, queue.ErrKeyNotFound) {
			return RunStatus{}, fmt.Errorf("%w: %q", ErrRunNotFound, runID)
		}
		if err != nil {
			return RunStatus{}, waitErr(ctx, err)
		}
		rec, err := kvrecord.DecodeRun(b)
		if err != nil {
			return RunStatus{}, err
		}
		if rec.State == kvrecord.StateTerminal {
			st, err := rt.status(ctx, rec, true)
			if err != nil {
				return RunStatus{}, waitErr(ctx, err)
			}
			return st, nil
		}
		ch, cancel, err := qx.WatchKey(rt.q, ctx, key, b, true)
		if errors.Is(err, queue.ErrReadOnly) {
			if err := rt.waitReadOnly(ctx); err != nil {
				return RunStatus{}, err
			}
			continue
		}
		if err != nil {
			return RunStatus{}, waitErr(ctx, err)
		}
		if h := testHookWait.Load(); h != nil {
			(*h)(runID, true)
		}
		select {
		case <-ch:
		case <-ctx.Done():
		}
		cancel()
	}
}

// testHookWait, set by tests, is called before each read of Wait
// (armed false) and once its watch is registered (armed true).
var testHookWait atomic.Pointer[func(runID string, armed bool)]

// waitErr is ctx's error if it ended, else err.
func waitErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// waitReadOnly waits a poll interval, then refreshes the read-only queue.
func (rt *Runtime) waitReadOnly(ctx context.Context) error {
	t := time.NewTimer(rt.opts.pollInterval)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := rt.q.Refresh(ctx); err != nil {
		return waitErr(ctx, err)
	}
	return nil
}
