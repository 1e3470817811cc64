package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// servedBy records which Runtime ran each step: "<run>/<step>" -> name.
type servedBy struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *servedBy) add(who string, st *steprunner.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	s.m[fmt.Sprintf("%s/%d", st.RunID, st.Number)] = who
}

func (s *servedBy) get(run string, step int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[fmt.Sprintf("%s/%d", run, step)]
}

// routeRunner is the runner of the Runtime named who: the run's input
// lists, per step, the queue of the next step ("-": none, stay) and what
// the step returns: "c" Continue, "a" ContinueAfter(5ms), "w"
// AwaitSignal("go", 0), "t" AwaitSignal("go", 20ms), "s" Succeed. E.g.
// "c:gpu,c:-,s:-" runs step 0 here, steps 1 and 2 on gpu.
func routeRunner(who string, log *servedBy) steprunner.RunnerFunc {
	return func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		log.add(who, s)
		plan := strings.Split(s.Headers["plan"], ",")
		if int(s.Number) >= len(plan) {
			return steprunner.Fail("no plan"), nil
		}
		kind, q, _ := strings.Cut(plan[s.Number], ":")
		var out steprunner.Outcome
		switch kind {
		case "c":
			out = steprunner.Continue(nil)
		case "a":
			out = steprunner.ContinueAfter(nil, 5*time.Millisecond)
		case "w":
			out = steprunner.AwaitSignal("go", 0)
		case "t":
			out = steprunner.AwaitSignal("go", 20*time.Millisecond)
		default:
			return steprunner.Succeed([]byte(who)), nil
		}
		if q != "-" {
			out = out.OnQueue(q)
		}
		return out, nil
	}
}

// TestOnQueueSameProcess: OnQueue on Continue, ContinueAfter and
// AwaitSignal (woken by a signal, and by its timeout) sends the next step
// to the Runtime that serves that queue, in the same process; without
// OnQueue the next step stays on its queue; RunSpec.Queue places step 0;
// one notification per run. Fails if a step runs on the wrong Runtime.
func TestOnQueueSameProcess(t *testing.T) {
	q := openQueue(t, memURL())
	log := &servedBy{}
	hook := &hookRecorder{}
	main := newRuntime(t, q, routeRunner("main", log), hook)
	gpu := newRuntime(t, q, routeRunner("gpu", log), nil, runtime.WithQueueName("gpu"))
	startRun(t, main)
	startRun(t, gpu)
	ctx := context.Background()
	runs := map[string]struct {
		plan  string
		queue string // RunSpec.Queue
		want  string // who ran steps 0, 1, ...
	}{
		"continue": {"c:gpu,c:-,c:workflow-steps,s:-", "", "main gpu gpu main"},
		"after":    {"a:gpu,a:workflow-steps,s:-", "", "main gpu main"},
		"signal":   {"w:gpu,s:-", "", "main gpu"},
		"timeout":  {"t:gpu,t:workflow-steps,s:-", "", "main gpu main"},
		"spec":     {"c:-,c:workflow-steps,s:-", "gpu", "gpu gpu main"},
	}
	for id, r := range runs {
		mustSubmit(t, main, runtime.RunSpec{RunID: id, Queue: r.queue, Headers: map[string]string{"plan": r.plan}})
	}
	waitStatus(t, main, "signal", "waiting", func(s runtime.RunStatus) bool { return s.State == runtime.StateWaiting })
	if st, _ := main.Status(ctx, "signal"); st.Queue != "gpu" {
		t.Errorf("waiting run's Status.Queue = %q, want gpu (where its next step goes)", st.Queue)
	}
	if err := main.Signal(ctx, "signal", "go", nil); err != nil {
		t.Fatal(err)
	}
	for id, r := range runs {
		o := hook.wait(t, id)
		wantWho := strings.Fields(r.want)
		if o.Status != terminal.Succeeded || string(o.Result) != wantWho[len(wantWho)-1] {
			t.Errorf("run %s: outcome %+v", id, o)
		}
		var got []string
		for i := range wantWho {
			got = append(got, log.get(id, i))
		}
		if strings.Join(got, " ") != r.want {
			t.Errorf("run %s ran on %q, want %q", id, got, r.want)
		}
		if st, err := main.Status(ctx, id); err != nil || st.Queue != "workflow-steps" && id != "signal" {
			t.Errorf("run %s: Status %+v, %v; want its final step's queue", id, st, err)
		}
	}
	whenIdle(t, q, "one notification per run", func() bool { return hook.total() == len(runs) })
}

