package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// jobJSON is a job in "job --json" and "run --json".
type jobJSON struct {
	ID              string            `json:"id"`
	Queue           string            `json:"queue"`
	State           string            `json:"state"`
	Attempt         uint32            `json:"attempt"` // attempts so far, including a current claim
	MaxAttempts     uint32            `json:"max_attempts"`
	Priority        int32             `json:"priority"`
	EnqueuedAt      *time.Time        `json:"enqueued_at"`
	RunAt           *time.Time        `json:"run_at"`
	DedupKey        string            `json:"dedup_key"`
	CancelRequested bool              `json:"cancel_requested"`
	Headers         map[string]string `json:"headers"`
	PayloadSize     int               `json:"payload_size"`
	Payload         []byte            `json:"payload"` // base64
	PayloadText     *string           `json:"payload_text"`
	History         []attemptJSON     `json:"history"` // failed attempts, oldest first (bounded)
}

func toJobJSON(j *queue.Job) jobJSON {
	return jobJSON{
		ID: j.ID, Queue: j.Queue, State: j.State.String(), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		Priority: j.Priority, EnqueuedAt: jsonTime(j.EnqueuedAt), RunAt: jsonTime(j.RunAt),
		DedupKey: j.DedupKey, CancelRequested: j.CancelRequested, Headers: headersJSON(j.Headers),
		PayloadSize: len(j.Payload), Payload: j.Payload, PayloadText: textOf(j.Payload),
		History: historyJSON(j.History),
	}
}

// printJob writes a job as a key-value list. A job whose Payload is nil
// (as in run output) shows only its payload size.
func printJob(w io.Writer, j *jobJSON) {
	tw := newTable(w)
	fmt.Fprintf(tw, "job:\t%s\n", j.ID)
	fmt.Fprintf(tw, "queue:\t%s\n", j.Queue)
	fmt.Fprintf(tw, "state:\t%s\n", j.State)
	fmt.Fprintf(tw, "attempts:\t%d of %d\n", j.Attempt, j.MaxAttempts)
	fmt.Fprintf(tw, "priority:\t%d\n", j.Priority)
	fmt.Fprintf(tw, "enqueued:\t%s\n", textTime(deref(j.EnqueuedAt)))
	fmt.Fprintf(tw, "run at:\t%s\n", textTime(deref(j.RunAt)))
	fmt.Fprintf(tw, "dedup key:\t%s\n", orDash(j.DedupKey))
	fmt.Fprintf(tw, "cancel requested:\t%s\n", yesNo(j.CancelRequested))
	if j.Payload != nil || j.PayloadText != nil {
		fmt.Fprintf(tw, "payload:\t%s\n", preview(j.Payload))
	} else {
		fmt.Fprintf(tw, "payload:\t(%s)\n", size(j.PayloadSize))
	}
	tw.Flush()
	printHeaders(w, j.Headers)
	fmt.Fprintln(w, "failed attempts (oldest first):")
	if len(j.History) == 0 {
		fmt.Fprintln(w, "  -")
		return
	}
	tw = newTable(w)
	for i, a := range j.History {
		fmt.Fprintf(tw, "  %d\t%s\t%s\n", i+1, textTime(deref(a.At)), oneLine(a.Error, 200))
	}
	tw.Flush()
}

func jobCommand() *command {
	return &command{
		name:     "job",
		synopsis: "JOB_ID",
		help: `Shows one job: queue, state, attempts, priority, times, dedup key, headers,
payload (size and a preview: quoted text when printable, else base64; the
whole payload is in --json) and the history of failed attempts. Opens the
store read-only. Exits 4 if there is no such job (acknowledged jobs are
deleted unless the queue keeps them with a done retention).
`,
		nargs: 1,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			q, err := c.openRead(ctx)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			job, err := q.GetJob(ctx, args[0])
			if errors.Is(err, queue.ErrJobNotFound) {
				return notFound("job %q not found", args[0])
			}
			if err != nil {
				return err
			}
			j := toJobJSON(job)
			if j.Payload == nil {
				j.Payload = []byte{} // an empty payload prints as "", not null
			}
			if c.asJSON {
				return writeJSON(c.stdout, j)
			}
			printJob(c.stdout, &j)
			return nil
		},
	}
}

// deadRowJSON is one job in "dead --json".
type deadRowJSON struct {
	ID            string     `json:"id"`
	Queue         string     `json:"queue"`
	RunID         string     `json:"run_id"` // the workflow.run_id header; "" for plain jobs
	Attempts      uint32     `json:"attempts"`
	MaxAttempts   uint32     `json:"max_attempts"`
	LastError     string     `json:"last_error"`
	LastAttemptAt *time.Time `json:"last_attempt_at"`
	EnqueuedAt    *time.Time `json:"enqueued_at"`
}

type deadJSON struct {
	DeadJobs  []deadRowJSON `json:"dead_jobs"`
	Truncated bool          `json:"truncated"`
}

func deadCommand() *command {
	var queueName string
	var limit int
	return &command{
		name:     "dead",
		synopsis: "[--queue Q] [--limit N]",
		help: `Lists dead-lettered jobs, queue by queue, oldest death first: ID, queue,
run ID (for workflow jobs), attempts and the last error. Opens the store
read-only. See "stepwell job ID" for one job, "stepwell requeue ID" to retry it.
`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&queueName, "queue", "", "only this `queue` (default: all queues)")
			fs.IntVar(&limit, "limit", defaultLimit, "list at most `N` jobs (0: all)")
		},
		exec: func(ctx context.Context, c *cli, _ []string) (err error) {
			if limit < 0 {
				return usageError("invalid --limit %d (want 0 for all, or more)", limit)
			}
			q, err := c.openRead(ctx)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			names, err := queueNames(ctx, q, queueName)
			if err != nil {
				return err
			}
			out := deadJSON{DeadJobs: []deadRowJSON{}}
		queues:
			for _, name := range names {
				after := ""
				for {
					page, err := q.DeadJobs(ctx, name, after, 0)
					if err != nil {
						return fmt.Errorf("queue %q: %w", name, err)
					}
					for _, j := range page.Jobs {
						if limit > 0 && len(out.DeadJobs) == limit {
							out.Truncated = true
							break queues
						}
						msg, at := lastError(j)
						out.DeadJobs = append(out.DeadJobs, deadRowJSON{
							ID: j.ID, Queue: j.Queue, RunID: j.Headers[runtime.HeaderRunID],
							Attempts: j.Attempt, MaxAttempts: j.MaxAttempts, LastError: msg,
							LastAttemptAt: jsonTime(at), EnqueuedAt: jsonTime(j.EnqueuedAt),
						})
					}
					if page.Next == "" {
						break
					}
					after = page.Next
				}
			}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "JOB ID\tQUEUE\tRUN ID\tATTEMPTS\tLAST ERROR")
			for _, d := range out.DeadJobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\n", d.ID, d.Queue, orDash(d.RunID),
					d.Attempts, d.MaxAttempts, orDash(oneLine(d.LastError, lastErrorWidth)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if out.Truncated {
				fmt.Fprintf(c.stderr, "stepwell dead: showing the first %d; more exist (raise --limit, 0 for all)\n", limit)
			}
			return nil
		},
	}
}
