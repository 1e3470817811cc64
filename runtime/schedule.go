package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/stepwell/stepwell/internal/handoff"
	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
)

// TickLayout is the layout of a tick's time in its run's ID
// (ScheduleRunID): UTC, to the second.
const TickLayout = "20060102T150405Z"

// MaxScheduleNameLen is the longest schedule name: with "@" and a tick
// (TickLayout) it makes a run ID of at most MaxRunIDLen bytes.
const MaxScheduleNameLen = MaxRunIDLen - 1 - len(TickLayout)

// MinScheduleEvery is the shortest Schedule.Every.
const MinScheduleEvery = time.Second

// Schedule is a durable schedule of runs: each tick submits one run from
// Spec (see SetSchedule).
type Schedule struct {
	// Name identifies the schedule in the store: 1 to MaxScheduleNameLen
	// bytes of printable ASCII without '/' or '@', not starting or ending
	// with a space (ValidateScheduleName).
	Name string
	// Every ticks at every multiple of Every since the Unix epoch (so
	// every process computes the same ticks: Every 1h ticks on the hour,
	// UTC). At least 1s. Exactly one of Every and Cron.
	Every time.Duration
	// Cron is a standard cron expression, 5 fields (minute, hour, day of
	// month, month, day of week) or a descriptor (@yearly, @monthly,
	// @weekly, @daily, @hourly), read in Location. Its ticks are whole
	// minutes. "@every" and "TZ=" prefixes are refused: use Every and
	// Location.
	Cron string
	// Location is the time zone of Cron ("0 9 * * *" is 9:00 there,
	// daylight saving time included); nil is UTC. It must be loadable by
	// name (time.LoadLocation of its String) by every process, and be the
	// zone that name loads, so time.Local and zones made by time.FixedZone
	// (whatever their name) are refused. Every ignores it.
	Location *time.Location
	// Spec is the template of each tick's run. Its RunID must be "" (each
	// run's ID is ScheduleRunID(Name, tick)) and its StartAt and Deadline
	// zero (a run starts at its tick; one absolute deadline cannot serve
	// every tick); the rest is checked as Submit checks it. A
	// Concurrency makes each tick's run take a slot of its key, or wait in
	// the key's line, as a Submit's run does (see RunSpec.Concurrency).
	Spec RunSpec
	// AllowOverlap lets a tick submit its run while the run of the
	// previous tick that submitted one has not ended. By default such a
	// tick is skipped, and counted (ScheduleStatus.Skipped).
	AllowOverlap bool
}

// ScheduleStatus is a schedule and where its ticks stand (ListSchedules).
type ScheduleStatus struct {
	Schedule
	// Queue is the step queue of the schedule's runs, on whose timers
	// queue its ticks fire: Spec.Queue, else the queue of the Runtime
	// that set the schedule.
	Queue string
	// NextAt is the next tick: when the schedule's tick job is due. Zero
	// for a Cron schedule that never fires again.
	NextAt time.Time
	// LastRunID is the run of the latest tick that submitted one ("": none
	// yet), and LastAt that tick.
	LastRunID string
	LastAt    time.Time
	// Skipped counts the ticks skipped because the previous run had not
	// ended (not the ticks missed while no Runtime fired them: see
	// SetSchedule).
	Skipped uint64
}

// ScheduleRunID returns the run ID of the tick at of schedule name:
// name, "@", and the tick in UTC as TickLayout.
func ScheduleRunID(name string, at time.Time) string {
	return name + "@" + at.UTC().Format(TickLayout)
}

// ValidateScheduleName returns ErrInvalidSchedule (wrapped with the
// reason) unless name is a valid schedule name: 1 to MaxScheduleNameLen
// bytes of printable ASCII without '/' or '@', not starting or ending with
// a space.
func ValidateScheduleName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("%w: empty name", ErrInvalidSchedule)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: name %q has leading or trailing whitespace", ErrInvalidSchedule, name)
	case len(name) > MaxScheduleNameLen:
		return fmt.Errorf("%w: name of %d bytes, at most %d", ErrInvalidSchedule, len(name), MaxScheduleNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e || c == '/' || c == '@' {
			return fmt.Errorf("%w: name: byte %#x at %d (printable ASCII without '/' or '@')", ErrInvalidSchedule, c, i)
		}
	}
	if err := ValidateRunID(ScheduleRunID(name, time.Unix(0, 0))); err != nil {
		return fmt.Errorf("%w: name %q makes an invalid run ID: %w", ErrInvalidSchedule, name, err)
	}
	return nil
}

