package runtime_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the tests' zones, on machines without a zoneinfo database

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

// scheduleRuns returns the runs of schedule name in the store (every
// run whose ID starts with "name@"), by tick.
func scheduleRuns(t testing.TB, rt *runtime.Runtime, name string) []runtime.RunStatus {
	t.Helper()
	var out []runtime.RunStatus
	opts := runtime.ListOptions{Limit: runtime.MaxListLimit}
	for {
		page, err := rt.ListRuns(context.Background(), opts)
		if err != nil {
			t.Fatalf("ListRuns: %v", err)
		}
		for _, r := range page.Runs {
			if strings.HasPrefix(r.RunID, name+"@") {
				out = append(out, r)
			}
		}
		if page.Next == "" {
			break
		}
		opts.Cursor = page.Next
	}
	slices.SortFunc(out, func(a, b runtime.RunStatus) int { return strings.Compare(a.RunID, b.RunID) })
	return out
}

// tickOf parses the tick of a schedule's run ID.
func tickOf(t testing.TB, runID string) time.Time {
	t.Helper()
	_, s, ok := strings.Cut(runID, "@")
	tick, err := time.Parse(runtime.TickLayout, s)
	if !ok || err != nil {
		t.Fatalf("run ID %q: not NAME@TICK: %v", runID, err)
	}
	return tick
}

// checkTickRuns checks runs of a schedule ticking every period: each
// run's ID is its tick, a multiple of period since the epoch, and it was
// submitted within its period ([tick, tick+period)): a tick that fired
// late submitted the latest tick that had passed, not an older one. It
// returns the ticks, in order.
func checkTickRuns(t testing.TB, runs []runtime.RunStatus, period time.Duration) []time.Time {
	t.Helper()
	var ticks []time.Time
	for _, r := range runs {
		tick := tickOf(t, r.RunID)
		if tick.UnixNano()%int64(period) != 0 {
			t.Errorf("run %s: tick %v is not a multiple of %v since the epoch", r.RunID, tick, period)
		}
		if r.SubmittedAt.Before(tick) || !r.SubmittedAt.Before(tick.Add(period)) {
			t.Errorf("run %s submitted at %v, outside its tick's period [%v, +%v)", r.RunID,
				r.SubmittedAt.UTC().Format(time.RFC3339Nano), tick.Format(time.RFC3339), period)
		}
		ticks = append(ticks, tick)
	}
	return ticks
}

// mustSchedule returns the status of schedule name (ListSchedules).
func mustSchedule(t testing.TB, rt *runtime.Runtime, name string) runtime.ScheduleStatus {
	t.Helper()
	all, err := rt.ListSchedules(context.Background())
	if err != nil {
		t.Fatalf("ListSchedules: %v", err)
	}
	for _, s := range all {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("ListSchedules: no schedule %q in %+v", name, all)
	return runtime.ScheduleStatus{}
}

// A schedule every second, set from a client Runtime, ticks in the
// Runtime that runs its step queue: one run per tick, named NAME@TICK,
// from the Spec; ListSchedules (client) says where it stands.
func TestScheduleEvery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	log := &stepLog{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		return steprunner.Succeed(s.Payload), nil
	}), nil)
	client := newRuntime(t, q, nil, nil)
	spec := runtime.RunSpec{Input: []byte("tick"), Headers: map[string]string{"k": "v"}, Priority: 3,
		Retry: &steprunner.RetryPolicy{MaxAttempts: 7}}
	if err := client.SetSchedule(ctx, runtime.Schedule{Name: "every", Every: time.Second, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := mustSchedule(t, client, "every")
	if st.Every != time.Second || st.Cron != "" || st.Location != nil || st.AllowOverlap || st.LastRunID != "" ||
		st.Skipped != 0 || string(st.Spec.Input) != "tick" || st.Spec.Headers["k"] != "v" || st.Spec.Priority != 3 ||
		st.Spec.Retry == nil || st.Spec.Retry.MaxAttempts != 7 || st.NextAt.UnixNano()%int64(time.Second) != 0 ||
		st.NextAt.Before(time.Now().Add(-time.Second)) {
		t.Errorf("ListSchedules = %+v", st)
	}
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "3 ticks to run", func() bool {
		n := 0
		for _, r := range scheduleRuns(t, client, "every") {
			if r.State == runtime.StateSucceeded {
				n++
			}
		}
		return n >= 3
	})
	runs := scheduleRuns(t, client, "every")
	checkTickRuns(t, runs, time.Second)
	for _, r := range runs {
		steps := log.of(r.RunID)
		if r.State != runtime.StateSucceeded {
			continue
		}
		if len(steps) != 1 || string(steps[0].Payload) != "tick" || steps[0].Headers["k"] != "v" || steps[0].MaxAttempts != 7 {
			t.Errorf("run %s ran %+v, want one step of the Spec", r.RunID, steps)
		}
	}
	st = mustSchedule(t, client, "every")
	last := runs[len(runs)-1]
	if st.LastRunID < last.RunID || !st.NextAt.After(st.LastAt) || st.LastAt.UnixNano()%int64(time.Second) != 0 {
		t.Errorf("ListSchedules = %+v after runs up to %s", st, last.RunID)
	}
}

