package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/terminal"
)

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
	var w writeFlags
	return &command{
		name:     "cancel",
		synopsis: "RUN_ID [--wait D] [--takeover]",
		help: `Cancels a run with runtime.Runtime.Cancel. A queued or scheduled step is
removed and the run ends Cancelled at once; a running step is told to stop and
the run ends Cancelled when it returns. The run's terminal notification goes
where the service configured it (recorded in the store), and the service's
hook delivers it when the service runs.

While a service runs the store in cluster mode (queue.WithCluster), this joins
it as a member and the service's writer cancels the run, telling whichever
process runs its step; with no process on the store, it becomes the writer
for a moment (see "Write commands and the live writer" in 'stepwell --help').
Exits 0 when the run is cancelled or had already finished (the output says
which), 3 when a writer holds the store that this cannot join, 4 when there
is no such run.
`,
		flags: w.register,
		nargs: 1,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			id := args[0]
			if err := runtime.ValidateRunID(id); err != nil {
				return usageError("%v", err)
			}
			q, rt, err := c.openClient(ctx, w)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
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
	// which goes on with it, or the dead final step of a failed or
	// cancelled run, which is retried with it (runtime.Runtime.Retry).
	RunResumes bool `json:"run_resumes"`
	// RunRetried is true when the requeue retried the job's run.
	RunRetried bool `json:"run_retried"`
}

func requeueCommand() *command {
	var w writeFlags
	return &command{
		name:     "requeue",
		synopsis: "JOB_ID [--wait D] [--takeover]",
		help: `Makes a dead job pending again with a fresh attempt budget (its history is
kept), with queue.Queue.RequeueDead. Meant for plain queue jobs, dead terminal
notifications (redelivered to the hook), and the step of a run whose worker
died on the last attempt (the run goes on). The dead final step of a failed or
cancelled run is requeued by retrying its run (as 'stepwell retry RUN_ID'
does): the run goes on from that step. Other step jobs whose run has moved on,
ended otherwise or expired would never run: they are refused (exit 1).

While a service runs the store in cluster mode (queue.WithCluster), this joins
it as a member and the service's writer requeues the job; with no process on
the store, it becomes the writer for a moment (see "Write commands and the
live writer" in 'stepwell --help'). Exits 0 when the job was requeued, 1 when
it is not dead, 3 when a writer holds the store that this cannot join, 4 when
there is no such job.
`,
		flags: w.register,
		nargs: 1,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			id := args[0]
			q, err := c.openWrite(ctx, w)
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
				retry, err := stepRequeue(ctx, q, out.RunID, id)
				if err != nil {
					return err
				}
				if retry {
					if err := retryRun(ctx, q, out.RunID); err != nil {
						return err
					}
					out.RunResumes, out.RunRetried = true, true
					if c.asJSON {
						return writeJSON(c.stdout, out)
					}
					fmt.Fprintf(c.stdout, "job %s requeued on queue %s: run %s is retried from it\n", id, job.Queue, out.RunID)
					return nil
				}
				out.RunResumes = true
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
			if out.RunResumes {
				fmt.Fprintf(c.stdout, "run %s goes on with it\n", out.RunID)
			}
			return nil
		},
	}
}