// TestOnQueueUnserved: a step sent to a queue that no Runtime serves waits
// there, visible in Status (its queue), and Cancel, Retry, Pause, Resume
// and Signal of such a run work, each enqueuing its step on that queue;
// a Runtime that serves it later runs it. Fails if a control call moves a
// step to the caller's queue, or loses it.
func TestOnQueueUnserved(t *testing.T) {
	q := openQueue(t, memURL())
	log := &servedBy{}
	hook := &hookRecorder{}
	main := newRuntime(t, q, routeRunner("main", log), hook)
	client := newRuntime(t, q, nil, nil)
	startRun(t, main)
	ctx := context.Background()
	pendingOn := func(id string, step uint32) func(runtime.RunStatus) bool {
		return func(s runtime.RunStatus) bool {
			return s.State == runtime.StatePending && s.CurrentStep == step && s.Queue == "later"
		}
	}
	for _, id := range []string{"cancel", "pause"} {
		mustSubmit(t, client, runtime.RunSpec{RunID: id, Headers: map[string]string{"plan": "c:later,s:-"}})
		waitStatus(t, client, id, "pending on queue later", pendingOn(id, 1))
	}
	mustSubmit(t, client, runtime.RunSpec{RunID: "signal", Headers: map[string]string{"plan": "w:later,s:-"}})
	waitStatus(t, client, "signal", "waiting", func(s runtime.RunStatus) bool {
		return s.State == runtime.StateWaiting && s.Queue == "later"
	})
	if err := client.Signal(ctx, "signal", "go", nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, client, "signal", "pending on queue later", pendingOn("signal", 1))

	// Cancel removes the step from queue later; Retry puts it back there.
	if ok, err := client.Cancel(ctx, "cancel"); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	if o := hook.wait(t, "cancel"); o.Status != terminal.Cancelled {
		t.Fatalf("cancel: outcome %+v", o)
	}
	if st, _ := client.Status(ctx, "cancel"); st.Queue != "later" {
		t.Errorf("cancelled run's Status.Queue = %q, want later", st.Queue)
	}
	if err := client.Retry(ctx, "cancel"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, client, "cancel", "pending on queue later after Retry", pendingOn("cancel", 1))

	// Pause parks the step; Resume enqueues it on queue later again.
	if err := client.Pause(ctx, "pause"); err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(t, client, "pause", "paused", func(s runtime.RunStatus) bool { return s.State == runtime.StatePaused }); st.Queue != "later" {
		t.Errorf("paused run's Status.Queue = %q, want later", st.Queue)
	}
	if err := client.Resume(ctx, "pause"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, client, "pause", "pending on queue later after Resume", pendingOn("pause", 1))

	if got := log.get("cancel", 1) + log.get("pause", 1) + log.get("signal", 1); got != "" {
		t.Fatalf("a step of queue later ran before anyone served it: %q", got)
	}
	later := newRuntime(t, q, routeRunner("later", log), nil, runtime.WithQueueName("later"))
	startRun(t, later)
	for _, id := range []string{"cancel", "pause", "signal"} {
		testenv.Eventually(t, waitTimeout, "run "+id+" to succeed", func() bool {
			for _, o := range hook.outcomes(id) {
				if o.Status == terminal.Succeeded {
					return true
				}
			}
			return false
		})
		if who := log.get(id, 1); who != "later" {
			t.Errorf("run %s: step 1 ran on %q, want later", id, who)
		}
	}
}

