package ui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// page is what every template gets.
type page struct {
	Title    string // the UI's title
	Heading  string // this page's
	Base     string // Options.BasePath
	Nav      string // "runs", "queues", "store"
	CSRF     string // the form token ("" when read-only: no forms)
	ReadOnly string // why the UI takes no action; "" when it does
	Flash    string // what the last action did
	Refresh  int64  // ms between live updates
	Follow   bool   // keep refreshing (false: the run ended)
	Now      string
	Data     any
}

func (h *handler) newPage(w http.ResponseWriter, r *http.Request, nav, heading string) *page {
	p := &page{Title: h.opts.Title, Heading: heading, Base: h.opts.BasePath, Nav: nav,
		ReadOnly: h.readOnly(), Refresh: h.opts.Refresh.Milliseconds(), Follow: true, Now: fmtTime(time.Now())}
	if p.ReadOnly == "" {
		p.CSRF = h.csrfToken(w, r)
	}
	if done := r.URL.Query().Get("done"); done != "" {
		p.Flash = flashes[done]
	}
	return p
}

// flashes are what the page an action redirects to says it did (the
// redirect names one by code: a link cannot make a page say anything).
var flashes = map[string]string{
	"cancel":       "Cancel requested: a queued step is removed at once; a running step is told to stop.",
	"cancel-ended": "The run had already ended: nothing to cancel.",
	"retry":        "Retried: the run starts again from the step that ended it.",
	"pause":        "Paused: the run's next step does not start until it is resumed.",
	"resume":       "Resumed.",
	"signal":       "Signal sent.",
	"requeue":      "Requeued: the dead job is pending again.",
	"requeue-run":  "Requeued by retrying its run: the run goes on from that step.",
}

// render writes template name with p.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	var buf bytes.Buffer
	if err := h.tmpl[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.opts.Logger.Error("ui: rendering a page", "page", name, "err", err)
		http.Error(w, "500 internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// fail shows an error page.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p := &page{Title: h.opts.Title, Heading: http.StatusText(status), Base: h.opts.BasePath,
		ReadOnly: h.readOnly(), Data: clean(msg), Now: fmtTime(time.Now())}
	h.render(w, r, status, "error", p)
}

// storeError shows a failed store call: 404 for an unknown run or job,
// 400 for bad input, 500 otherwise (logged).
func (h *handler) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, runtime.ErrRunNotFound):
		h.fail(w, r, http.StatusNotFound, "run not found: never submitted, or finished longer ago than the terminal retention")
	case errors.Is(err, queue.ErrJobNotFound):
		h.fail(w, r, http.StatusNotFound, "job not found")
	case errors.Is(err, runtime.ErrInvalidRunID), errors.Is(err, runtime.ErrInvalidSignalName),
		errors.Is(err, runtime.ErrSignalTooLarge), errors.Is(err, queue.ErrInvalidCursor),
		errors.Is(err, runtime.ErrInvalidOption), errors.Is(err, queue.ErrInvalidJobID):
		h.fail(w, r, http.StatusBadRequest, err.Error())
	default:
		h.opts.Logger.Error("ui: "+what, "err", err)
		h.fail(w, r, http.StatusInternalServerError, what+": "+err.Error())
	}
}

// runRow is a run in the list.
type runRow struct {
	ID, State, Step, Submitted, SubmittedISO, Updated, Queue, Error, URL string
}

// runsData is the Runs page.
type runsData struct {
	Counts     []stateCount
	CountNote  string
	States     []stateOption
	After      string
	Before     string
	Prefix     string
	Limit      int
	Runs       []runRow
	Next       string // URL of the next page; "" for none
	First      string // URL of the first page, when not on it
	ScanNote   string
	FilterNote string
}

type stateCount struct {
	State string
	N     int
	URL   string
}

type stateOption struct {
	Name     string
	Selected bool
}

// allStates in the order the pages list them.
var allStates = []runtime.State{runtime.StatePending, runtime.StateRunning, runtime.StateWaiting,
	runtime.StatePaused, runtime.StateCancelling, runtime.StateSucceeded, runtime.StateFailed, runtime.StateCancelled}