// Reserved headers of a timer job (on a step queue's timers queue) that
// is not an await's timeout: its kind, and for timerSchedule the
// schedule's name.
const (
	headerTimer    = ReservedPrefix + "timer"
	timerSchedule  = "schedule"
	headerSchedule = ReservedPrefix + "schedule"
)

// SetSchedule creates the schedule s.Name, or replaces it, in one
// transaction: its record and its tick job, due at the first tick after
// now (a replaced schedule's tick job is cancelled; its last run and
// skipped count are kept). Setting a schedule as it is already changes
// nothing: its tick job stays, and a tick that is late still runs, so a
// service may set its schedules each time it starts. Bad input is
// ErrInvalidSchedule wrapped with the reason (and the sentinel of a bad
// Spec field, as Submit returns it), and nothing is written. If ctx ends
// before the transaction is durable, it returns queue.ErrOutcomeUnknown:
// setting the schedule again is safe.
//
// Each tick submits one run from s.Spec, with the run ID
// ScheduleRunID(s.Name, tick), in the transaction that settles the tick
// job and enqueues the next tick's: a tick is submitted once, across
// processes, restarts and failovers, and a tick whose run ID exists
// already is not submitted again. The tick jobs wait on the timers queue
// of the runs' step queue (s.Spec.Queue, else this Runtime's): the
// Runtimes that Run on that step queue fire them. A schedule whose step
// queue no Runtime serves does not tick.
//
// A tick that fires late (no Runtime ran, or all were busy) submits one
// run, for the latest tick that has passed, not one per missed tick: after
// a day of downtime an hourly schedule runs once, for the last hour, and
// goes on from there. A tick whose previous run has not ended (read when
// the tick fires: the run of the latest tick that submitted one) is
// skipped and counted, unless s.AllowOverlap.
//
// SetSchedule works from any Runtime on the store, client Runtimes
// included.
func (rt *Runtime) SetSchedule(ctx context.Context, s Schedule) error {
	rec, tk, err := rt.scheduleRecord(&s)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: setting schedule %q kept racing its ticks", s.Name)
		}
		cur, old, err := rt.loadSchedule(ctx, s.Name)
		if err != nil && !errors.Is(err, ErrScheduleNotFound) {
			return err
		}
		if cur != nil && sameSchedule(cur, rec) {
			return nil // as it is: its tick job stays, late or not
		}
		now := rt.opts.now()
		next := *rec
		next.UpdatedAt = now.UnixNano()
		txn := new(queue.Txn)
		if cur != nil {
			next.LastRunID, next.LastAt, next.Skipped = cur.LastRunID, cur.LastAt, cur.Skipped
			if cur.NextJob != "" {
				txn.CancelJob(cur.NextJob)
			}
		}
		rt.scheduleTick(txn, &next, tk.next(now))
		txn.CompareAndPut(runrec.ScheduleKey(s.Name), old, runrec.EncodeSchedule(&next))
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue // a tick or another SetSchedule committed: read again
		}
		return err
	}
}

// sameSchedule reports whether two schedule records define the same
// schedule (their state fields aside).
func sameSchedule(a, b *runrec.Schedule) bool {
	x, y := *a, *b
	for _, r := range []*runrec.Schedule{&x, &y} {
		r.Version, r.NextAt, r.NextJob, r.LastRunID, r.LastAt, r.Skipped, r.UpdatedAt = 0, 0, "", "", 0, 0, 0
	}
	if !bytes.Equal(x.Input, y.Input) || !maps.Equal(x.Headers, y.Headers) {
		return false
	}
	x.Input, y.Input, x.Headers, y.Headers = nil, nil, nil, nil
	return reflect.DeepEqual(x, y)
}

// DeleteSchedule deletes the schedule name and its tick job in one
// transaction: it ticks no more. Runs it submitted are not touched.
// ErrScheduleNotFound if there is no such schedule; ErrInvalidSchedule for
// an invalid name.
func (rt *Runtime) DeleteSchedule(ctx context.Context, name string) error {
	if err := ValidateScheduleName(name); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: deleting schedule %q kept racing its ticks", name)
		}
		cur, old, err := rt.loadSchedule(ctx, name)
		if err != nil {
			return err
		}
		txn := new(queue.Txn)
		if cur.NextJob != "" {
			txn.CancelJob(cur.NextJob)
		}
		txn.CompareAndDelete(runrec.ScheduleKey(name), old)
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue
		}
		return err
	}
}