// TestInvalidQueueNames: invalid step queue names are ErrInvalidQueueName
// at New and Submit (nothing written), and a step whose Outcome names one
// fails its run. Fails if a reserved suffix or an empty OnQueue passes.
func TestInvalidQueueNames(t *testing.T) {
	q := openQueue(t, memURL())
	ctx := context.Background()
	bad := []string{"steps.dead", "steps.timers", " lead", "ctl\x01", strings.Repeat("q", runtime.MaxQueueNameLen+1)}
	for _, name := range bad {
		if _, err := runtime.New(q, succeedRunner(nil), nil, runtime.WithQueueName(name)); !errors.Is(err, runtime.ErrInvalidQueueName) || !errors.Is(err, runtime.ErrInvalidOption) {
			t.Errorf("WithQueueName(%q): %v, want ErrInvalidOption and ErrInvalidQueueName", name, err)
		}
	}
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Continue(nil).OnQueue(s.Headers["to"]), nil
	}), hook)
	for i, name := range bad {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: fmt.Sprint("bad-", i), Queue: name}); !errors.Is(err, runtime.ErrInvalidQueueName) {
			t.Errorf("Submit with Queue %q: %v, want ErrInvalidQueueName", name, err)
		}
		if _, err := rt.Status(ctx, fmt.Sprint("bad-", i)); !errors.Is(err, runtime.ErrRunNotFound) {
			t.Errorf("Submit with Queue %q wrote a run: %v", name, err)
		}
	}
	startRun(t, rt)
	for _, to := range []string{"", "x.dead"} {
		id := "to-" + strings.ReplaceAll(to, ".", "-")
		mustSubmit(t, rt, runtime.RunSpec{RunID: id, Headers: map[string]string{"to": to}})
		if o := hook.wait(t, id); o.Status != terminal.Failed || !strings.Contains(o.Error, "invalid step queue name") {
			t.Errorf("OnQueue(%q): outcome %+v, want failed with ErrInvalidQueueName", to, o)
		}
	}
}

// TestNotifyQueueIsNoStepQueue: the Runtime's notify queue is refused as
// a step queue: by Submit (RunSpec.Queue, nothing written) and in a step's
// Outcome (OnQueue: the run fails), with ErrInvalidQueueName; and
// WithNotifyQueueName checks its name like a step queue's. Fails if a step
// job reaches the notify queue: it is dead-lettered there as an
// undecodable notification, and its run stays active (no hook call).
func TestNotifyQueueIsNoStepQueue(t *testing.T) {
	q := openQueue(t, memURL())
	ctx := context.Background()
	for _, name := range []string{"", "notes.dead", " lead"} {
		if _, err := runtime.New(q, succeedRunner(nil), nil, runtime.WithNotifyQueueName(name)); !errors.Is(err, runtime.ErrInvalidQueueName) || !errors.Is(err, runtime.ErrInvalidOption) {
			t.Errorf("WithNotifyQueueName(%q): %v, want ErrInvalidOption and ErrInvalidQueueName", name, err)
		}
	}
	hook := &hookRecorder{}
	rt := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Continue(nil).OnQueue("notes"), nil
	}), hook, runtime.WithNotifyQueueName("notes"))
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "to-notes", Queue: "notes"}); !errors.Is(err, runtime.ErrInvalidQueueName) {
		t.Errorf("Submit with Queue = the notify queue: %v, want ErrInvalidQueueName", err)
	}
	if _, err := rt.Status(ctx, "to-notes"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Errorf("Submit with Queue = the notify queue wrote a run: %v", err)
	}
	startRun(t, rt)
	mustSubmit(t, rt, runtime.RunSpec{RunID: "on-notes"})
	if o := hook.wait(t, "on-notes"); o.Status != terminal.Failed || !strings.Contains(o.Error, "notify queue") {
		t.Errorf("OnQueue(the notify queue): outcome %+v, want failed with ErrInvalidQueueName", o)
	}
}

