package queue

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
)

// Limit caps the claims of one queue (SetLimit): how many of its jobs are
// claimed at once, and how fast they are claimed. The zero value of a
// field means no limit of that kind; the zero Limit, none at all.
//
// A Limit is enforced where claims are decided, in the store's writer
// (the members of a cluster claim through it), so it holds across every
// process of the store: Claim, Work, claims that ride a member's commit
// call, and jobs claimed in the transaction that enqueues them (the
// runtime's step chaining and dispatch) all obey it. A job the limit holds
// back stays pending, and spends no attempt.
type Limit struct {
	// PerSecond is the rate of claims: a token bucket that refills at
	// PerSecond tokens a second up to Burst tokens, each claim taking one.
	// 0: no rate limit. Fractions are allowed (0.5: one claim every 2s),
	// down to MinLimitPerSecond.
	PerSecond float64
	// Burst is the token bucket's size: how many claims may follow one
	// another at once after the queue was idle. 0 with PerSecond set
	// means 1 (and Limits reports 1); Burst without PerSecond is
	// ErrInvalidLimit.
	Burst int
	// MaxRunning is how many jobs of the queue may be claimed at once (in
	// every process together): a job's claim counts from the claim until
	// it is settled, released, or its lease expires. 0: no such limit.
	MaxRunning int
}

// MinLimitPerSecond is the smallest Limit.PerSecond: one claim a day.
const MinLimitPerSecond = 1.0 / 86400

// MaxLimitPerSecond is the largest Limit.PerSecond.
const MaxLimitPerSecond = 1e9

// MaxLimitCount bounds Limit.Burst and Limit.MaxRunning.
const MaxLimitCount = 1 << 30

// IsZero reports whether l is the zero Limit (no limit).
func (l Limit) IsZero() bool { return l == Limit{} }

// normalize returns l as it is stored, or an error wrapping
// ErrInvalidLimit.
func (l Limit) normalize() (Limit, error) {
	switch {
	case math.IsNaN(l.PerSecond) || math.IsInf(l.PerSecond, 0):
		return l, fmt.Errorf("%w: PerSecond %v", ErrInvalidLimit, l.PerSecond)
	case l.PerSecond < 0:
		return l, fmt.Errorf("%w: PerSecond %v is negative", ErrInvalidLimit, l.PerSecond)
	case l.PerSecond > 0 && l.PerSecond < MinLimitPerSecond:
		return l, fmt.Errorf("%w: PerSecond %v is below %v (one a day)", ErrInvalidLimit, l.PerSecond, MinLimitPerSecond)
	case l.PerSecond > MaxLimitPerSecond:
		return l, fmt.Errorf("%w: PerSecond %v is over %v", ErrInvalidLimit, l.PerSecond, float64(MaxLimitPerSecond))
	case l.Burst < 0 || l.Burst > MaxLimitCount:
		return l, fmt.Errorf("%w: Burst %d is outside 0..%d", ErrInvalidLimit, l.Burst, MaxLimitCount)
	case l.MaxRunning < 0 || l.MaxRunning > MaxLimitCount:
		return l, fmt.Errorf("%w: MaxRunning %d is outside 0..%d", ErrInvalidLimit, l.MaxRunning, MaxLimitCount)
	case l.Burst > 0 && l.PerSecond == 0:
		return l, fmt.Errorf("%w: Burst %d without PerSecond", ErrInvalidLimit, l.Burst)
	}
	if l.PerSecond > 0 && l.Burst == 0 {
		l.Burst = 1
	}
	return l, nil
}

// limitSpace holds the queues' limits: l/<queue> -> the encoded Limit.
const limitSpace = "l/"

// Limit record fields (a field-numbered record of internal/format: a
// field at zero is left out, a reader skips numbers it does not know).
// DO NOT CHANGE the numbers: they are part of the on-bucket format.
const (
	flimPerSecond = iota + 1 // float64 bits
	flimBurst
	flimMaxRunning
)

func appendLimit(b []byte, l Limit) []byte {
	w := format.BeginFields(b)
	w.Uint(flimPerSecond, math.Float64bits(l.PerSecond))
	w.Uint(flimBurst, uint64(l.Burst))
	w.Uint(flimMaxRunning, uint64(l.MaxRunning))
	return w.End()
}