// stepRequeue decides the requeue of dead step job jobID of run runID:
// retry reports that it is the dead final step of the failed or cancelled
// run, to be requeued by retrying the run; false with a nil error that it
// is the current step of the active run, to be requeued as is. Any other
// step job would never run: an error says why and what to do.
func stepRequeue(ctx context.Context, q *queue.Queue, runID, jobID string) (retry bool, err error) {
	b, err := q.Get(ctx, kvrecord.RunKey(runID))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return false, failed("job %s is a step of run %q, which no longer exists (finished longer ago than the\n"+
			"terminal retention): requeued, it would not run. Nothing was changed", jobID, runID)
	}
	if err != nil {
		return false, err
	}
	rec, err := kvrecord.DecodeRun(b)
	if err != nil {
		return false, fmt.Errorf("run record %q: %w", kvrecord.RunKey(runID), err)
	}
	if rec.State != kvrecord.StateTerminal {
		if rec.CurrentJob == jobID {
			return false, nil
		}
		return false, failed("job %s is an old step of run %q, which is at step %d now: requeued, it would not run.\n"+
			"Nothing was changed", jobID, runID, rec.CurrentStep)
	}
	tb, err := q.Get(ctx, kvrecord.TerminalKey(rec.EndedAt, runID))
	if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
		return false, err
	}
	var t *kvrecord.Terminal
	if err == nil {
		if t, err = kvrecord.DecodeTerminal(tb); err != nil {
			return false, err
		}
	}
	status := terminal.Status(rec.Status)
	if t == nil || t.DeadJob != jobID || status == terminal.Succeeded {
		return false, failed("job %s is a step of run %q, which has ended (%s) at another step: requeued, it would\n"+
			"not run. Nothing was changed. To run the run again from its last step: stepwell retry %s",
			jobID, runID, status, runID)
	}
	return true, nil
}

// retryRun retries a run with runtime.Runtime.Retry, mapping its errors to
// exit codes.
func retryRun(ctx context.Context, q *queue.Queue, runID string) error {
	rt, err := inspector(q)
	if err != nil {
		return err
	}
	err = rt.Retry(ctx, runID)
	switch {
	case errors.Is(err, runtime.ErrRunNotFound):
		return notFound("run %q not found (never submitted, or finished longer ago than the terminal retention)", runID)
	case errors.Is(err, runtime.ErrRunNotRetryable):
		return failed("%v", err)
	}
	return err
}

type retryJSON struct {
	RunID string `json:"run_id"`
	// State is the run's state after the retry (pending, or running if a
	// live service picked it up at once).
	State   string `json:"state"`
	Step    uint32 `json:"step"`    // the step it starts again from
	Retries uint32 `json:"retries"` // times the run was retried, this one included
}

func retryCommand() *command {
	var w writeFlags
	return &command{
		name:     "retry",
		synopsis: "RUN_ID [--wait D] [--takeover]",
		help: `Retries a failed or cancelled run with runtime.Runtime.Retry: the run starts
again from the step that ended it, with that step's payload and a fresh attempt
budget, keeping its run ID; its retry count rises by one. The step's dead job,
if it died, leaves the dead letters. When the retried run ends, the service's
hook is notified again.

While a service runs the store in cluster mode (queue.WithCluster), this joins
it as a member and the service's writer retries the run, which the service
then runs; with no process on the store, it becomes the writer for a moment
(see "Write commands and the live writer" in 'stepwell --help'). Exits 0 when
the run was retried, 1 when it is not failed or cancelled (or its step's
payload is no longer kept), 3 when a writer holds the store that this cannot
join, 4 when there is no such run.
`,
		flags: w.register,
		nargs: 1,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			id := args[0]
			if err := runtime.ValidateRunID(id); err != nil {
				return usageError("%v", err)
			}
			q, err := c.openWrite(ctx, w)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			if err := retryRun(ctx, q, id); err != nil {
				return err
			}
			rt, err := inspector(q)
			if err != nil {
				return err
			}
			st, err := rt.Status(ctx, id)
			if err != nil {
				return err
			}
			out := retryJSON{RunID: id, State: st.State.String(), Step: st.CurrentStep, Retries: st.Retries}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			fmt.Fprintf(c.stdout, "run %s retried from step %d (retry %d); it is %s\n", id, out.Step, out.Retries, out.State)
			return nil
		},
	}
}

// openClient opens the store for a write command (openWrite) with a client
// Runtime over it, whose runs' notifications go where the service
// recorded them (runtime.Runtime.Cancel). The caller closes q.
func (c *cli) openClient(ctx context.Context, w writeFlags) (q *queue.Queue, rt *runtime.Runtime, err error) {
	if q, err = c.openWrite(ctx, w); err != nil {
		return nil, nil, err
	}
	if rt, err = inspector(q); err != nil {
		closeQueue(q, &err)
		return nil, nil, err
	}
	return q, rt, nil
}