// ListSchedules returns every schedule of the store, by name, with where
// its ticks stand. It works from any Runtime on the store, client
// Runtimes included (on a read-only Queue too).
func (rt *Runtime) ListSchedules(ctx context.Context) ([]ScheduleStatus, error) {
	out := []ScheduleStatus{}
	opts := queue.ScanOptions{Limit: queue.MaxScanLimit}
	for {
		page, err := rt.q.Scan(ctx, []byte(runrec.SchedulePrefix), opts)
		if err != nil {
			return nil, err
		}
		for _, kv := range page.Items {
			rec, err := runrec.DecodeSchedule(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("runtime: schedule record %q: %w", kv.Key, err)
			}
			out = append(out, scheduleStatus(rec))
		}
		if page.Next == nil {
			return out, nil
		}
		opts.After = page.Next
	}
}

// loadSchedule reads a schedule record, returning it with its bytes (for
// compare-and-put); ErrScheduleNotFound if there is none.
func (rt *Runtime) loadSchedule(ctx context.Context, name string) (*runrec.Schedule, []byte, error) {
	b, err := rt.q.Get(ctx, runrec.ScheduleKey(name))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, nil, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	if err != nil {
		return nil, nil, err
	}
	rec, err := runrec.DecodeSchedule(b)
	return rec, b, err
}

// scheduleTick adds to txn the tick job of rec due at at, and names it in
// rec (NextAt, NextJob); a zero at (a Cron that never fires again)
// enqueues nothing.
func (rt *Runtime) scheduleTick(txn *queue.Txn, rec *runrec.Schedule, at time.Time) {
	if at.IsZero() {
		rec.NextAt, rec.NextJob = 0, ""
		return
	}
	rec.NextAt, rec.NextJob = at.UnixNano(), newJobID()
	txn.Enqueue(runrec.TimersQueue(rec.Queue), nil, queue.EnqueueOptions{
		JobID: rec.NextJob, RunAt: at, MaxAttempts: timerAttempts,
		DedupKey: fmt.Sprintf("schedule:%s:%d", rec.Name, at.Unix()),
		Headers:  map[string]string{headerTimer: timerSchedule, headerSchedule: rec.Name},
	})
}

// handleScheduleTick fires a schedule's tick job. If the schedule's record
// still names the job, one transaction acks it, submits the run of the
// latest tick that has passed (the job's own, unless it fires late) unless
// the previous run has not ended (then the tick is skipped and counted) or
// that run exists already (a run with a Concurrency takes a slot of its
// key or joins its line, as Submit's), enqueues the next tick's job and
// compare-and-puts the record. A job that the record no longer names (the
// schedule was replaced or deleted) is acknowledged and dropped.
func (rt *Runtime) handleScheduleTick(claimCtx context.Context, job *queue.Job) error {
	ctx := context.WithoutCancel(claimCtx)
	name := job.Headers[headerSchedule]
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: tick of schedule %q kept racing other writes", name) // retried
		}
		rec, old, err := rt.loadSchedule(ctx, name)
		if errors.Is(err, ErrScheduleNotFound) || err == nil && rec.NextJob != job.ID {
			err = rt.q.Ack(ctx, job)
			if queue.IsClaimLost(err) {
				return nil
			}
			return err
		}
		if err != nil {
			return err // the lease expires and the tick fires again
		}
		again, err := rt.fireTick(ctx, job, rec, old)
		if again {
			continue // replaced meanwhile, or the run was submitted: read again
		}
		return err
	}
}