// Ticks whose previous run has not ended are skipped and counted; with
// AllowOverlap they are not.
func TestScheduleOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	release := make(chan struct{})
	var mu sync.Mutex
	running := map[string]int{} // by schedule: runs in their step now
	most := map[string]int{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		name, _, _ := strings.Cut(s.RunID, "@")
		mu.Lock()
		running[name]++
		most[name] = max(most[name], running[name])
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[name]--
			mu.Unlock()
		}()
		select {
		case <-release:
		case <-ctx.Done():
			return steprunner.Outcome{}, ctx.Err()
		}
		return steprunner.Succeed(nil), nil
	}), nil)
	startRun(t, rt)
	for _, s := range []runtime.Schedule{
		{Name: "one", Every: time.Second},
		{Name: "many", Every: time.Second, AllowOverlap: true},
	} {
		if err := rt.SetSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, waitTimeout, "2 skipped ticks, and 2 overlapping runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return mustSchedule(t, rt, "one").Skipped >= 2 && most["many"] >= 2
	})
	runs := scheduleRuns(t, rt, "one")
	st := mustSchedule(t, rt, "one")
	if len(runs) != 1 || st.LastRunID != runs[0].RunID || runs[0].State.Terminal() {
		t.Fatalf("while its first run runs: runs %+v, schedule %+v; want that one run only", runs, st)
	}
	if m := mustSchedule(t, rt, "many"); m.Skipped != 0 {
		t.Errorf("AllowOverlap: %d ticks skipped", m.Skipped)
	}
	close(release)
	testenv.Eventually(t, waitTimeout, "a tick after the first run ended to run", func() bool {
		runs := scheduleRuns(t, rt, "one")
		return len(runs) >= 2 && runs[1].State == runtime.StateSucceeded
	})
	runs = scheduleRuns(t, rt, "one")
	ticks := checkTickRuns(t, runs, time.Second)
	if gap := ticks[1].Sub(ticks[0]); gap < 3*time.Second {
		t.Errorf("the second run's tick is %v after the first's, with %d ticks skipped in between", gap, st.Skipped)
	}
	mu.Lock()
	defer mu.Unlock()
	if most["one"] != 1 {
		t.Errorf("%d runs of a schedule without AllowOverlap ran at once", most["one"])
	}
}