// Bounds of the Runs page's scans.
const (
	defaultPageRuns = 50
	maxPageRuns     = 500
	maxPrefixScan   = 20000 // runs read to fill a page filtered by ID prefix
	maxCounted      = 10000 // newest runs counted by state
	countsMaxAge    = 5 * time.Second
)

func (h *handler) runsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	q := r.URL.Query()
	d := &runsData{Prefix: q.Get("prefix"), After: q.Get("after"), Before: q.Get("before"), Limit: defaultPageRuns}
	var opts runtime.ListOptions
	var bad []string
	for _, s := range q["state"] {
		if s == "" {
			continue
		}
		st, err := runtime.ParseState(s)
		if err != nil {
			bad = append(bad, fmt.Sprintf("unknown state %q", clean(s)))
			continue
		}
		opts.States = append(opts.States, st)
	}
	for _, st := range allStates {
		d.States = append(d.States, stateOption{Name: st.String(), Selected: slices.Contains(opts.States, st)})
	}
	var err error
	if opts.SubmittedAfter, err = parseWhen(d.After); err != nil {
		bad = append(bad, "submitted after: "+err.Error())
	}
	if opts.SubmittedBefore, err = parseWhen(d.Before); err != nil {
		bad = append(bad, "submitted before: "+err.Error())
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			bad = append(bad, "limit must be a positive number")
		} else {
			d.Limit = min(n, maxPageRuns)
		}
	}
	if len(bad) > 0 {
		h.fail(w, r, http.StatusBadRequest, strings.Join(bad, "; "))
		return
	}
	opts.Cursor = q.Get("cursor")
	if opts.Cursor != "" {
		d.First = h.runsURL(q, "")
	}

	var runs []runtime.RunStatus
	next := ""
	if d.Prefix == "" {
		opts.Limit = d.Limit
		pg, err := h.rt.ListRuns(ctx, opts)
		if err != nil {
			h.storeError(w, r, "listing runs", err)
			return
		}
		runs, next = pg.Runs, pg.Next
	} else {
		// ListRuns has no ID filter: read pages no larger than what is
		// left to fill, so that the cursor of the last one read is
		// exactly where this page ends.
		scanned := 0
		for {
			opts.Limit = d.Limit - len(runs)
			pg, err := h.rt.ListRuns(ctx, opts)
			if err != nil {
				h.storeError(w, r, "listing runs", err)
				return
			}
			scanned += len(pg.Runs)
			for _, st := range pg.Runs {
				if strings.HasPrefix(st.RunID, d.Prefix) {
					runs = append(runs, st)
				}
			}
			next, opts.Cursor = pg.Next, pg.Next
			if next == "" || len(runs) == d.Limit {
				break
			}
			if scanned >= maxPrefixScan {
				d.ScanNote = fmt.Sprintf("Read %d runs for this page without filling it; the next page goes on from there.", scanned)
				break
			}
		}
	}
	if next != "" {
		d.Next = h.runsURL(q, next)
	}
	now := time.Now()
	for _, st := range runs {
		d.Runs = append(d.Runs, h.runRow(st, now))
	}
	d.Counts, d.CountNote, err = h.stateCounts(ctx)
	if err != nil {
		h.storeError(w, r, "counting runs", err)
		return
	}
	p := h.newPage(w, r, "runs", "Runs")
	p.Data = d
	h.render(w, r, http.StatusOK, "runs", p)
}

func (h *handler) runRow(st runtime.RunStatus, now time.Time) runRow {
	row := runRow{ID: clean(st.RunID), State: st.State.String(), Step: strconv.FormatUint(uint64(st.CurrentStep), 10),
		Submitted: fmtTime(st.SubmittedAt), SubmittedISO: isoTime(st.SubmittedAt),
		Updated: ago(now, st.UpdatedAt), Queue: clean(st.Queue), URL: h.runURL(st.RunID)}
	if st.Paused && st.State != runtime.StatePaused {
		row.State += " (pausing)"
	}
	e := st.Error
	if e == "" {
		e = st.LastError
	}
	row.Error, _ = cut(clean(e), 200)
	return row
}