// fireTick settles the tick job of rec (read as old): true if its
// transaction lost a race on what it read (read again and retry).
func (rt *Runtime) fireTick(ctx context.Context, job *queue.Job, rec *runrec.Schedule, old []byte) (bool, error) {
	name := rec.Name
	if k := rec.ConcKey; k != "" {
		defer rt.concMu.lock(k)() // as Submit's (see concLocks)
	}
	tk, err := tickerOf(rec)
	if err != nil {
		return false, rt.q.DeadLetter(ctx, job, fmt.Sprintf("schedule %q: %v", name, err))
	}
	now := rt.opts.now()
	tick := tk.latest(time.Unix(0, rec.NextAt), now)
	next := *rec
	next.UpdatedAt = now.UnixNano()
	txn := new(queue.Txn).Ack(job)
	skip, err := rt.lastRunActive(ctx, rec)
	if err != nil {
		return false, err
	}
	var dispatched string
	var record *carriedRun
	if skip {
		next.Skipped++
	} else {
		runID := ScheduleRunID(name, tick)
		_, _, err := rt.loadRun(ctx, runID)
		switch {
		case errors.Is(err, ErrRunNotFound):
			spec := scheduleSpec(rec)
			dispatched, record, err = rt.submitOps(ctx, txn, runID, &spec, rec.Queue, runrec.HashInput(spec.Input),
				job.Headers[HeaderTraceParent], now.UnixNano())
			if err != nil {
				return false, err // the lease expires and the tick fires again
			}
		case err != nil:
			return false, err
		} // else submitted already: not twice
		next.LastRunID, next.LastAt = runID, tick.UnixNano()
	}
	rt.scheduleTick(txn, &next, tk.next(tick))
	txn.CompareAndPut(runrec.ScheduleKey(name), old, runrec.EncodeSchedule(&next))
	cctx := ctx
	if dispatched != "" {
		cctx = handoff.WithDispatched(ctx, dispatched, record) // step 0 starts with the record
	}
	_, err = rt.q.Commit(cctx, txn)
	switch {
	case errors.Is(err, queue.ErrConditionFailed):
		return true, nil
	case queue.IsClaimLost(err):
		return false, nil // the job was cancelled (replaced, deleted) or fires again
	}
	return false, err
}

// lastRunActive reports whether a tick of rec is to be skipped: overlap is
// not allowed and the schedule's last run has not ended.
func (rt *Runtime) lastRunActive(ctx context.Context, rec *runrec.Schedule) (bool, error) {
	if rec.AllowOverlap || rec.LastRunID == "" {
		return false, nil
	}
	last, _, err := rt.loadRun(ctx, rec.LastRunID)
	if errors.Is(err, ErrRunNotFound) {
		return false, nil // expired
	}
	if err != nil {
		return false, err
	}
	return last.State != kvrecord.StateTerminal, nil
}

