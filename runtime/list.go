package runtime

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"slices"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
)

// ListRuns page sizes.
const (
	DefaultListLimit = 100  // ListOptions.Limit 0
	MaxListLimit     = 1000 // larger Limits are lowered to this
)

// ListOptions select the runs of a ListRuns page. The zero value lists
// every run, newest first, DefaultListLimit at a time.
type ListOptions struct {
	// States keeps only the runs in one of these states. Empty: all.
	States []State
	// SubmittedAfter keeps only the runs submitted after this time
	// (exclusive). Zero: no bound.
	SubmittedAfter time.Time
	// SubmittedBefore keeps only the runs submitted before this time
	// (exclusive). Zero: no bound.
	SubmittedBefore time.Time
	// Limit is the most runs in a page. Defaults to DefaultListLimit (100);
	// at most MaxListLimit (1000): larger values are lowered to it.
	// Negative values are an error.
	Limit int
	// Cursor continues a listing where the page that returned it as Next
	// ended; "" starts with the newest run. Pass the same filters with it.
	Cursor string
}

// RunPage is one page of ListRuns.
type RunPage struct {
	// Runs are newest submitted first (ties in run-ID order). Their Result
	// is nil: Status reports it.
	Runs []RunStatus
	// Next is the cursor of the next page; "" when no run is left. A
	// filtered listing may end with an empty page.
	Next string
}

// cursorPrefix starts every cursor ListRuns returns (a version, should the
// encoding change).
const cursorPrefix = "c1."

// indexedKey records, in the store, that every run record has its entry in
// the submitted index (runrec.SubmittedKey). Stores written before the
// index get their entries from the first Run of this version (indexRuns);
// until then ListRuns reads every run record instead.
const indexedKey = "workflow/config/submitted_index"

// ListRuns lists runs, newest submitted first, a page at a time: those in
// the store (active, and finished within the terminal retention) that pass
// opts' filters. Pass a page's Next as the next call's Cursor to go on;
// the listing is stable while runs are added (they are newer than the
// cursor: a new listing shows them) and while runs expire.
//
// It reads the submitted index, which Submit writes in the run's own
// transaction: the time filters bound the scan, a State filter reads the
// index's run records (and the current job of active runs when the filter
// needs pending and running told apart) until the page is full, so a
// filter that few runs pass reads many records. Like Status, it works on a
// read-only store and from a client Runtime.
func (rt *Runtime) ListRuns(ctx context.Context, opts ListOptions) (RunPage, error) {
	limit := opts.Limit
	switch {
	case limit < 0:
		return RunPage{}, invalid("ListOptions.Limit %d must not be negative", limit)
	case limit == 0:
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	after, err := listStart(opts)
	if err != nil {
		return RunPage{}, err
	}
	keys, err := rt.indexReader(ctx)
	if err != nil {
		return RunPage{}, err
	}
	var stop []byte // keys from it on are submitted at or before SubmittedAfter
	if !opts.SubmittedAfter.IsZero() {
		// The first key of a run submitted at SubmittedAfter: newer runs'
		// keys (a smaller inverted time) all sort before it.
		stop = runrec.SubmittedKey(format.UnixNano(opts.SubmittedAfter), "")
	}
	page := RunPage{Runs: []RunStatus{}}
	for {
		items, more, err := keys(after)
		if err != nil {
			return RunPage{}, err
		}
		for i, key := range items {
			if stop != nil && bytes.Compare(key, stop) >= 0 {
				return page, nil
			}
			after = key
			st, ok, err := rt.listed(ctx, key, opts.States)
			if err != nil {
				return RunPage{}, err
			}
			if !ok {
				continue
			}
			page.Runs = append(page.Runs, st)
			if len(page.Runs) == limit {
				if more || i < len(items)-1 {
					page.Next = cursorPrefix + base64.RawURLEncoding.EncodeToString(key[len(runrec.SubmittedPrefix):])
				}
				return page, nil
			}
		}
		if !more {
			return page, nil
		}
	}
}

// listStart returns the index key after which a listing starts.
func listStart(opts ListOptions) ([]byte, error) {
	var after []byte
	if c := opts.Cursor; c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(c, cursorPrefix))
		key := append([]byte(runrec.SubmittedPrefix), raw...)
		if err == nil && strings.HasPrefix(c, cursorPrefix) {
			_, _, err = runrec.ParseSubmittedKey(key)
		}
		if err != nil || !strings.HasPrefix(c, cursorPrefix) {
			return nil, invalid("ListOptions.Cursor %q is not a cursor ListRuns returned", c)
		}
		after = key
	}
	if b := opts.SubmittedBefore; !b.IsZero() {
		// Past every key of a run submitted at b or later: run IDs are
		// printable ASCII, below 0x7f.
		bound := append(runrec.SubmittedKey(format.UnixNano(b), ""), 0x7f)
		if bytes.Compare(bound, after) > 0 {
			after = bound
		}
	}
	return after, nil
}

