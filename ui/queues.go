package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/queue"
)

// queuesData is the Queues page.
type queuesData struct {
	Queues []queueRow
	Dead   []deadSection
}

type queueRow struct {
	Name                              string
	Pending, Scheduled, Claimed, Dead int64
	Done                              int64
	OldestPending                     string
	DeadURL                           string
	Internal                          string // what a Runtime uses it for; "" for step and user queues
}

type deadSection struct {
	Queue string
	Jobs  []*jobView
	More  string // URL of the next page of this queue's dead letters
}

const deadPerPage = 20

func (h *handler) queuesPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	names, err := h.q.Queues(ctx)
	if err != nil {
		h.storeError(w, r, "listing queues", err)
		return
	}
	d := &queuesData{}
	only, after := r.URL.Query().Get("dead"), r.URL.Query().Get("after")
	for _, name := range names {
		s, err := h.q.Stats(ctx, name)
		if err != nil {
			h.storeError(w, r, "reading queue stats", err)
			return
		}
		row := queueRow{Name: clean(name), Pending: s.Pending, Scheduled: s.Scheduled, Claimed: s.Claimed,
			Dead: s.Dead, Done: s.Done}
		for _, step := range names {
			switch name {
			case runrec.NoticesQueue(step):
				row.Internal = "notices of " + clean(step)
			case runrec.TimersQueue(step):
				row.Internal = "timers of " + clean(step)
			}
		}
		if s.OldestPendingAge > 0 {
			row.OldestPending = roundDur(s.OldestPendingAge).String()
		}
		if s.Dead > 0 {
			row.DeadURL = h.opts.BasePath + "/queues?dead=" + url.QueryEscape(name) + "#dead"
		}
		d.Queues = append(d.Queues, row)
		if s.Dead == 0 || (only != "" && only != name) {
			continue
		}
		cur := ""
		if only == name {
			cur = after
		}
		sec, err := h.deadSection(ctx, name, cur)
		if err != nil {
			h.storeError(w, r, "listing dead jobs", err)
			return
		}
		d.Dead = append(d.Dead, sec)
	}
	p := h.newPage(w, r, "queues", "Queues")
	p.Data = d
	h.render(w, r, http.StatusOK, "queues", p)
}

func (h *handler) deadSection(ctx context.Context, name, after string) (deadSection, error) {
	pg, err := h.q.DeadJobs(ctx, name, after, deadPerPage)
	if err != nil {
		return deadSection{}, err
	}
	sec := deadSection{Queue: clean(name)}
	for _, j := range pg.Jobs {
		sec.Jobs = append(sec.Jobs, h.jobView(j))
	}
	if pg.Next != "" {
		sec.More = h.opts.BasePath + "/queues?dead=" + url.QueryEscape(name) + "&after=" + url.QueryEscape(pg.Next) + "#dead"
	}
	return sec, nil
}

// storeData is the Store page.
type storeData struct {
	Role        string
	QueueName   string
	Healthy     bool
	HealthSince string
	Stalled     string
	LastError   string
	Storage     []kv
	Writer      *writerView
	WriterNote  string
	Members     string
}

type writerView struct {
	ID, Epoch, Heartbeat, HeartbeatAge, Addr, Durable string
	Closed                                            bool
}

func (h *handler) storePage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	ss := h.q.StorageStats()
	d := &storeData{Role: h.q.Role().String(), QueueName: clean(h.rt.QueueName()), Healthy: ss.Health.Healthy,
		HealthSince: fmtTime(ss.Health.Since)}
	if ss.Health.Stalled > 0 {
		d.Stalled = roundDur(ss.Health.Stalled).String()
	}
	if ss.Health.LastError != nil {
		d.LastError = clean(ss.Health.LastError.Error())
	}
	n := func(v int64) string { return itoa(v) }
	d.Storage = []kv{
		{"keys in the state", itoa(int64(ss.Keys))},
		{"transactions", itoa(int64(ss.Transactions))},
		{"mutations", itoa(int64(ss.Mutations))},
		{"WAL batches", itoa(int64(ss.WALBatches))},
		{"WAL bytes", sizeText(int64(ss.WALBytes))},
		{"WAL batches in segments", itoa(int64(ss.WALSegmentBatches))},
		{"WAL write time", roundDur(ss.WALWriteTime).String()},
		{"WAL write p50 / p99", walQuantiles(ss.WALWrites)},
		{"snapshots", itoa(int64(ss.Snapshots))},
		{"object GETs", n(ss.Gets)},
		{"object PUTs", n(ss.Puts)},
		{"object LISTs", n(ss.Lists)},
		{"object HEADs", n(ss.Heads)},
		{"object DELETEs", n(ss.Deletes)},
		{"bytes read", sizeText(ss.BytesRead)},
		{"bytes written", sizeText(ss.BytesWritten)},
		{"cluster calls", n(ss.ClusterCalls)},
	}
	switch h.q.Role() {
	case queue.RoleWriter:
		d.Members = "This process is the writer: members forward their operations to it (the writer does not list them)."
	case queue.RoleMember:
		d.Members = "This process is a cluster member: the writer below does every write."
	default:
		d.Members = "Members are known to the writer only."
	}
	if h.opts.StoreURL == "" {
		d.WriterNote = "The writer's owner object is read when the UI knows the store's URL (Options.StoreURL; `stepwell ui` sets it)."
	} else {
		wv, err := readOwner(ctx, h.opts.StoreURL)
		switch {
		case err != nil:
			d.WriterNote = "reading the owner object: " + clean(err.Error())
		case wv == nil:
			d.WriterNote = "No owner object: a file:// store outside cluster mode (its writer holds the directory's lock), or a store never written."
		default:
			d.Writer = wv
		}
	}
	p := h.newPage(w, r, "store", "Store")
	p.Data = d
	h.render(w, r, http.StatusOK, "store", p)
}

// readOwner reads the store's owner object, as `stepwell stats` does.
func readOwner(ctx context.Context, raw string) (*writerView, error) {
	b, err := objstore.Open(ctx, raw)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	own, err := engine.ReadOwner(ctx, b)
	if err != nil || own == nil {
		return nil, err
	}
	v := &writerView{ID: clean(own.Writer), Epoch: itoa(int64(own.Epoch)), Heartbeat: itoa(int64(own.Beat)),
		Addr: clean(own.Addr), Durable: itoa(int64(own.Durable)), Closed: own.Closed}
	if mt, ok := b.(objstore.ModTimer); ok && !strings.HasPrefix(raw, "file:") {
		if at, err := mt.ModTime(ctx, "owner"); err == nil {
			v.HeartbeatAge = roundDur(max(time.Since(at), 0)).String()
		}
	}
	return v, nil
}

// walQuantiles shows the median and 99th percentile of the WAL writes'
// durations since Open ("-" before the first).
func walQuantiles(w queue.DurationHistogram) string {
	if w.Count() == 0 {
		return "-"
	}
	return roundDur(w.Quantile(0.5)).String() + " / " + roundDur(w.Quantile(0.99)).String()
}
