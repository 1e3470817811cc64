package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/terminal"
)

func takeoverFlag(fs *flag.FlagSet, p *bool) {
	fs.BoolVar(p, "takeover", false,
		"on bucket stores, FENCE a live writer instead of exiting 3: its next write fails and it must be restarted")
}

type cancelJSON struct {
	RunID string `json:"run_id"`
	// Cancelled is true when this command cancelled the run (or it was
	// being cancelled already); false when it had already finished.
	Cancelled bool `json:"cancelled"`
	// State is the run's state afterwards: cancelled, cancelling (its step
	// is running: it ends when the step returns), or the final state it had.
	State string `json:"state"`
}

func cancelCommand() *command {
	var takeover bool
	return &command{
		name:     "cancel",
		synopsis: "RUN_ID [--takeover]",
		help: `Cancels a run with runtime.Runtime.Cancel. A queued or scheduled step is
removed and the run ends Cancelled at once; a running step is told to stop and
the run ends Cancelled when it returns. The run's terminal notification goes
where the service configured it (recorded in the store), and the service's
hook delivers it when the service runs.

Opens the store as its writer: while the service holds the store this exits 3
(cancel from inside the service instead, or after it stops; --takeover fences
it on bucket stores). Exits 0 when the run is cancelled or had already
finished (the output says which), 4 when there is no such run.
`,
		flags: func(fs *flag.FlagSet) {
			takeoverFlag(fs, &takeover)
		},
		nargs: 1,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			id := args[0]
			if err := runtime.ValidateRunID(id); err != nil {
				return usageError("%v", err)
			}
			q, err := c.openWrite(ctx, takeover)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)

			// A Runtime without a hook: the run's notification goes where
			// the service recorded it (runtime.Runtime.Cancel).
			rt, err := runtime.New(q, idleRunner, terminal.Noop)
			if err != nil {
				return usageError("%v", err)
			}
			if err := checkCancellable(ctx, q, id); err != nil {
				return err
			}
			ok, err := rt.Cancel(ctx, id)
			if err != nil {
				return err
			}
			st, err := rt.Status(ctx, id)
			if errors.Is(err, runtime.ErrRunNotFound) {
				return notFound("run %q not found (never submitted, or finished longer ago than the terminal retention)", id)
			}
			if err != nil {
				return err
			}
			out := cancelJSON{RunID: id, Cancelled: ok, State: st.State.String()}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			switch {
			case !ok:
				fmt.Fprintf(c.stdout, "run %s had already finished (%s): nothing to cancel\n", id, out.State)
			case st.State == runtime.StateCancelling:
				fmt.Fprintf(c.stdout, "run %s: cancel requested; its running step is told to stop and the run ends cancelled when it returns\n", id)
			default:
				fmt.Fprintf(c.stdout, "run %s cancelled\n", id)
			}
			return nil
		},
	}
}

// checkCancellable refuses to cancel an active run whose step job is dead.
// That happens when the queue dead-letters a step by itself (its worker died
// on the last attempt), and runtime.Cancel would wait for it to settle
// forever.
func checkCancellable(ctx context.Context, q *queue.Queue, id string) error {
	b, err := q.Get(ctx, kvrecord.RunKey(id))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil // Cancel reports it
	}
	if err != nil {
		return err
	}
	rec, err := kvrecord.DecodeRun(b)
	if err != nil {
		return fmt.Errorf("run record %q: %w", kvrecord.RunKey(id), err)
	}
	if rec.State != kvrecord.StateActive || rec.CurrentJob == "" {
		return nil
	}
	job, err := q.GetJob(ctx, rec.CurrentJob)
	if err != nil || job.State != queue.JobDead {
		return nil
	}
	return failed("run %q cannot be cancelled: its step job %s is dead (its worker stopped on the last attempt)\n"+
		"and runtime.Cancel would wait for it forever. Requeue it (stepwell requeue %s) to let the run go on,\n"+
		"then cancel the run", id, job.ID, job.ID)
}

type requeueJSON struct {
	JobID string `json:"job_id"`
	Queue string `json:"queue"`
	// RunID is the workflow run the job is a step of; "" for other jobs.
	RunID string `json:"run_id"`
	// RunResumes is true when the job is the current step of an active run,
	// which goes on with it; false for a step of a finished run, which the
	// runtime drops without running.
	RunResumes bool `json:"run_resumes"`
}

func requeueCommand() *command {
	var takeover bool
	return &command{
		name:     "requeue",
		synopsis: "JOB_ID [--takeover]",
		help: `Makes a dead job pending again with a fresh attempt budget (its history is
kept), with queue.Queue.RequeueDead. Meant for plain queue jobs, dead terminal
notifications (redelivered to the hook), and the step of a run whose worker
died on the last attempt (the run goes on). A dead step of a run that ended
Failed does not revive the run: the runtime drops it without running it.

Opens the store as its writer: while the service holds the store this exits 3
(requeue from inside the service instead, or after it stops; --takeover fences
it on bucket stores). Exits 4 when there is no such job, 1 when it is not dead.
`,
		flags: func(fs *flag.FlagSet) { takeoverFlag(fs, &takeover) },
		nargs: 1,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			id := args[0]
			q, err := c.openWrite(ctx, takeover)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			job, err := q.GetJob(ctx, id)
			if errors.Is(err, queue.ErrJobNotFound) {
				return notFound("job %q not found", id)
			}
			if err != nil {
				return err
			}
			if job.State != queue.JobDead {
				return failed("job %s is %s, not dead: nothing to requeue", id, job.State)
			}
			out := requeueJSON{JobID: id, Queue: job.Queue, RunID: job.Headers[runtime.HeaderRunID]}
			if out.RunID != "" && job.Headers[runtime.HeaderStep] != "" {
				out.RunResumes, err = isCurrentStep(ctx, q, out.RunID, id)
				if err != nil {
					return err
				}
			}
			err = q.RequeueDead(ctx, id)
			switch {
			case errors.Is(err, queue.ErrJobNotFound):
				return notFound("job %q not found", id)
			case errors.Is(err, queue.ErrNotDead):
				return failed("job %s is not dead: nothing to requeue", id)
			case err != nil:
				return err
			}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			fmt.Fprintf(c.stdout, "job %s requeued on queue %s\n", id, job.Queue)
			switch {
			case out.RunResumes:
				fmt.Fprintf(c.stdout, "run %s goes on with it\n", out.RunID)
			case out.RunID != "" && job.Headers[runtime.HeaderStep] != "":
				fmt.Fprintf(c.stderr, "stepwell requeue: warning: run %s has finished or moved on; the runtime will drop this step without running it\n", out.RunID)
			}
			return nil
		},
	}
}

// isCurrentStep reports whether job is the current step of the active run.
func isCurrentStep(ctx context.Context, q *queue.Queue, runID, jobID string) (bool, error) {
	b, err := q.Get(ctx, kvrecord.RunKey(runID))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	rec, err := kvrecord.DecodeRun(b)
	if err != nil {
		return false, fmt.Errorf("run record %q: %w", kvrecord.RunKey(runID), err)
	}
	return rec.State != kvrecord.StateTerminal && rec.CurrentJob == jobID, nil
}
