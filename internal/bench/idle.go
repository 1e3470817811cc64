package bench

import (
	"context"
	"fmt"
	"time"
)

// idleSettle is how long idle lets a fresh Runtime start (its janitor's
// first pass, the workers' first claims) before it starts counting.
const idleSettle = 200 * time.Millisecond

// runIdle runs a Runtime with nothing to do for cfg.IdleFor and counts the
// object-store requests it makes meanwhile.
func runIdle(ctx context.Context, cfg Config, storeURL, nonce string, pr *progress) (res Idle, err error) {
	q, err := openStore(ctx, storeURL)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := q.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = fmt.Errorf("bench: closing the store: %w", cerr)
		}
	}()
	tr := newTracker("bench-"+nonce+"-", 0, cfg.Steps, cfg.StepDuration, false)
	rt, err := newRuntime(q, tr, nonce, cfg)
	if err != nil {
		return res, err
	}
	run := startRuntime(ctx, rt)
	defer func() {
		if werr := run.wait(); werr != nil && err == nil {
			err = werr
		}
	}()
	if !sleepCtx(ctx, min(idleSettle, cfg.IdleFor)) {
		return res, fmt.Errorf("%w: %w", ErrIncomplete, context.Cause(ctx))
	}
	before := q.StorageStats()
	cpu0 := cpuTime()
	t0 := time.Now()
	pr.set(func() string {
		r, _ := delta(q.StorageStats(), before)
		return fmt.Sprintf("idle: %.1fs/%s  %d requests", time.Since(t0).Seconds(), cfg.IdleFor, r.Total())
	})
	ok := sleepCtx(ctx, cfg.IdleFor)
	res.IdleS = time.Since(t0).Seconds()
	res.CPUSeconds = cpuTime() - cpu0
	res.Storage, res.Engine = delta(q.StorageStats(), before)
	res.PerMinute = res.Storage.per(res.IdleS / 60)
	if !ok {
		return res, fmt.Errorf("%w: %w", ErrIncomplete, context.Cause(ctx))
	}
	select {
	case rerr := <-run.done:
		run.done <- rerr
		return res, fmt.Errorf("bench: runtime stopped early: %v", rerr)
	default:
	}
	return res, nil
}

// sleepCtx sleeps d, or until ctx is done (then it returns false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