// After downtime, one run for the latest tick that passed, not one per
// missed tick. The Runtime that fires the tick runs an hour ahead (its
// clock, WithClock): for it the tick job, due at the next second, fires
// an hour late.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	client := newRuntime(t, q, nil, nil)
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Succeed(nil), nil
	}), nil, runtime.WithClock(ahead))
	if err := client.SetSchedule(ctx, runtime.Schedule{Name: "late", Every: time.Second}); err != nil {
		t.Fatal(err)
	}
	due := mustSchedule(t, client, "late").NextAt
	// Set again, as it is, from the Runtime an hour ahead: nothing changes
	// (a service that sets its schedules at each start keeps a late tick).
	if err := rt.SetSchedule(ctx, runtime.Schedule{Name: "late", Every: time.Second}); err != nil {
		t.Fatal(err)
	}
	if st := mustSchedule(t, client, "late"); !st.NextAt.Equal(due) {
		t.Fatalf("set again as it is: next tick %v, was %v", st.NextAt, due)
	}
	// A cron schedule, set by a Runtime ten minutes behind: its first
	// tick has long passed, and the latest is the last 5-minute mark.
	behind := newRuntime(t, q, nil, nil, runtime.WithClock(func() time.Time { return time.Now().Add(-10 * time.Minute) }))
	nyc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	if err := behind.SetSchedule(ctx, runtime.Schedule{Name: "cron", Cron: "*/5 * * * *", Location: nyc,
		Spec: runtime.RunSpec{Queue: "cron-steps"}}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	startRun(t, rt)
	// The cron ticks on the step queue cron-steps, fired by a Runtime with
	// the real clock.
	startRun(t, newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Succeed(nil), nil
	}), nil, runtime.WithQueueName("cron-steps")))
	testenv.Eventually(t, waitTimeout, "the late tick to run", func() bool {
		return len(scheduleRuns(t, client, "late")) > 0 && mustSchedule(t, client, "cron").LastRunID != ""
	})
	after := time.Now()
	runs := scheduleRuns(t, client, "late")
	if len(runs) != 1 {
		t.Fatalf("runs %+v, want one", runs)
	}
	tick := tickOf(t, runs[0].RunID)
	if tick.Before(due.Add(time.Hour)) || tick.After(after.Add(time.Hour)) {
		t.Errorf("the late tick ran as %s, want the latest tick before its Runtime's now (due %v, +1h)", runs[0].RunID, due)
	}
	st := mustSchedule(t, client, "late")
	if st.LastRunID != runs[0].RunID || !st.LastAt.Equal(tick) || !st.NextAt.Equal(tick.Add(time.Second)) || st.Skipped != 0 {
		t.Errorf("ListSchedules = %+v after the late tick %v", st, tick)
	}

	cr := mustSchedule(t, client, "cron")
	crTick := tickOf(t, cr.LastRunID)
	if lo := before.Truncate(5 * time.Minute); crTick.Before(lo) || crTick.After(after) || crTick.Minute()%5 != 0 ||
		!cr.LastAt.Equal(crTick) || !cr.NextAt.Equal(crTick.Add(5*time.Minute)) {
		t.Errorf("cron schedule after its late tick: %+v, want the tick of the last 5-minute mark (%v)", cr, lo)
	}
	if cr.Location == nil || cr.Location.String() != "America/New_York" {
		t.Errorf("Location = %v", cr.Location)
	}
}

// Cron ticks are in Location; Every ticks are multiples of Every since the
// epoch, whatever the Location.
func TestScheduleTicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil)
	nyc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s    runtime.Schedule
		want func(next time.Time) bool
	}{
		{runtime.Schedule{Name: "nine", Cron: "0 9 * * *", Location: nyc},
			func(n time.Time) bool {
				l := n.In(nyc)
				return l.Hour() == 9 && l.Minute() == 0 && time.Until(l) <= 25*time.Hour
			}},
		{runtime.Schedule{Name: "nine-utc", Cron: "0 9 * * 1-5"},
			func(n time.Time) bool {
				return n.Hour() == 9 && n.Minute() == 0 && n.Weekday() != time.Saturday && n.Weekday() != time.Sunday
			}},
		{runtime.Schedule{Name: "hourly", Cron: "@hourly", Location: nyc},
			func(n time.Time) bool { return n.Minute() == 0 && n.Second() == 0 && time.Until(n) <= time.Hour }},
		{runtime.Schedule{Name: "90m", Every: 90 * time.Minute, Location: nyc},
			func(n time.Time) bool {
				return n.UnixNano()%int64(90*time.Minute) == 0 && time.Until(n) <= 90*time.Minute
			}},
	} {
		if err := rt.SetSchedule(ctx, tc.s); err != nil {
			t.Fatalf("%s: %v", tc.s.Name, err)
		}
		next := mustSchedule(t, rt, tc.s.Name).NextAt
		if !next.After(time.Now().Add(-time.Second)) || !tc.want(next) {
			t.Errorf("%s: next tick %v (%v there)", tc.s.Name, next, next.In(nyc))
		}
	}
}