// runsURL is the Runs page with q's filters at cursor.
func (h *handler) runsURL(q url.Values, cursor string) string {
	v := url.Values{}
	for _, k := range []string{"state", "after", "before", "prefix", "limit"} {
		for _, s := range q[k] {
			if s != "" {
				v.Add(k, s)
			}
		}
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	u := h.opts.BasePath + "/runs"
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	return u
}

func (h *handler) runURL(id string) string {
	return h.opts.BasePath + "/run?id=" + url.QueryEscape(id)
}

// parseWhen parses a time filter: RFC 3339, or a datetime-local input's
// value (taken as UTC).
func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("want a time such as 2026-01-02T15:04 (UTC) or RFC 3339")
}

// countCache holds the last counts of runs by state.
type countCache struct {
	at     time.Time
	counts map[runtime.State]int
	capped bool
}

// stateCounts counts the newest runs by state (at most maxCounted),
// computing them at most once per countsMaxAge.
func (h *handler) stateCounts(ctx context.Context) ([]stateCount, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil || time.Since(h.counts.at) > countsMaxAge {
		c := &countCache{counts: map[runtime.State]int{}}
		opts := runtime.ListOptions{Limit: runtime.MaxListLimit}
		n := 0
		for {
			pg, err := h.rt.ListRuns(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			for _, st := range pg.Runs {
				c.counts[st.State]++
			}
			n += len(pg.Runs)
			if pg.Next == "" {
				break
			}
			if n >= maxCounted {
				c.capped = true
				break
			}
			opts.Cursor = pg.Next
		}
		c.at = time.Now()
		h.counts = c
	}
	var out []stateCount
	for _, st := range allStates {
		out = append(out, stateCount{State: st.String(), N: h.counts.counts[st],
			URL: h.opts.BasePath + "/runs?state=" + st.String()})
	}
	note := ""
	if h.counts.capped {
		note = fmt.Sprintf("of the newest %d runs", maxCounted)
	}
	return out, note, nil
}

// runData is the page of one run.
type runData struct {
	ID, URL            string
	State              string
	Ended              bool
	Step               uint32
	Attempt            uint32
	Retries            uint32
	Queue              string
	Submitted, Updated string
	EndedAt            string
	DueAt              string
	WaitingFor         string
	WaitDeadline       string
	Paused             bool
	Error, LastError   string
	Result             *shown
	Headers            []kv
	Memo               []memoEntry
	MemoNote           string
	Parent             *link
	Children           []link
	Job                *jobView
	Timeline           *timeline
	Attempts           []attemptRow
	HistoryNote        string

	CanCancel, CanRetry, CanPause, CanResume, CanSignal bool
}

type kv struct{ Key, Value string }

type memoEntry struct {
	Key   string
	Value shown
}

type link struct{ Text, URL string }

// jobView is a queue job as pages show it.
type jobView struct {
	ID, Queue, State string
	Attempt, Max     uint32
	EnqueuedAt       string
	RunAt            string
	RunID, RunURL    string
	Step             string
	Payload          shown
	Attempts         []kv // at, error
	Headers          []kv
}

func (h *handler) runPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	id := r.URL.Query().Get("id")
	if err := runtime.ValidateRunID(id); err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	st, err := h.rt.Status(ctx, id)
	if err != nil {
		h.storeError(w, r, "reading the run", err)
		return
	}
	d := &runData{ID: clean(st.RunID), URL: h.runURL(st.RunID), State: st.State.String(), Ended: st.State.Terminal(),
		Step: st.CurrentStep, Attempt: st.Attempt, Retries: st.Retries, Queue: clean(st.Queue),
		Submitted: fmtTime(st.SubmittedAt), Updated: fmtTime(st.UpdatedAt), EndedAt: fmtTime(st.EndedAt),
		WaitingFor: clean(st.WaitingFor), Paused: st.Paused, Error: clean(st.Error), LastError: clean(st.LastError)}
	if st.Scheduled {
		d.DueAt = fmtTime(st.DueAt)
	}
	if !st.WaitDeadline.IsZero() {
		d.WaitDeadline = fmtTime(st.WaitDeadline)
	}
	if st.State == runtime.StateSucceeded {
		s := showBytes(st.Result)
		d.Result = &s
	}
	for _, k := range sortedKeys(st.Headers) {
		d.Headers = append(d.Headers, kv{clean(k), clean(st.Headers[k])})
	}
	if st.Parent != "" {
		d.Parent = &link{clean(st.Parent), h.runURL(st.Parent)}
	}
	for i, c := range st.Children {
		if i == 200 {
			d.Children = append(d.Children, link{Text: fmt.Sprintf("… and %d more", len(st.Children)-i)})
			break
		}
		d.Children = append(d.Children, link{clean(c), h.runURL(c)})
	}
	if st.MemoKeys > 0 {
		memo, err := h.rt.RunMemo(ctx, id)
		if err != nil {
			h.storeError(w, r, "reading the run's memory", err)
			return
		}
		for i, k := range sortedKeys(memo) {
			if i == 100 {
				d.MemoNote = fmt.Sprintf("%d more keys not shown", len(memo)-i)
				break
			}
			d.Memo = append(d.Memo, memoEntry{clean(k), showBytes(memo[k])})
		}
	}
	if !d.Ended {
		if d.Job, err = h.currentJob(ctx, id); err != nil {
			h.storeError(w, r, "reading the run's step job", err)
			return
		}
	}
	if err := h.history(ctx, id, d); err != nil {
		h.storeError(w, r, "reading the run's history", err)
		return
	}
	active := !d.Ended && st.State != runtime.StateCancelling
	d.CanCancel = active
	d.CanRetry = st.State == runtime.StateFailed || st.State == runtime.StateCancelled
	d.CanPause = active && !st.Paused
	d.CanResume = active && st.Paused
	d.CanSignal = active
	p := h.newPage(w, r, "runs", "Run "+d.ID)
	p.Follow = !d.Ended
	p.Data = d
	h.render(w, r, http.StatusOK, "run", p)
}