func readLimit(r *format.Reader) Limit {
	var l Limit
	r.Numbered("Limit", func(f uint64) {
		switch f {
		case flimPerSecond:
			l.PerSecond = math.Float64frombits(r.Uint64())
		case flimBurst:
			l.Burst = int(min(r.Uint64(), MaxLimitCount))
		case flimMaxRunning:
			l.MaxRunning = int(min(r.Uint64(), MaxLimitCount))
		default:
			r.Skip()
		}
	})
	return l
}

// decodeLimit decodes the engine value of a limit record.
func decodeLimit(v []byte) (Limit, error) {
	d, err := engine.Decode(v)
	if err != nil || d.BlobKey != "" {
		return Limit{}, fmt.Errorf("%w: limit record", ErrCorrupt)
	}
	r := format.NewReader(d.Data)
	l := readLimit(&r)
	if err := r.Finish(); err != nil {
		return Limit{}, err
	}
	if l, err = l.normalize(); err != nil {
		return Limit{}, fmt.Errorf("%w: limit record: %w", ErrCorrupt, err)
	}
	return l, nil
}

// SetLimit sets the Limit of a queue, durably, in place of the one it had;
// the zero Limit removes it. The queue need not exist yet. An invalid
// Limit is an error wrapping ErrInvalidLimit, an empty queue name
// ErrEmptyQueueName, and nothing is written.
//
// The limit applies from the moment its transaction commits to every
// claim that the writer decides after it. Its running count is the
// queue's claimed jobs as the store records them, so it is exact across
// processes and restarts: if MaxRunning jobs are claimed when a writer
// starts (a restart, a failover), none more is claimed until one of them
// is settled or its lease expires. A new limit's token bucket, and every
// bucket when a writer starts, is empty (the first claim waits 1/PerSecond):
// a restart never admits a burst the limit would not have. A changed
// limit keeps the tokens it had, up to its new Burst.
func (q *Queue) SetLimit(ctx context.Context, queueName string, l Limit) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	if queueName == "" {
		return ErrEmptyQueueName
	}
	if len(queueName) > MaxKeySize {
		return &TooLargeError{What: "queue name", Size: len(queueName), Max: MaxKeySize}
	}
	l, err := l.normalize()
	if err != nil {
		return err
	}
	op := txnOp{Kind: opSetLimit, Queue: queueName}
	if !l.IsZero() {
		op.Value = appendLimit(nil, l)
	}
	_, err = q.be.commit(ctx, []txnOp{op}, q.opts)
	return mapErr(err)
}

// Limits returns the limit of every queue that has one (SetLimit), by
// queue name.
func (q *Queue) Limits(ctx context.Context) (map[string]Limit, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	m, err := q.be.limits(ctx)
	return m, mapErr(err)
}