// scheduleRecord checks s and returns its record (without a tick) and its
// ticker. Every error wraps ErrInvalidSchedule.
func (rt *Runtime) scheduleRecord(s *Schedule) (*runrec.Schedule, ticker, error) {
	if err := ValidateScheduleName(s.Name); err != nil {
		return nil, ticker{}, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: schedule %q: %s", ErrInvalidSchedule, s.Name, fmt.Sprintf(format, args...))
	}
	rec := &runrec.Schedule{Name: s.Name, Every: int64(s.Every), Cron: s.Cron, AllowOverlap: s.AllowOverlap}
	switch {
	case s.Every != 0 && s.Cron != "":
		return nil, ticker{}, bad("both Every and Cron are set (want one)")
	case s.Every == 0 && s.Cron == "":
		return nil, ticker{}, bad("neither Every nor Cron is set (want one)")
	case s.Every != 0 && s.Every < MinScheduleEvery:
		return nil, ticker{}, bad("Every %v is under %v", s.Every, MinScheduleEvery)
	}
	if loc := s.Location; loc != nil && loc != time.UTC {
		if loc == time.Local {
			return nil, ticker{}, bad("Location time.Local differs between processes: name a zone (time.LoadLocation)")
		}
		l, err := time.LoadLocation(loc.String())
		switch {
		case err != nil:
			return nil, ticker{}, bad("Location %q cannot be loaded by name (time.LoadLocation): %v", loc, err)
		case l.String() != loc.String() || !sameZone(l, loc, rt.opts.now()):
			// What is recorded is the name, which every process loads: a
			// zone that only takes a loadable name (time.FixedZone("UTC",
			// 3*3600)) would tick on the named zone's clock.
			return nil, ticker{}, bad("Location %q is not the zone time.LoadLocation(%q) gives (a time.FixedZone?)", loc, loc.String())
		}
		if l != time.UTC {
			rec.Location = loc.String()
		}
	}
	tk, err := tickerOf(rec)
	if err != nil {
		return nil, ticker{}, fmt.Errorf("%w: schedule %q: %w", ErrInvalidSchedule, s.Name, err)
	}
	if tk.next(rt.opts.now()).IsZero() {
		return nil, ticker{}, bad("Cron %q never fires", s.Cron)
	}
	spec := &s.Spec
	switch {
	case spec.RunID != "":
		return nil, ticker{}, bad("Spec.RunID %q is set (each tick's run is named NAME@TICK)", spec.RunID)
	case !spec.StartAt.IsZero():
		return nil, ticker{}, bad("Spec.StartAt is set (each tick's run starts at its tick)")
	case !spec.Deadline.IsZero():
		return nil, ticker{}, bad("Spec.Deadline is set (an absolute time: the runs of the ticks after it could not start)")
	}
	for k := range spec.Headers {
		if strings.HasPrefix(k, ReservedPrefix) {
			return nil, ticker{}, fmt.Errorf("%w: schedule %q: Spec: %w: %q", ErrInvalidSchedule, s.Name, ErrReservedHeader, k)
		}
	}
	// Submit refuses headers that leave no room for the reserved ones; a
	// tick would at every tick: check here.
	if err := checkHeaderBudget(spec.Headers); err != nil {
		return nil, ticker{}, fmt.Errorf("%w: schedule %q: Spec.Headers: %w", ErrInvalidSchedule, s.Name, err)
	}
	if err := validateSpecPolicy(spec); err != nil {
		return nil, ticker{}, fmt.Errorf("%w: schedule %q: Spec: %w", ErrInvalidSchedule, s.Name, err)
	}
	if err := validateConcurrency(spec.Concurrency); err != nil {
		return nil, ticker{}, fmt.Errorf("%w: schedule %q: Spec: %w", ErrInvalidSchedule, s.Name, err)
	}
	rec.Queue, rec.SpecQueue = rt.opts.queueName, spec.Queue
	if spec.Queue != "" {
		if err := rt.validateStepQueue(spec.Queue); err != nil {
			return nil, ticker{}, fmt.Errorf("%w: schedule %q: Spec: %w", ErrInvalidSchedule, s.Name, err)
		}
		rec.Queue = spec.Queue
	}
	rec.Input, rec.Headers, rec.MaxAttempts, rec.Priority = spec.Input, spec.Headers, spec.MaxAttemptsPerStep, spec.Priority
	rec.StepTimeout = int64(spec.StepTimeout)
	rec.ConcKey, rec.ConcLimit = spec.Concurrency.Key, uint32(spec.Concurrency.Limit)
	if p := spec.Retry; p != nil {
		rec.HasRetry = true
		rec.RetryMaxAttempts, rec.RetryInitialBackoff, rec.RetryMaxBackoff = p.MaxAttempts, int64(p.InitialBackoff), int64(p.MaxBackoff)
		rec.RetryMultiplier, rec.RetryJitter = p.Multiplier, p.Jitter
	}
	if !sameSpec(*spec, scheduleSpec(rec)) {
		// A RunSpec field that the record does not carry (one added to
		// RunSpec later) is refused rather than dropped from the runs.
		return nil, ticker{}, bad("Spec sets a field that schedules do not carry (they carry Input, Headers, " +
			"MaxAttemptsPerStep, Priority, StepTimeout, Retry, Queue and Concurrency)")
	}
	return rec, tk, nil
}

