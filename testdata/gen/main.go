//go:build ignore

// Command gen writes a format-compatibility fixture: a small file:// store
// holding runs and jobs in every state, written by the Stepwell code it is
// built with. It uses only API that has not changed since the oldest
// fixture, so the same source runs at every commit that changed the
// on-bucket format (see testdata/README.md):
//
//	go run testdata/gen/main.go DIR
//
// DIR must not exist. The store holds (compat_test checks each):
//
//	run succeeded            3 steps; result "shipped: reserved: order one; packed"; header tenant=acme
//	run failed-permanent     step 0 returned a Permanent error "card declined": failed, its job dead
//	run failed-outcome       step 1 returned Fail("out of stock")
//	run cancelled-by-step    step 0 returned Cancel("customer withdrew")
//	run scheduled            step 1 returned ContinueAfter(50 years): pending, step 2 scheduled
//	run cancelled-external   cancelled while queued (Runtime.Cancel)
//	run claimed              step 0 claimed by a worker that never settled it (lease 30 s)
//	run pending              step 0 queued; input "order pending"
//	run large                step 0 queued with a 260 KiB input (stored as a blob)
//	job email-dead           queue "emails": dead-lettered, reason "smtp: 550 mailbox unavailable"
//	job email-pending        queue "emails": pending, payload "hello"
//
// and, from WithSnapshotThreshold(1 GiB, 8), a snapshot with WAL after it.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// largeInput is the input of run "large": 260 KiB, over the default large
// value threshold (256 KiB).
func largeInput() []byte {
	b := make([]byte, 260<<10)
	for i := range b {
		b[i] = byte(i*31 + i/251)
	}
	return b
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: go run testdata/gen/main.go DIR")
	}
	dir, err := filepath.Abs(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		log.Fatalf("%s exists", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := generate(ctx, "file://"+dir); err != nil {
		log.Fatal(err)
	}
}

func generate(ctx context.Context, url string) error {
	q, err := queue.Open(ctx, url,
		queue.WithSnapshotThreshold(1<<30, 8),
		queue.WithRetryBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		return err
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		p := string(s.Payload)
		switch {
		case s.RunID == "succeeded" && s.Number == 0:
			return steprunner.Continue([]byte("reserved: " + p)), nil
		case s.RunID == "succeeded" && s.Number == 1:
			return steprunner.Continue([]byte(p + "; packed")), nil
		case s.RunID == "succeeded":
			return steprunner.Succeed([]byte("shipped: " + p)), nil
		case s.RunID == "failed-permanent":
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("card declined"))
		case s.RunID == "failed-outcome" && s.Number == 0:
			return steprunner.Continue([]byte("checked")), nil
		case s.RunID == "failed-outcome":
			return steprunner.Fail("out of stock"), nil
		case s.RunID == "cancelled-by-step":
			return steprunner.Cancel("customer withdrew"), nil
		case s.RunID == "scheduled" && s.Number == 0:
			return steprunner.Continue([]byte("waiting")), nil
		case s.RunID == "scheduled":
			return steprunner.ContinueAfter(s.Payload, 50*365*24*time.Hour), nil
		}
		return steprunner.Outcome{}, steprunner.Permanent(fmt.Errorf("unexpected step %d of %s", s.Number, s.RunID))
	})
	ended := make(chan string, 16)
	hook := terminal.HookFunc(func(_ context.Context, o terminal.Outcome) error {
		select {
		case ended <- o.RunID:
		default:
		}
		return nil
	})
	rt, err := runtime.New(q, runner, hook, runtime.WithPollInterval(5*time.Millisecond))
	if err != nil {
		return err
	}
	submit := func(id string, input []byte, headers map[string]string) error {
		_, err := rt.Submit(ctx, runtime.RunSpec{RunID: id, Input: input, Headers: headers})
		if err != nil {
			return fmt.Errorf("submit %s: %w", id, err)
		}
		return nil
	}

	// Runs that a Runtime takes to their end (or to a long wait).
	for _, id := range []string{"succeeded", "failed-permanent", "failed-outcome", "cancelled-by-step", "scheduled"} {
		var h map[string]string
		if id == "succeeded" {
			h = map[string]string{"tenant": "acme"}
		}
		if err := submit(id, []byte(strings.ReplaceAll("order "+id, "-", " ")), h); err != nil {
			return err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	seen := map[string]bool{}
	for len(seen) < 4 {
		select {
		case id := <-ended:
			seen[id] = true
		case <-ctx.Done():
			return fmt.Errorf("runs did not end: %v (ended: %v)", ctx.Err(), seen)
		}
	}
	for {
		st, err := rt.Status(ctx, "scheduled")
		if err != nil {
			return err
		}
		if st.CurrentStep == 2 && st.Scheduled {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run scheduled did not reach its wait: %+v", st)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		return err
	}

	// Runs left queued, claimed or cancelled, with no Runtime running.
	if err := submit("cancelled-external", []byte("order cancelled external"), nil); err != nil {
		return err
	}
	if ok, err := rt.Cancel(ctx, "cancelled-external"); err != nil || !ok {
		return fmt.Errorf("cancel: %v, %v", ok, err)
	}
	if err := submit("claimed", []byte("order claimed"), nil); err != nil {
		return err
	}
	job, err := claimOne(ctx, q, "workflow-steps")
	if err != nil || job == nil || job.Headers[runtime.HeaderRunID] != "claimed" {
		return fmt.Errorf("claim the step of run claimed: %v, %+v", err, job)
	}
	if err := submit("pending", []byte("order pending"), nil); err != nil {
		return err
	}
	if err := submit("large", largeInput(), nil); err != nil {
		return err
	}

	// Plain queue jobs.
	if _, err := q.Enqueue(ctx, "emails", []byte("bounce"), queue.EnqueueOptions{
		JobID: "email-dead", MaxAttempts: 1, Headers: map[string]string{"to": "ops@example.com"},
	}); err != nil {
		return err
	}
	ej, err := claimOne(ctx, q, "emails")
	if err != nil || ej == nil || ej.ID != "email-dead" {
		return fmt.Errorf("claim email-dead: %v, %+v", err, ej)
	}
	if err := q.DeadLetter(ctx, ej, "smtp: 550 mailbox unavailable"); err != nil {
		return err
	}
	if _, err := q.Enqueue(ctx, "emails", []byte("hello"), queue.EnqueueOptions{JobID: "email-pending"}); err != nil {
		return err
	}
	return q.Close(ctx)
}

// claimOne claims the next job of the named queue by hand (nil: none). By
// reflection, so that this source builds at every fixture's commit:
// Queue.Claim took (ctx, name) and returned a *Job before v0.1.0, and takes
// (ctx, name, ClaimOptions) and returns []*Job since.
func claimOne(ctx context.Context, q *queue.Queue, name string) (*queue.Job, error) {
	m := reflect.ValueOf(q).MethodByName("Claim")
	args := []reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(name)}
	if m.Type().NumIn() == 3 {
		args = append(args, reflect.Zero(m.Type().In(2))) // ClaimOptions{}: one job, no wait
	}
	out := m.Call(args)
	err, _ := out[1].Interface().(error)
	switch j := out[0].Interface().(type) {
	case *queue.Job:
		return j, err
	case []*queue.Job:
		if len(j) > 0 {
			return j[0], err
		}
	}
	return nil, err
}
