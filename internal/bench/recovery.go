package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/queue"
)

var errNoFirstClaim = errors.New("bench: no step was claimed")

// runRecovery builds History completed runs and LiveJobs pending runs,
// closes the store, reopens it and times the reopen and the first claim.
func runRecovery(ctx context.Context, cfg Config, storeURL, nonce string, pr *progress) (res Recovery, err error) {
	res = Recovery{LiveJobs: cfg.LiveJobs, History: cfg.History, StepsPerRun: cfg.Steps, Concurrency: cfg.Concurrency}
	stepsQueue, _ := queueNames(nonce)

	// Build, in a function of its own so that nothing references the
	// built Queue (and its in-memory state) once it is closed.
	if err := buildRecovery(ctx, cfg, storeURL, nonce, pr, &res); err != nil {
		return res, err
	}

	// Reopen.
	pr.set(func() string { return "recovery: reopening" })
	res.HeapBeforeReopenBytes = liveHeap()
	t0 := time.Now()
	q2, err := openStore(ctx, storeURL)
	if err != nil {
		return res, err
	}
	res.ReopenS = time.Since(t0).Seconds()
	defer func() {
		if cerr := q2.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = fmt.Errorf("bench: closing the store: %w", cerr)
		}
	}()
	res.HeapAfterReopenBytes = liveHeap()
	if cfg.LiveJobs > 0 {
		res.HeapPerLiveJobBytes = (float64(res.HeapAfterReopenBytes) - float64(res.HeapBeforeReopenBytes)) / float64(cfg.LiveJobs)
	}
	st := q2.StorageStats()
	res.ReopenStorage, _ = delta(st, queue.StorageStats{})
	res.KeysAfterReopen = st.Keys
	stats, err := q2.Stats(ctx, stepsQueue)
	if err != nil {
		return res, fmt.Errorf("bench: reading the step queue's stats: %w", err)
	}
	res.PendingAfterReopen = stats.Pending

	// First claim.
	if cfg.LiveJobs == 0 {
		return res, nil
	}
	pr.set(func() string { return "recovery: waiting for the first claim" })
	first := newTracker("bench-"+nonce+"-", cfg.LiveJobs, cfg.Steps, cfg.StepDuration, false)
	rt2, err := newRuntime(q2, first, nonce, cfg)
	if err != nil {
		return res, err
	}
	runStart := first.now()
	run := startRuntime(ctx, rt2)
	select {
	case <-first.firstStep:
		res.FirstClaimS = float64(first.firstAt.Load()-runStart) / 1e9
	case rerr := <-run.done:
		run.done <- rerr
		err = fmt.Errorf("%w: runtime stopped before a claim: %v", errNoFirstClaim, rerr)
	case <-ctx.Done():
		err = fmt.Errorf("%w: waiting for the first claim: %w", ErrIncomplete, context.Cause(ctx))
	}
	pr.set(func() string { return "recovery: stopping" })
	if werr := run.wait(); werr != nil && err == nil {
		err = werr
	}
	return res, err
}

// buildRecovery opens the store, executes the history runs, submits the live
// ones and closes the store.
func buildRecovery(ctx context.Context, cfg Config, storeURL, nonce string, pr *progress, res *Recovery) (err error) {
	q, err := openStore(ctx, storeURL)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := q.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = fmt.Errorf("bench: closing the built store: %w", cerr)
		}
	}()
	before := q.StorageStats()
	start := time.Now()
	if cfg.History > 0 {
		hist := newTracker("bench-"+nonce+"-h", cfg.History, cfg.Steps, cfg.StepDuration, false)
		rt, err := newRuntime(q, hist, nonce, cfg)
		if err != nil {
			return err
		}
		hcfg := cfg
		hcfg.Scenario = "recovery: history"
		if _, err := drive(ctx, q, rt, hist, hcfg, false, pr); err != nil {
			return fmt.Errorf("bench: building the history: %w", err)
		}
	}
	live := newTracker("bench-"+nonce+"-", cfg.LiveJobs, cfg.Steps, cfg.StepDuration, false)
	rt, err := newRuntime(q, live, nonce, cfg) // never Run: its runs stay pending
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := &submitter{rt: rt, tr: live, payload: makePayload(cfg.PayloadSize), cancel: cancel}
	pr.set(func() string {
		return fmt.Sprintf("recovery: building: submitted %d/%d live jobs", sub.submitted.Load(), cfg.LiveJobs)
	})
	defer pr.set(nil)
	sub.closedLoop(sctx, cfg.LiveJobs, cfg.Submitters)
	if sub.err != nil {
		return sub.err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: building: %w", ErrIncomplete, err)
	}
	res.BuildS = time.Since(start).Seconds()
	res.BuildStorage, res.BuildEngine = delta(q.StorageStats(), before)
	return nil
}