// sameSpec reports whether two RunSpecs are equal, an empty Input or
// Headers being the same as a nil one.
func sameSpec(a, b RunSpec) bool {
	if !bytes.Equal(a.Input, b.Input) || !maps.Equal(a.Headers, b.Headers) {
		return false
	}
	a.Input, b.Input, a.Headers, b.Headers = nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// scheduleSpec is the RunSpec of a schedule record's runs (without RunID).
func scheduleSpec(rec *runrec.Schedule) RunSpec {
	spec := RunSpec{Input: rec.Input, Headers: rec.Headers, MaxAttemptsPerStep: rec.MaxAttempts,
		Priority: rec.Priority, StepTimeout: time.Duration(rec.StepTimeout), Queue: rec.SpecQueue,
		Concurrency: Concurrency{Key: rec.ConcKey, Limit: int(rec.ConcLimit)}}
	if rec.HasRetry {
		spec.Retry = &steprunner.RetryPolicy{MaxAttempts: rec.RetryMaxAttempts,
			InitialBackoff: time.Duration(rec.RetryInitialBackoff), MaxBackoff: time.Duration(rec.RetryMaxBackoff),
			Multiplier: rec.RetryMultiplier, Jitter: rec.RetryJitter}
	}
	return spec
}

// scheduleStatus is what ListSchedules reports of a record.
func scheduleStatus(rec *runrec.Schedule) ScheduleStatus {
	st := ScheduleStatus{
		Schedule: Schedule{Name: rec.Name, Every: time.Duration(rec.Every), Cron: rec.Cron,
			Spec: scheduleSpec(rec), AllowOverlap: rec.AllowOverlap},
		Queue: rec.Queue, LastRunID: rec.LastRunID, Skipped: rec.Skipped,
	}
	if rec.Location != "" {
		st.Location, _ = time.LoadLocation(rec.Location)
	}
	if rec.NextAt != 0 {
		st.NextAt = time.Unix(0, rec.NextAt).UTC()
	}
	if rec.LastAt != 0 {
		st.LastAt = time.Unix(0, rec.LastAt).UTC()
	}
	return st
}

// ticker computes a schedule's ticks.
type ticker struct {
	every time.Duration // > 0: multiples of it since the Unix epoch
	cron  cron.Schedule // else
	loc   *time.Location
}

// tickerOf returns the ticker of a schedule record; an invalid Cron or
// Location is an error.
func tickerOf(rec *runrec.Schedule) (ticker, error) {
	if rec.Every > 0 {
		return ticker{every: time.Duration(rec.Every)}, nil
	}
	loc := time.UTC
	if rec.Location != "" {
		l, err := time.LoadLocation(rec.Location)
		if err != nil {
			return ticker{}, fmt.Errorf("location %q: %w", rec.Location, err)
		}
		loc = l
	}
	expr := strings.TrimSpace(rec.Cron)
	switch {
	case strings.HasPrefix(expr, "@every"):
		return ticker{}, fmt.Errorf("cron %q: @every is refused (use Every)", rec.Cron)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return ticker{}, fmt.Errorf("cron %q: a time zone prefix is refused (use Location)", rec.Cron)
	}
	c, err := cron.ParseStandard(expr)
	if err != nil {
		return ticker{}, fmt.Errorf("cron %q: %w", rec.Cron, err)
	}
	return ticker{cron: c, loc: loc}, nil
}

// sameZone reports whether zones a and b give the same offset and
// abbreviation every day of the two years from now (daylight saving time
// and its changes included, as far as the zone database knows them).
func sameZone(a, b *time.Location, now time.Time) bool {
	for t := now; t.Before(now.AddDate(2, 0, 0)); t = t.Add(24 * time.Hour) {
		na, oa := t.In(a).Zone()
		nb, ob := t.In(b).Zone()
		if na != nb || oa != ob {
			return false
		}
	}
	return true
}

// next returns the first tick strictly after t (UTC); the zero time if
// there is none (a Cron that matches no date in the next five years).
func (k ticker) next(t time.Time) time.Time {
	if k.every > 0 {
		e := int64(k.every)
		ns := t.UnixNano()
		n := ns - ns%e // ns >= 0: any time a store is written
		return time.Unix(0, n+e).UTC()
	}
	n := k.cron.Next(t.In(k.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// latest returns the latest tick in [from, now], from being a tick: from
// itself if no later tick has passed (or now is before from).
func (k ticker) latest(from, now time.Time) time.Time {
	from = from.UTC()
	if !now.After(from) {
		return from
	}
	if k.every > 0 {
		e := int64(k.every)
		ns := now.UnixNano()
		return time.Unix(0, ns-ns%e).UTC()
	}
	// A cron schedule has no "previous": walk forward from a moment
	// shortly before now, widening the window only while it holds no
	// tick, so that a long downtime costs few steps.
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		start := now.Add(-w)
		if !start.After(from) {
			break
		}
		if t := k.walk(start, now); !t.IsZero() {
			return t
		}
	}
	if t := k.walk(from, now); !t.IsZero() {
		return t
	}
	return from
}

// walk returns the latest tick in (start, now]; zero if none.
func (k ticker) walk(start, now time.Time) time.Time {
	var last time.Time
	for t := k.next(start); !t.IsZero() && !t.After(now); t = k.next(t) {
		last = t
	}
	return last
}