// TestNotifyQueueOfAnotherRuntime: once a Runtime with a hook has
// started its Run, its notify queue is refused as a step queue by the
// other Runtimes of the store too: by Submit (RunSpec.Queue, nothing
// written) and by Run (a Runtime whose step queue it is), with
// ErrInvalidQueueName. Before, a run submitted there was taken by the
// hook's worker for a notification and stranded, and a Runtime serving it
// took the notifications for steps and dead-lettered them: the hook was
// never called.
func TestNotifyQueueOfAnotherRuntime(t *testing.T) {
	q := openQueue(t, memURL())
	ctx := context.Background()
	hooked := newRuntime(t, q, succeedRunner(nil), &hookRecorder{}, runtime.WithQueueName("orders"), runtime.WithNotifyQueueName("billing"))
	startRun(t, hooked)
	testenv.Eventually(t, waitTimeout, "the hooked Runtime's Run to record its notify queue", func() bool {
		v, err := q.Get(ctx, []byte("workflow/config/notify_queue"))
		return err == nil && string(v) == "billing"
	})
	client := newRuntime(t, q, nil, nil)
	if _, err := client.Submit(ctx, runtime.RunSpec{RunID: "x1", Queue: "billing"}); !errors.Is(err, runtime.ErrInvalidQueueName) {
		t.Errorf("Submit with Queue = another Runtime's notify queue: %v, want ErrInvalidQueueName", err)
	}
	if _, err := client.Status(ctx, "x1"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Errorf("the refused Submit wrote a run: %v", err)
	}
	// With a hook of its own, which it would record in place of the other's.
	billing := newRuntime(t, q, succeedRunner(nil), &hookRecorder{}, runtime.WithQueueName("billing"), runtime.WithNotifyQueueName("billing-notes"))
	rctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := billing.Run(rctx); !errors.Is(err, runtime.ErrInvalidQueueName) || rctx.Err() != nil {
		t.Errorf("Run of a Runtime whose step queue is another's notify queue = %v, want ErrInvalidQueueName at once", err)
	}
}

// TestOnQueueDeadStepNotice: a step of another step queue whose worker
// died on its last attempt is noticed on that queue's notices queue
// (<queue>.dead), and the Runtime that serves that queue fails the run,
// notified once through the shared notify queue. Fails if the notice goes
// to the notices queue of the Runtime that sent the step there.
func TestOnQueueDeadStepNotice(t *testing.T) {
	ctx := context.Background()
	q, err := openStore(t, shortLeaseURL(t, 40*time.Millisecond), queue.WithLease(40*time.Millisecond), queue.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(ctx) }) // after the Runs stop
	hook := &hookRecorder{}
	main := newRuntime(t, q, steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Continue(nil).OnQueue("side"), nil
	}), hook)
	startRun(t, main)
	mustSubmit(t, main, runtime.RunSpec{RunID: "lost"})
	waitStatus(t, main, "lost", "step 1 pending on side", func(s runtime.RunStatus) bool {
		return s.CurrentStep == 1 && s.Queue == "side" && s.State == runtime.StatePending
	})
	// A worker of queue side claims step 1 and dies.
	if j, err := claimOne(ctx, q, "side"); err != nil || j == nil {
		t.Fatalf("claim: %v %v", j, err)
	}
	testenv.Eventually(t, waitTimeout, "the notice of the dead step on side.dead", func() bool {
		s, err := q.Stats(ctx, "side.dead")
		return err == nil && s.Pending == 1
	})
	if st, _ := main.Status(ctx, "lost"); st.State.Terminal() {
		t.Fatalf("run ended before a Runtime of queue side handled the notice: %+v", st)
	}
	side := newRuntime(t, q, succeedRunner(nil), nil, runtime.WithQueueName("side"))
	startRun(t, side)
	if o := hook.wait(t, "lost"); o.Status != terminal.Failed || !strings.Contains(o.Error, "step 1 died") {
		t.Fatalf("outcome %+v, want failed: step 1 died", o)
	}
}
