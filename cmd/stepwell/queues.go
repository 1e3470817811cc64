package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/queue"
)

// queueStatsJSON is one queue in "stats --json".
type queueStatsJSON struct {
	Queue                   string  `json:"queue"`
	Pending                 int64   `json:"pending"`
	Scheduled               int64   `json:"scheduled"`
	Claimed                 int64   `json:"claimed"`
	Dead                    int64   `json:"dead"`
	Done                    int64   `json:"done"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// storageJSON is the storage summary of "stats --json": the requests this
// command made to load the store, and the size of its state.
type storageJSON struct {
	Keys         int    `json:"keys"`
	Gets         int64  `json:"gets"`
	Lists        int64  `json:"lists"`
	Heads        int64  `json:"heads"`
	BytesRead    int64  `json:"bytes_read"`
	Puts         int64  `json:"puts"`
	Deletes      int64  `json:"deletes"`
	BytesWritten int64  `json:"bytes_written"`
	WALBatches   uint64 `json:"wal_batches"`
	Snapshots    uint64 `json:"snapshots"`
	// Healthy, Since and LastError are queue.Health as this command's own
	// requests see the store.
	Healthy   bool      `json:"healthy"`
	Since     time.Time `json:"healthy_since_or_stalled_since"`
	LastError string    `json:"last_error,omitempty"`
}

type statsJSON struct {
	Queues  []queueStatsJSON `json:"queues"`
	Storage storageJSON      `json:"storage"`
	// Writer is what the store's owner object says of its writer; null
	// when it has none (a file:// store outside cluster mode: its writer
	// holds the directory's lock instead).
	Writer *writerJSON `json:"writer"`
}

// writerJSON is the store's owner object: the writer that last opened the
// store. A writer on a bucket store rewrites it every heartbeat (2s by
// default): HeartbeatAgeSeconds well past that says the writer stopped.
// (A writer opening the store does not trust clocks: it watches the
// heartbeat counter change for 2.5 heartbeats.) A writer's members are
// known to that writer only; they are not listed.
type writerJSON struct {
	ID    string `json:"id"`    // the writer's ID, new at each open
	Epoch uint64 `json:"epoch"` // raised by each writer that opens the store
	// Heartbeat counts the writer's heartbeats since it opened the store
	// (bucket stores; 0 on file:// stores, whose writer holds the
	// directory's lock instead).
	Heartbeat uint64 `json:"heartbeat"`
	// HeartbeatAgeSeconds is how long ago the last heartbeat was written,
	// by the store's clock against this host's; null without heartbeats.
	HeartbeatAgeSeconds *float64 `json:"heartbeat_age_seconds"`
	// Closed: the writer closed the store cleanly; no writer holds it.
	Closed bool `json:"closed"`
	// ClusterAddr is where the writer serves its members in cluster mode
	// ("" outside it); write commands join the writer there.
	ClusterAddr string `json:"cluster_addr"`
	// DurableSeq is the highest WAL sequence the writer knew durable at
	// its last heartbeat.
	DurableSeq uint64 `json:"durable_seq"`
}

// readWriter reads the owner object of the store at raw; nil if it has
// none.
func readWriter(ctx context.Context, raw string) (*writerJSON, error) {
	b, err := objstore.Open(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("opening the store: %w", err)
	}
	defer b.Close()
	own, err := engine.ReadOwner(ctx, b)
	if err != nil || own == nil {
		return nil, err
	}
	w := &writerJSON{ID: own.Writer, Epoch: own.Epoch, Heartbeat: own.Beat, Closed: own.Closed,
		ClusterAddr: own.Addr, DurableSeq: own.Durable}
	// A file:// store's writer does not beat (its lock tells it is live):
	// the object's time is only when it opened the store.
	if mt, ok := b.(objstore.ModTimer); ok && !strings.HasPrefix(raw, "file:") {
		if at, err := mt.ModTime(ctx, ownerKey); err == nil {
			age := max(time.Since(at), 0).Seconds()
			w.HeartbeatAgeSeconds = &age
		}
	}
	return w, nil
}

// ownerKey is the key of the store's owner object (engine.ReadOwner).
const ownerKey = "owner"

// printWriter writes the writer line of "stats".
func printWriter(w io.Writer, wr *writerJSON) {
	switch {
	case wr == nil:
		fmt.Fprintln(w, "writer: - (no owner object: a file:// store outside cluster mode, or never written)")
		return
	case wr.Closed:
		fmt.Fprintf(w, "writer: none: the last one (%s, epoch %d) closed the store\n", wr.ID, wr.Epoch)
		return
	}
	mode := "not in cluster mode"
	if wr.ClusterAddr != "" {
		mode = "cluster mode, serving members at " + wr.ClusterAddr
	}
	beat := ""
	if wr.HeartbeatAgeSeconds != nil {
		age := time.Duration(*wr.HeartbeatAgeSeconds * float64(time.Second)).Round(100 * time.Millisecond)
		beat = fmt.Sprintf(", last heartbeat %v ago (#%d)", age, wr.Heartbeat)
	}
	fmt.Fprintf(w, "writer: %s, epoch %d%s (%s)\n", wr.ID, wr.Epoch, beat, mode)
}

func statsCommand() *command {
	var queueName string
	var all bool
	return &command{
		name:     "stats",
		synopsis: "[--queue Q] [--all]",
		help: `Prints, for every queue (or the one named by --queue), the number of pending,
scheduled, claimed, dead and done jobs and how long the oldest pending job has
waited, then a storage summary: the keys in the store's state, the
requests this command made to load it, and the store's health as those
requests saw it (queue.Health; a writer process reports its own through
Queue.Health and StorageStats). A Runtime's internal
queues beside its step queue (its notices queue "<step queue>.dead" and
timers queue "<step queue>.timers") are left out unless --all is given or
--queue names one. Last, the writer as the store's owner object
names it: its ID, epoch, heartbeat count and age (bucket stores: a writer
beats every 2s by default, so an age well past that says it stopped) and,
in cluster mode, the address where it serves its members (whom only the
writer knows: they are not listed). Opens the store read-only.
`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&queueName, "queue", "", "only this `queue`")
			fs.BoolVar(&all, "all", false, "include internal queues")
		},
		exec: func(ctx context.Context, c *cli, _ []string) (err error) {
			q, err := c.openRead(ctx)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			names, err := listQueues(ctx, q, all)
			if err != nil {
				return err
			}
			if queueName != "" {
				if !slices.Contains(names, queueName) {
					fmt.Fprintf(c.stderr, "stepwell stats: note: queue %q has never had jobs\n", queueName)
				}
				names = []string{queueName}
			}
			out := statsJSON{Queues: []queueStatsJSON{}}
			var ages []time.Duration
			for _, name := range names {
				s, err := q.Stats(ctx, name)
				if err != nil {
					return fmt.Errorf("queue %q: %w", name, err)
				}
				out.Queues = append(out.Queues, queueStatsJSON{
					Queue: name, Pending: s.Pending, Scheduled: s.Scheduled, Claimed: s.Claimed,
					Dead: s.Dead, Done: s.Done, OldestPendingAgeSeconds: s.OldestPendingAge.Seconds(),
				})
				ages = append(ages, s.OldestPendingAge)
			}
			ss := q.StorageStats()
			out.Storage = storageJSON{
				Keys: ss.Keys, Gets: ss.Gets, Lists: ss.Lists, Heads: ss.Heads, BytesRead: ss.BytesRead,
				Puts: ss.Puts, Deletes: ss.Deletes, BytesWritten: ss.BytesWritten,
				WALBatches: ss.WALBatches, Snapshots: ss.Snapshots,
				Healthy: ss.Health.Healthy, Since: ss.Health.Since,
			}
			if ss.Health.LastError != nil {
				out.Storage.LastError = ss.Health.LastError.Error()
			}
			raw, _ := c.storeURL()
			if out.Writer, err = readWriter(ctx, raw); err != nil {
				return fmt.Errorf("reading the owner object: %w", err)
			}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "QUEUE\tPENDING\tSCHEDULED\tCLAIMED\tDEAD\tDONE\tOLDEST PENDING")
			for i, s := range out.Queues {
				age := "-"
				if s.Pending > 0 {
					age = ages[i].Round(time.Second).String()
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", s.Queue, s.Pending, s.Scheduled, s.Claimed, s.Dead, s.Done, age)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(out.Queues) == 0 {
				fmt.Fprintln(c.stdout, "(no queues)")
			}
			fmt.Fprintf(c.stdout, "\nstorage: %d keys; loading read %d bytes in %d gets and %d lists\n",
				ss.Keys, ss.BytesRead, ss.Gets, ss.Lists)
			if h := ss.Health; h.Healthy {
				fmt.Fprintln(c.stdout, "health: healthy")
			} else {
				fmt.Fprintf(c.stdout, "health: UNHEALTHY: stalled for %v (since %s); last error: %v\n",
					h.Stalled.Round(time.Second), h.Since.Format(time.RFC3339), h.LastError)
			}
			printWriter(c.stdout, out.Writer)
			return nil
		},
	}
}

func queuesCommand() *command {
	var all bool
	return &command{
		name:     "queues",
		synopsis: "[--all]",
		help: `Prints the names of the queues that have or had jobs, one per line. A
Runtime's internal queues beside its step queue (its notices queue
"<step queue>.dead": dead-step notices, and notifications of cancelled runs
waiting for a Runtime to forward them; its timers queue
"<step queue>.timers": signal timeouts) are left out unless --all is given. Opens the store read-only.
`,
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&all, "all", false, "include internal queues")
		},
		exec: func(ctx context.Context, c *cli, _ []string) (err error) {
			q, err := c.openRead(ctx)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			names, err := listQueues(ctx, q, all)
			if err != nil {
				return err
			}
			if names == nil {
				names = []string{}
			}
			if c.asJSON {
				return writeJSON(c.stdout, struct {
					Queues []string `json:"queues"`
				}{names})
			}
			for _, n := range names {
				fmt.Fprintln(c.stdout, n)
			}
			return nil
		},
	}
}

// listQueues returns the store's queues; without all, not a Runtime's
// internal ones: the notices and timers queues beside its step queue
// (runrec.NoticesQueue, runrec.TimersQueue).
func listQueues(ctx context.Context, q *queue.Queue, all bool) ([]string, error) {
	names, err := q.Queues(ctx)
	if err != nil || all {
		return names, err
	}
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		return runrec.IsInternalQueue(n, names)
	}), nil
}

// queueNames returns the named queue, or every queue of the store.
func queueNames(ctx context.Context, q *queue.Queue, name string) ([]string, error) {
	if name != "" {
		return []string{name}, nil
	}
	return q.Queues(ctx)
}