// listed returns the RunStatus of the run of an index key, and whether it
// is listed: its record exists, is the one indexed (a run ID reused after
// the retention has a newer key), and is in one of states (any if none).
func (rt *Runtime) listed(ctx context.Context, key []byte, states []State) (RunStatus, bool, error) {
	submitted, runID, err := runrec.ParseSubmittedKey(key)
	if err != nil {
		return RunStatus{}, false, nil // not ours: skip it
	}
	rec, _, err := rt.loadRun(ctx, runID)
	if errors.Is(err, ErrRunNotFound) {
		return RunStatus{}, false, nil // expired meanwhile
	}
	if err != nil {
		return RunStatus{}, false, err
	}
	if rec.SubmittedAt != submitted {
		return RunStatus{}, false, nil
	}
	if len(states) > 0 && !mayBeIn(rec, states) {
		return RunStatus{}, false, nil // decided without reading more
	}
	st, err := rt.status(ctx, rec, false)
	if err != nil {
		return RunStatus{}, false, err
	}
	return st, len(states) == 0 || slices.Contains(states, st.State), nil
}

// mayBeIn reports whether a run with this record may be in one of states.
func mayBeIn(rec *kvrecord.Run, states []State) bool {
	for _, s := range states {
		switch {
		case s.Terminal() && rec.State == kvrecord.StateTerminal,
			s == StateCancelling && rec.State == kvrecord.StateCancelling,
			(s == StatePending || s == StateRunning || s == StateWaiting || s == StatePaused) && rec.State == kvrecord.StateActive:
			return true
		}
	}
	return false
}

// indexReader returns a function that lists the submitted index's keys
// after a key, a page at a time: from the index, or, on a store that has
// not been indexed yet, built from every run record.
func (rt *Runtime) indexReader(ctx context.Context) (func(after []byte) ([][]byte, bool, error), error) {
	_, err := rt.q.Get(ctx, []byte(indexedKey))
	if err == nil {
		return func(after []byte) ([][]byte, bool, error) {
			page, err := rt.q.Scan(ctx, []byte(runrec.SubmittedPrefix), queue.ScanOptions{After: after, Limit: queue.MaxScanLimit})
			if err != nil {
				return nil, false, err
			}
			keys := make([][]byte, len(page.Items))
			for i, kv := range page.Items {
				keys[i] = kv.Key
			}
			return keys, page.Next != nil, nil
		}, nil
	}
	if !errors.Is(err, queue.ErrKeyNotFound) {
		return nil, err
	}
	var all [][]byte
	err = rt.scanRuns(ctx, func(rec *kvrecord.Run) error {
		all = append(all, runrec.SubmittedKey(rec.SubmittedAt, rec.RunID))
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, bytes.Compare)
	return func(after []byte) ([][]byte, bool, error) {
		i, _ := slices.BinarySearchFunc(all, after, bytes.Compare)
		if i < len(all) && bytes.Equal(all[i], after) {
			i++
		}
		return all[i:], false, nil
	}, nil
}

// scanRuns calls fn with every run record in the store, in run-ID order.
func (rt *Runtime) scanRuns(ctx context.Context, fn func(*kvrecord.Run) error) error {
	var after []byte
	for {
		page, err := rt.q.Scan(ctx, []byte(kvrecord.RunPrefix), queue.ScanOptions{After: after, Limit: queue.MaxScanLimit})
		if err != nil {
			return err
		}
		for _, kv := range page.Items {
			rec, err := kvrecord.DecodeRun(kv.Value)
			if err != nil {
				return fmt.Errorf("run record %q: %w", kv.Key, err)
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
		if page.Next == nil {
			return nil
		}
		after = page.Next
	}
}

// indexRuns gives every run record its submitted-index entry, once per
// store: records written before the index existed have none. Run's janitor
// calls it before it expires anything, so that no entry is written for a
// record being deleted. Then it records that the store is indexed.
func (rt *Runtime) indexRuns(ctx context.Context) error {
	if rt.indexed.Load() {
		return nil
	}
	if _, err := rt.q.Get(ctx, []byte(indexedKey)); err == nil {
		rt.indexed.Store(true)
		return nil
	} else if !errors.Is(err, queue.ErrKeyNotFound) {
		return err
	}
	txn := new(queue.Txn)
	flush := func() error {
		_, err := rt.q.Commit(ctx, txn)
		txn = new(queue.Txn)
		return err
	}
	err := rt.scanRuns(ctx, func(rec *kvrecord.Run) error {
		txn.Put(runrec.SubmittedKey(rec.SubmittedAt, rec.RunID), []byte{})
		if txn.Len() == 500 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	txn.Put([]byte(indexedKey), []byte("1"))
	if err := flush(); err != nil {
		return err
	}
	rt.indexed.Store(true)
	return nil
}