// currentJob reads the job of an active run's current step; nil when it
// has none (waiting, paused) or it is gone.
func (h *handler) currentJob(ctx context.Context, runID string) (*jobView, error) {
	b, err := h.q.Get(ctx, kvrecord.RunKey(runID))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec, err := kvrecord.DecodeRun(b)
	if err != nil {
		return nil, err
	}
	if rec.CurrentJob == "" {
		return nil, nil
	}
	job, err := h.q.GetJob(ctx, rec.CurrentJob)
	if errors.Is(err, queue.ErrJobNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return h.jobView(job), nil
}

func (h *handler) jobView(j *queue.Job) *jobView {
	v := &jobView{ID: clean(j.ID), Queue: clean(j.Queue), State: j.State.String(), Attempt: j.Attempt,
		Max: j.MaxAttempts, EnqueuedAt: fmtTime(j.EnqueuedAt), Payload: showBytes(j.Payload)}
	if !j.RunAt.IsZero() && j.RunAt.After(j.EnqueuedAt) {
		v.RunAt = fmtTime(j.RunAt)
	}
	if id := j.Headers[runtime.HeaderRunID]; id != "" {
		v.RunID, v.RunURL = clean(id), h.runURL(id)
		v.Step = clean(j.Headers[runtime.HeaderStep])
	}
	hist := j.History
	if len(hist) > 20 {
		hist = hist[len(hist)-20:]
	}
	for _, a := range hist {
		v.Attempts = append(v.Attempts, kv{fmtTime(a.At), clean(a.Error)})
	}
	for _, k := range sortedKeys(j.Headers) {
		v.Headers = append(v.Headers, kv{clean(k), clean(j.Headers[k])})
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
