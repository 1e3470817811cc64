package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"

	"github.com/stepwell/stepwell/queue"
)

// limitJSON is one queue's limit in "limits --json", and the output of
// "limits set" and "limits remove".
type limitJSON struct {
	Queue      string  `json:"queue"`
	PerSecond  float64 `json:"per_second"`  // 0: no rate limit
	Burst      int     `json:"burst"`       // the token bucket's size
	MaxRunning int     `json:"max_running"` // 0: no limit on claimed jobs
	// Running and Pending are the queue's claimed and claimable jobs (not
	// in the output of set and remove).
	Running int64 `json:"running"`
	Pending int64 `json:"pending"`
}

type limitsJSON struct {
	Limits []limitJSON `json:"limits"`
}

func limitsCommand() *command {
	var w writeFlags
	var perSecond float64
	var burst, maxRunning int
	return &command{
		name:     "limits",
		synopsis: "[set QUEUE [--per-second F] [--burst N] [--max-running N] | remove QUEUE]",
		help: `Without arguments, lists the queue limits (queue.Queue.SetLimit,
runtime.Runtime.SetQueueLimit): per queue, its rate (--per-second, a token
bucket of --burst tokens) and its most jobs claimed at once (--max-running),
with its jobs running (claimed) and pending now. Opens the store read-only.

"limits set QUEUE" sets the limit of QUEUE (a step queue, or any queue) in
place of the one it had: fields not given are 0, no limit of that kind, and
all of them 0 removes it, as "limits remove QUEUE" does. --burst 0 with
--per-second is 1. The limit holds for every process of the store at once,
from its commit on, across restarts and failovers; the jobs it holds back
stay pending and spend no attempt. While a service runs the store in
cluster mode (queue.WithCluster), this joins it as a member and the
service's writer applies it at once; with no process on the store, it
becomes the writer for a moment (see "Write commands and the live writer"
in 'stepwell --help'). An invalid limit or queue name exits 2.
`,
		flags: func(fs *flag.FlagSet) {
			w.register(fs)
			fs.Float64Var(&perSecond, "per-second", 0, "limits set: claims per second (a token bucket; 0: no rate limit)")
			fs.IntVar(&burst, "burst", 0, "limits set: the token bucket's size (0 with --per-second: 1)")
			fs.IntVar(&maxRunning, "max-running", 0, "limits set: most jobs of the queue claimed at once (0: no limit)")
		},
		nargs: -1,
		exec: func(ctx context.Context, c *cli, args []string) error {
			switch {
			case len(args) == 0:
				return c.showLimits(ctx)
			case len(args) == 2 && args[0] == "set":
				return c.setLimit(ctx, w, args[1], queue.Limit{PerSecond: perSecond, Burst: burst, MaxRunning: maxRunning})
			case len(args) == 2 && args[0] == "remove":
				return c.setLimit(ctx, w, args[1], queue.Limit{})
			}
			return usageError("usage: stepwell limits [set QUEUE [--per-second F] [--burst N] [--max-running N] | remove QUEUE]")
		},
	}
}

func (c *cli) showLimits(ctx context.Context) (err error) {
	q, err := c.openRead(ctx)
	if err != nil {
		return err
	}
	defer closeQueue(q, &err)
	m, err := q.Limits(ctx)
	if err != nil {
		return err
	}
	out := limitsJSON{Limits: []limitJSON{}}
	for name, l := range m {
		s, err := q.Stats(ctx, name)
		if err != nil {
			return err
		}
		out.Limits = append(out.Limits, limitJSON{Queue: name, PerSecond: l.PerSecond, Burst: l.Burst,
			MaxRunning: l.MaxRunning, Running: s.Claimed, Pending: s.Pending})
	}
	slices.SortFunc(out.Limits, func(a, b limitJSON) int {
		switch {
		case a.Queue < b.Queue:
			return -1
		case a.Queue > b.Queue:
			return 1
		}
		return 0
	})
	if c.asJSON {
		return writeJSON(c.stdout, out)
	}
	if len(out.Limits) == 0 {
		fmt.Fprintln(c.stdout, "no queue limits")
		return nil
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "QUEUE\tPER SECOND\tBURST\tMAX RUNNING\tRUNNING\tPENDING")
	for _, l := range out.Limits {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", l.Queue, limitNum(l.PerSecond), limitInt(l.Burst),
			limitInt(l.MaxRunning), l.Running, l.Pending)
	}
	return tw.Flush()
}

// limitNum and limitInt print a limit's field: "-" for 0 (no limit).
func limitNum(f float64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func limitInt(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func (c *cli) setLimit(ctx context.Context, w writeFlags, name string, l queue.Limit) (err error) {
	q, err := c.openWrite(ctx, w)
	if err != nil {
		return err
	}
	defer closeQueue(q, &err)
	if err := q.SetLimit(ctx, name, l); err != nil {
		if errors.Is(err, queue.ErrInvalidLimit) || errors.Is(err, queue.ErrEmptyQueueName) || errors.Is(err, queue.ErrTooLarge) {
			return usageError("%v", err)
		}
		return err
	}
	got, err := q.Limits(ctx)
	if err != nil {
		return err
	}
	l = got[name]
	if c.asJSON {
		return writeJSON(c.stdout, limitJSON{Queue: name, PerSecond: l.PerSecond, Burst: l.Burst, MaxRunning: l.MaxRunning})
	}
	if l.IsZero() {
		fmt.Fprintf(c.stdout, "queue %s: no limit\n", name)
		return nil
	}
	fmt.Fprintf(c.stdout, "queue %s: per second %s, burst %s, max running %s\n", name,
		limitNum(l.PerSecond), limitInt(l.Burst), limitInt(l.MaxRunning))
	return nil
}