// SetSchedule replaces a schedule: the old tick job is cancelled (also
// when the new one is due at the same tick) and the next ticks run the new
// Spec; DeleteSchedule deletes it and its job.
func TestScheduleReplaceDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	log := &stepLog{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(s)
		return steprunner.Succeed(nil), nil
	}), nil)
	timers := runrec.TimersQueue(stepsQueue)
	jobs := func() int64 { s := mustStats(t, q, timers); return s.Pending + s.Scheduled + s.Claimed }
	set := func(s runtime.Schedule) {
		t.Helper()
		if err := rt.SetSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	set(runtime.Schedule{Name: "r", Every: time.Hour, Spec: runtime.RunSpec{Input: []byte("old")}})
	first := mustSchedule(t, rt, "r")
	set(runtime.Schedule{Name: "r", Every: time.Hour, Spec: runtime.RunSpec{Input: []byte("mid")}})
	if st := mustSchedule(t, rt, "r"); !st.NextAt.Equal(first.NextAt) || string(st.Spec.Input) != "mid" {
		t.Errorf("replaced: %+v, want the same tick %v and the new Spec", st, first.NextAt)
	}
	if n := jobs(); n != 1 {
		t.Fatalf("%d tick jobs after a replace at the same tick, want 1", n)
	}
	// Set as it is from a Runtime a day ahead: unchanged. Replaced (another
	// Every) from it: the next tick is a day ahead.
	dayAhead := newRuntime(t, q, nil, nil, runtime.WithClock(func() time.Time { return time.Now().Add(24 * time.Hour) }))
	if err := dayAhead.SetSchedule(ctx, runtime.Schedule{Name: "r", Every: time.Hour, Spec: runtime.RunSpec{Input: []byte("mid")}}); err != nil {
		t.Fatal(err)
	}
	if st := mustSchedule(t, rt, "r"); !st.NextAt.Equal(first.NextAt) || jobs() != 1 {
		t.Errorf("set as it is: %+v (%d jobs), want it unchanged (next %v)", st, jobs(), first.NextAt)
	}
	if err := dayAhead.SetSchedule(ctx, runtime.Schedule{Name: "r", Every: 2 * time.Hour, Spec: runtime.RunSpec{Input: []byte("mid")}}); err != nil {
		t.Fatal(err)
	}
	if st := mustSchedule(t, rt, "r"); st.NextAt.Before(first.NextAt.Add(22*time.Hour)) || st.Every != 2*time.Hour || jobs() != 1 {
		t.Errorf("replaced: %+v (%d jobs), want its next tick a day ahead", st, jobs())
	}
	set(runtime.Schedule{Name: "r", Every: time.Second, Spec: runtime.RunSpec{Input: []byte("new")}})
	if n := jobs(); n != 1 {
		t.Fatalf("%d tick jobs after a second replace, want 1", n)
	}
	startRun(t, rt)
	testenv.Eventually(t, waitTimeout, "a tick of the replaced schedule", func() bool { return log.count() > 0 })
	for _, s := range log.steps {
		if string(s.Payload) != "new" {
			t.Errorf("run %s ran with %q, want the new Spec", s.RunID, s.Payload)
		}
	}
	if err := rt.DeleteSchedule(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "no tick job left", func() bool { return jobs() == 0 })
	if all, err := rt.ListSchedules(ctx); err != nil || len(all) != 0 {
		t.Errorf("ListSchedules after the delete = %+v, %v", all, err)
	}
	if err := rt.DeleteSchedule(ctx, "r"); !errors.Is(err, runtime.ErrScheduleNotFound) {
		t.Errorf("DeleteSchedule again: %v, want ErrScheduleNotFound", err)
	}
	if err := rt.DeleteSchedule(ctx, "a/b"); !errors.Is(err, runtime.ErrInvalidSchedule) {
		t.Errorf("DeleteSchedule(a/b): %v, want ErrInvalidSchedule", err)
	}
	// A schedule deleted as its tick fires: nothing more (the tick job,
	// if it was claimed, finds no record and is dropped).
	set(runtime.Schedule{Name: "d", Every: time.Second})
	testenv.Eventually(t, waitTimeout, "a tick of d", func() bool { return len(scheduleRuns(t, rt, "d")) > 0 })
	if err := rt.DeleteSchedule(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "no tick job left", func() bool { return jobs() == 0 })
}