// setLimitTx applies an opSetLimit: the limit record of op.Queue put
// (op.Value, the encoded Limit) or deleted (no value).
//
// REQUIRES: inside an engine transaction.
func setLimitTx(tx *engine.Tx, op *txnOp) error {
	key := limitSpace + op.Queue
	if len(op.Value) == 0 {
		tx.Delete(key)
		return nil
	}
	v := engine.Inline(op.Value)
	if _, err := decodeLimit(v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	tx.Put(key, v)
	return nil
}

func (l *local) limits(ctx context.Context) (map[string]Limit, error) {
	m := map[string]Limit{}
	err := l.eng.View(ctx, func(r *engine.Reader) error {
		r.ObservePending()
		for name, qi := range l.ix.queues {
			if qi.limit != nil {
				m[name] = qi.limit.Limit
			}
		}
		return nil
	})
	return m, err
}

// queueLimit is a queue's Limit as the writer applies it: the limit, and
// its token bucket as a theoretical arrival time (GCRA): the bucket holds
// Burst - (tat-now)/interval tokens (Burst when tat <= now), all in
// integer nanoseconds, so that rounding never admits more than the limit.
//
// Guarded by the engine's mutex, like the job index that holds it.
type queueLimit struct {
	Limit
	interval int64 // ns per token: ceil(1e9 / PerSecond); 0 without a rate
	slack    int64 // (Burst-1) * interval, saturated
	tat      int64 // unix ns
}

func newQueueLimit(l Limit, now int64) *queueLimit {
	ql := &queueLimit{}
	ql.set(l, now, true)
	return ql
}

// set installs l. A new bucket (empty) starts with no tokens; otherwise the
// tokens it holds now carry over, up to l's Burst.
func (ql *queueLimit) set(l Limit, now int64, empty bool) {
	tokens := 0.0
	if !empty && ql.interval > 0 {
		tokens = float64(ql.Burst) - float64(max(ql.tat-now, 0))/float64(ql.interval)
	}
	ql.Limit = l
	ql.interval, ql.slack = 0, 0
	if l.PerSecond <= 0 {
		return
	}
	ql.interval = int64(math.Ceil(1e9 / l.PerSecond))
	ql.slack = satMul(int64(l.Burst-1), ql.interval)
	tokens = math.Floor(min(max(tokens, 0), float64(l.Burst)))
	ql.tat = satAdd(now, satMul(int64(l.Burst)-int64(tokens), ql.interval))
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// allows reports whether one more claim fits the limit now, with running
// jobs claimed.
func (ql *queueLimit) allows(running int, now int64) bool {
	if ql.MaxRunning > 0 && running >= ql.MaxRunning {
		return false
	}
	return ql.interval == 0 || ql.tat-now <= ql.slack
}

// take takes a token for a claim that allows admitted.
func (ql *queueLimit) take(now int64) {
	if ql.interval > 0 {
		ql.tat = satAdd(max(ql.tat, now), ql.interval)
	}
}

// untake gives back a token of a claim that was rolled back. The bucket
// may end with fewer tokens than before the take, never more.
func (ql *queueLimit) untake() {
	if ql.interval > 0 {
		ql.tat -= ql.interval
	}
}

// nextAt returns when the rate next admits a claim, if that is after now
// (0: it admits now, or there is no rate).
func (ql *queueLimit) nextAt(now int64) int64 {
	if ql.interval == 0 || ql.tat-now <= ql.slack {
		return 0
	}
	return ql.tat - ql.slack
}

// applyLimit keeps the queue's limit in step with its record (the
// engine.Indexer of the job index sees the record change: live, undone,
// replayed). A live change wakes the queue's waiting claims: a removed or
// raised limit may let them claim.
func (ix *jobIndex) applyLimit(queue string, new []byte) {
	qi := ix.queue(queue)
	if new == nil {
		if qi.limit != nil {
			qi.limit = nil
			ix.limited--
		}
		qi.wake()
		return
	}
	l, err := decodeLimit(new)
	if err != nil {
		if ix.corrupt == nil {
			ix.corrupt = err
		}
		return
	}
	now := ix.now().UnixNano()
	if qi.limit == nil {
		qi.limit = newQueueLimit(l, now)
		ix.limited++
	} else {
		qi.limit.set(l, now, false)
	}
	qi.wake()
}

// limitTaken records the limits whose tokens a transaction took, to give
// them back if it rolls back.
type limitTaken []*queueLimit

func (t *limitTaken) untake() {
	for _, ql := range *t {
		ql.untake()
	}
	*t = nil
}

// admitLimited reports whether the limit of qi (if any) lets one more of
// its jobs be claimed now, and takes a token for it if so (recorded in
// taken).
//
// REQUIRES: inside an engine transaction.
func admitLimited(qi *queueIndex, now int64, taken *limitTaken) bool {
	ql := qi.limit
	if ql == nil {
		return true
	}
	if !ql.allows(len(qi.claimed), now) {
		return false
	}
	ql.take(now)
	*taken = append(*taken, ql)
	return true
}

// throttled reports whether qi's limit holds back its pending jobs now. A
// read-only Queue does not know the writer's token buckets: it judges by
// MaxRunning alone.
func (qi *queueIndex) throttled(now int64, readOnly bool) bool {
	ql := qi.limit
	if ql == nil {
		return false
	}
	if ql.MaxRunning > 0 && len(qi.claimed) >= ql.MaxRunning {
		return true
	}
	return !readOnly && ql.nextAt(now) != 0
}

// limitQueueOf returns the queue a limit record's key names.
func limitQueueOf(key string) (string, bool) {
	return strings.CutPrefix(key, limitSpace)
}
