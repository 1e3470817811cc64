package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/runtime"
)

// scheduleJSON is one schedule in "schedules --json".
type scheduleJSON struct {
	Name string `json:"name"`
	// Every is the period as a Go duration ("1h0m0s"); "" for a cron
	// schedule.
	Every string `json:"every"`
	// Cron is the cron expression; "" for an Every schedule.
	Cron string `json:"cron"`
	// Location is the time zone of Cron ("UTC" when none was given).
	Location     string `json:"location"`
	AllowOverlap bool   `json:"allow_overlap"`
	// Queue is the step queue of the schedule's runs, where its ticks fire.
	Queue string `json:"queue"`
	// Input is the runs' input as text (null when it is not text);
	// InputSize its length.
	Input     *string           `json:"input"`
	InputSize int               `json:"input_size"`
	Headers   map[string]string `json:"headers"`
	// NextAt is the next tick (null for a cron schedule that never fires
	// again); LastRunID the run of the latest tick that submitted one ("":
	// none yet) and LastAt that tick.
	NextAt    *time.Time `json:"next_at"`
	LastRunID string     `json:"last_run_id"`
	LastAt    *time.Time `json:"last_at"`
	// Skipped counts the ticks skipped because the previous run had not
	// ended.
	Skipped uint64 `json:"skipped"`
	// ConcurrencyKey and ConcurrencyLimit are the runs' per-key
	// concurrency (RunSpec.Concurrency); "" and 0 for none.
	ConcurrencyKey   string `json:"concurrency_key"`
	ConcurrencyLimit int    `json:"concurrency_limit"`
}

type schedulesJSON struct {
	Schedules []scheduleJSON `json:"schedules"`
}

// scheduleDeleteJSON is "schedules delete NAME --json".
type scheduleDeleteJSON struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

func schedulesCommand() *command {
	var w writeFlags
	return &command{
		name:     "schedules",
		synopsis: "[delete NAME [--wait D] [--takeover]]",
		help: `Without arguments, lists the store's schedules (runtime.Runtime.ListSchedules):
name, Every or Cron (with its time zone, whether runs may overlap, and the
runs' concurrency key and limit), step queue, next tick, last run and ticks
skipped because the previous run had not ended. It opens the store
read-only.

"schedules delete NAME" deletes the schedule NAME and its tick job
(runtime.Runtime.DeleteSchedule): it ticks no more; the runs it submitted are
not touched. It is a write command: while a service runs the store in
cluster mode (queue.WithCluster), this joins it as a member and the service's
writer deletes it; with no process on the store, it becomes the writer for a
moment (see "Write commands and the live writer" in 'stepwell --help').
Exits 0 when deleted, 2 for an invalid name, 3 when a writer holds the store
that this cannot join, 4 when there is no such schedule.
`,
		flags: w.register,
		nargs: -1,
		exec: func(ctx context.Context, c *cli, args []string) error {
			switch {
			case len(args) == 0:
				return listSchedules(ctx, c)
			case args[0] == "delete" && len(args) == 2:
				return deleteSchedule(ctx, c, w, args[1])
			case args[0] == "delete":
				return usageError("usage: stepwell schedules delete NAME")
			}
			return usageError("unknown schedules subcommand %q (want none, or delete NAME)", args[0])
		},
	}
}

func listSchedules(ctx context.Context, c *cli) (err error) {
	q, err := c.openRead(ctx)
	if err != nil {
		return err
	}
	defer closeQueue(q, &err)
	rt, err := inspector(q)
	if err != nil {
		return err
	}
	all, err := rt.ListSchedules(ctx)
	if err != nil {
		return err
	}
	out := schedulesJSON{Schedules: []scheduleJSON{}}
	for _, s := range all {
		j := scheduleJSON{Name: s.Name, Cron: s.Cron, Location: "UTC", AllowOverlap: s.AllowOverlap, Queue: s.Queue,
			Input: textOf(s.Spec.Input), InputSize: len(s.Spec.Input), Headers: headersJSON(s.Spec.Headers),
			NextAt: jsonTime(s.NextAt), LastRunID: s.LastRunID, LastAt: jsonTime(s.LastAt), Skipped: s.Skipped,
			ConcurrencyKey: s.Spec.Concurrency.Key, ConcurrencyLimit: s.Spec.Concurrency.Limit}
		if s.Every > 0 {
			j.Every = s.Every.String()
		}
		if s.Location != nil {
			j.Location = s.Location.String()
		}
		out.Schedules = append(out.Schedules, j)
	}
	if c.asJSON {
		return writeJSON(c.stdout, out)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tTICKS\tQUEUE\tNEXT\tLAST RUN\tSKIPPED")
	for _, s := range out.Schedules {
		ticks := "every " + s.Every
		if s.Cron != "" {
			ticks = fmt.Sprintf("%q %s", s.Cron, s.Location)
		}
		if s.AllowOverlap {
			ticks += " (overlap)"
		}
		if s.ConcurrencyKey != "" {
			ticks += fmt.Sprintf(" (key %s, limit %d)", s.ConcurrencyKey, s.ConcurrencyLimit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", s.Name, ticks, s.Queue, textTime(deref(s.NextAt)), orDash(s.LastRunID), s.Skipped)
	}
	return tw.Flush()
}

func deleteSchedule(ctx context.Context, c *cli, w writeFlags, name string) (err error) {
	if err := runtime.ValidateScheduleName(name); err != nil {
		return usageError("%v", err)
	}
	q, rt, err := c.openClient(ctx, w)
	if err != nil {
		return err
	}
	defer closeQueue(q, &err)
	if err := rt.DeleteSchedule(ctx, name); errors.Is(err, runtime.ErrScheduleNotFound) {
		return notFound("schedule %q not found", name)
	} else if err != nil {
		return err
	}
	if c.asJSON {
		return writeJSON(c.stdout, scheduleDeleteJSON{Name: name, Deleted: true})
	}
	fmt.Fprintf(c.stdout, "schedule %s deleted\n", name)
	return nil
}