// Bad input for every field: ErrInvalidSchedule (and the Spec's own error
// where Submit would return one), nothing written.
func TestScheduleInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := openQueue(t, memURL())
	rt := newRuntime(t, q, nil, nil)
	ok := runtime.Schedule{Name: "ok", Every: time.Minute}
	with := func(f func(s *runtime.Schedule)) runtime.Schedule { s := ok; f(&s); return s }
	for _, tc := range []struct {
		what string
		s    runtime.Schedule
		also error
	}{
		{"empty name", with(func(s *runtime.Schedule) { s.Name = "" }), nil},
		{"blank name", with(func(s *runtime.Schedule) { s.Name = "  " }), nil},
		{"name with a space around", with(func(s *runtime.Schedule) { s.Name = " x" }), nil},
		{"name with '/'", with(func(s *runtime.Schedule) { s.Name = "a/b" }), nil},
		{"name with '@'", with(func(s *runtime.Schedule) { s.Name = "a@b" }), nil},
		{"name not ASCII", with(func(s *runtime.Schedule) { s.Name = "é" }), nil},
		{"name with a control byte", with(func(s *runtime.Schedule) { s.Name = "a\nb" }), nil},
		{"name too long", with(func(s *runtime.Schedule) { s.Name = strings.Repeat("n", runtime.MaxScheduleNameLen+1) }), nil},
		{"neither Every nor Cron", with(func(s *runtime.Schedule) { s.Every = 0 }), nil},
		{"both Every and Cron", with(func(s *runtime.Schedule) { s.Cron = "* * * * *" }), nil},
		{"Every under 1s", with(func(s *runtime.Schedule) { s.Every = 999 * time.Millisecond }), nil},
		{"negative Every", with(func(s *runtime.Schedule) { s.Every = -time.Hour }), nil},
		{"bad cron", with(func(s *runtime.Schedule) { s.Every, s.Cron = 0, "not cron" }), nil},
		{"cron of 6 fields", with(func(s *runtime.Schedule) { s.Every, s.Cron = 0, "0 * * * * *" }), nil},
		{"cron out of range", with(func(s *runtime.Schedule) { s.Every, s.Cron = 0, "61 * * * *" }), nil},
		{"cron @every", with(func(s *runtime.Schedule) { s.Every, s.Cron = 0, "@every 1m" }), nil},
		{"cron with a zone", with(func(s *runtime.Schedule) { s.Every, s.Cron = 0, "CRON_TZ=Europe/Paris 0 9 * * *" }), nil},
		{"cron that never fires", with(func(s *runtime.Schedule) { s.Every, s.Cron = 0, "0 0 30 2 *" }), nil},
		{"Location time.Local", with(func(s *runtime.Schedule) { s.Every, s.Cron, s.Location = 0, "@daily", time.Local }), nil},
		{"Location without a name", with(func(s *runtime.Schedule) { s.Every, s.Cron, s.Location = 0, "@daily", time.FixedZone("X", 3600) }), nil},
		{"Location with an empty name", with(func(s *runtime.Schedule) { s.Every, s.Cron, s.Location = 0, "@daily", time.FixedZone("", 3600) }), nil},
		// A fixed zone named like a loadable one: the name alone is
		// recorded, so it would tick on the named zone's clock.
		{"Location FixedZone named UTC", with(func(s *runtime.Schedule) { s.Every, s.Cron, s.Location = 0, "@daily", time.FixedZone("UTC", 3*3600) }), nil},
		{"Location FixedZone named New York", with(func(s *runtime.Schedule) {
			s.Every, s.Cron, s.Location = 0, "@daily", time.FixedZone("America/New_York", 5*3600)
		}), nil},
		{"Location FixedZone at New York's winter offset", with(func(s *runtime.Schedule) {
			s.Every, s.Cron, s.Location = 0, "@daily", time.FixedZone("America/New_York", -5*3600)
		}), nil},
		{"Spec.RunID", with(func(s *runtime.Schedule) { s.Spec.RunID = "r" }), nil},
		{"Spec.StartAt", with(func(s *runtime.Schedule) { s.Spec.StartAt = time.Now().Add(time.Hour) }), nil},
		{"Spec.Deadline", with(func(s *runtime.Schedule) { s.Spec.Deadline = time.Now().Add(time.Hour) }), nil},
		{"Spec reserved header", with(func(s *runtime.Schedule) { s.Spec.Headers = map[string]string{"workflow.x": "1"} }), runtime.ErrReservedHeader},
		{"Spec negative StepTimeout", with(func(s *runtime.Schedule) { s.Spec.StepTimeout = -time.Second }), runtime.ErrInvalidRunSpec},
		{"Spec bad Retry", with(func(s *runtime.Schedule) { s.Spec.Retry = &steprunner.RetryPolicy{Multiplier: 0.5} }), runtime.ErrInvalidRunSpec},
		{"Spec headers too large", with(func(s *runtime.Schedule) {
			s.Spec.Headers = map[string]string{"big": strings.Repeat("x", queue.MaxHeaderBytes)}
		}), queue.ErrTooLarge},
		{"Spec bad Queue", with(func(s *runtime.Schedule) { s.Spec.Queue = "q.timers" }), runtime.ErrInvalidQueueName},
		{"Spec Queue the notify queue", with(func(s *runtime.Schedule) { s.Spec.Queue = notifyQueue }), runtime.ErrInvalidQueueName},
	} {
		err := rt.SetSchedule(ctx, tc.s)
		if !errors.Is(err, runtime.ErrInvalidSchedule) || tc.also != nil && !errors.Is(err, tc.also) {
			t.Errorf("%s: %v, want ErrInvalidSchedule (and %v)", tc.what, err, tc.also)
			continue
		}
		t.Logf("%s: %v", tc.what, err)
	}
	if all, err := rt.ListSchedules(ctx); err != nil || len(all) != 0 {
		t.Errorf("ListSchedules after bad input = %+v, %v", all, err)
	}
	page, err := q.Scan(ctx, []byte("workflow/"), queue.ScanOptions{})
	if err != nil || len(page.Items) != 0 {
		t.Errorf("keys written: %d, %v", len(page.Items), err)
	}
	if s := mustStats(t, q, runrec.TimersQueue(stepsQueue)); s.Pending+s.Scheduled != 0 {
		t.Errorf("tick jobs enqueued: %+v", s)
	}
	if err := rt.SetSchedule(ctx, with(func(s *runtime.Schedule) { s.Name = strings.Repeat("n", runtime.MaxScheduleNameLen) })); err != nil {
		t.Errorf("the longest name: %v", err)
	}
	if err := runtime.ValidateRunID(runtime.ScheduleRunID(strings.Repeat("n", runtime.MaxScheduleNameLen), time.Now())); err != nil {
		t.Errorf("the longest name's run ID: %v", err)
	}
}
