package runtime

import (
	"context"
	"fmt"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/internal/stepmemo"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
)

// Defaults of MemoLimits.
const (
	DefaultMemoMaxKeyBytes   = 256
	DefaultMemoMaxValueBytes = 256 << 10
	DefaultMemoMaxTotalBytes = 1 << 20
	DefaultMemoMaxKeys       = 1000
	// MaxMemoKeyBytes is the largest MemoLimits.MaxKeyBytes: with the run
	// ID, a memo key stays within the queue's key limit.
	MaxMemoKeyBytes = 512
)

// MemoLimits bound a run's memory (steprunner.Outcome.WithMemo). A zero
// field takes its default. The executing Runtime checks them when it
// settles a step (see WithMemoLimits).
type MemoLimits struct {
	// MaxKeyBytes bounds a key's length; at most MaxMemoKeyBytes.
	// Defaults to 256.
	MaxKeyBytes int
	// MaxValueBytes bounds a value's length. Defaults to 256 KiB.
	MaxValueBytes int
	// MaxTotalBytes bounds the run's whole memory: the sum of its keys'
	// and values' lengths. Defaults to 1 MiB.
	MaxTotalBytes int
	// MaxKeys bounds the number of keys of the run's memory; at most
	// queue.MaxScanLimit (10,000), so that one scan reads the whole
	// memory as one settlement left it. Defaults to 1,000.
	MaxKeys int
}

func (l MemoLimits) withDefaults() MemoLimits {
	if l.MaxKeyBytes == 0 {
		l.MaxKeyBytes = DefaultMemoMaxKeyBytes
	}
	if l.MaxValueBytes == 0 {
		l.MaxValueBytes = DefaultMemoMaxValueBytes
	}
	if l.MaxTotalBytes == 0 {
		l.MaxTotalBytes = DefaultMemoMaxTotalBytes
	}
	if l.MaxKeys == 0 {
		l.MaxKeys = DefaultMemoMaxKeys
	}
	return l
}

// WithMemoLimits sets the limits of a run's memory that this Runtime
// enforces on the steps it settles; zero fields keep their defaults (see
// MemoLimits). A negative field, a MaxKeyBytes over MaxMemoKeyBytes or a
// MaxKeys over queue.MaxScanLimit is ErrInvalidOption. The limits are checked on what a step's Outcome
// would leave committed, before anything of it is written: an Outcome
// over one fails the step permanently (the run ends Failed, see
// MemoLimitError). Lowering a limit does not touch memory that committed
// under a higher one; the next write to the run's memory must fit.
func WithMemoLimits(l MemoLimits) Option {
	return func(o *options) error {
		if l.MaxKeyBytes < 0 || l.MaxValueBytes < 0 || l.MaxTotalBytes < 0 || l.MaxKeys < 0 {
			return invalid("memo limits %+v must not be negative", l)
		}
		if l.MaxKeyBytes > MaxMemoKeyBytes {
			return invalid("memo key limit %d over %d", l.MaxKeyBytes, MaxMemoKeyBytes)
		}
		if l.MaxKeys > queue.MaxScanLimit {
			// loadMemo reads the memory in one scan: one snapshot.
			return invalid("memo keys limit %d over %d (queue.MaxScanLimit)", l.MaxKeys, queue.MaxScanLimit)
		}
		o.memoLimits = l.withDefaults()
		return nil
	}
}

// ValidateMemoKey reports whether key can name an entry of a run's
// memory under the default key limit: 1 to DefaultMemoMaxKeyBytes (256)
// bytes of printable ASCII ('/' included). A longer key is a
// *MemoLimitError (What "key"), any other invalid key wraps
// ErrInvalidMemoKey. A Runtime checks keys against its own limit
// (MemoLimits.MaxKeyBytes), which may be larger or smaller.
func ValidateMemoKey(key string) error { return validateMemoKey(key, DefaultMemoMaxKeyBytes) }

// validateMemoKey is ValidateMemoKey under a key limit of maxLen bytes.
func validateMemoKey(key string, maxLen int) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidMemoKey)
	}
	if len(key) > maxLen {
		return &MemoLimitError{What: "key", Key: key[:min(len(key), 64)], Size: len(key), Max: maxLen}
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: byte %#x at %d of %q (printable ASCII only)", ErrInvalidMemoKey, c, i, key)
		}
	}
	return nil
}

// memoPlan is what a step's memory writes change, as checked against the
// memory that committed before the step: the final write of each key
// (nil: delete), and the changes of the run record's counts.
type memoPlan struct {
	writes map[string][]byte
	order  []string // keys of writes, first write first: a stable transaction
	dKeys  int64
	dBytes int64
}

// planMemo checks the memory writes of an Outcome against lim and the
// memory that committed (committed, with its counts in rec), and returns
// the plan that applies them; nil if there are none. Its errors are
// *MemoLimitError or wrap ErrInvalidMemoKey.
func planMemo(rec *kvrecord.Run, committed map[string][]byte, ws []stepmemo.Write, lim MemoLimits) (*memoPlan, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	p := &memoPlan{writes: make(map[string][]byte, len(ws))}
	for _, w := range ws {
		if err := validateMemoKey(w.Key, lim.MaxKeyBytes); err != nil {
			return nil, err
		}
		if len(w.Value) > lim.MaxValueBytes {
			return nil, &MemoLimitError{What: "value", Key: w.Key, Size: len(w.Value), Max: lim.MaxValueBytes}
		}
		if _, seen := p.writes[w.Key]; !seen {
			p.order = append(p.order, w.Key)
		}
		p.writes[w.Key] = w.Value
	}
	for _, k := range p.order {
		v := p.writes[k]
		if old, ok := committed[k]; ok {
			p.dKeys--
			p.dBytes -= int64(len(k) + len(old))
		}
		if v != nil {
			p.dKeys++
			p.dBytes += int64(len(k) + len(v))
		}
	}
	if keys := int64(rec.MemoKeys) + p.dKeys; p.dKeys > 0 && keys > int64(lim.MaxKeys) {
		return nil, &MemoLimitError{What: "keys", Size: int(keys), Max: lim.MaxKeys}
	}
	if total := int64(rec.MemoBytes) + p.dBytes; p.dBytes > 0 && total > int64(lim.MaxTotalBytes) {
		return nil, &MemoLimitError{What: "memory", Size: int(total), Max: lim.MaxTotalBytes}
	}
	return p, nil
}

// apply adds the plan's writes to txn and its counts to next, the run
// record the same transaction writes. A nil plan does nothing.
func (p *memoPlan) apply(txn *queue.Txn, next *kvrecord.Run) {
	if p == nil {
		return
	}
	for _, k := range p.order {
		if v := p.writes[k]; v != nil {
			txn.Put(runrec.MemoKey(next.RunID, k), v)
		} else {
			txn.Delete(runrec.MemoKey(next.RunID, k))
		}
	}
	next.MemoKeys = uint32(int64(next.MemoKeys) + p.dKeys)
	next.MemoBytes = uint64(int64(next.MemoBytes) + p.dBytes)
}

// loadMemo reads a run's memory: nothing at all (no read) when its record
// counts none. The memory changes only in the settlement of the run's
// current step, so what it reads while that step is current is what
// committed before the step started. It reads in one scan, one snapshot
// of the store (WithMemoLimits caps MaxKeys at queue.MaxScanLimit): pages
// of several scans could mix the memory of two settlements.
func (rt *Runtime) loadMemo(ctx context.Context, rec *kvrecord.Run) (map[string][]byte, error) {
	if rec.MemoKeys == 0 {
		return nil, nil
	}
	prefix := runrec.MemoRunPrefix(rec.RunID)
	page, err := rt.q.Scan(ctx, prefix, queue.ScanOptions{Limit: queue.MaxScanLimit})
	if err != nil {
		return nil, err
	}
	if page.Next != nil {
		return nil, fmt.Errorf("runtime: run %q's memory holds more than %d keys (queue.MaxScanLimit)", rec.RunID, queue.MaxScanLimit)
	}
	memo := make(map[string][]byte, len(page.Items))
	for _, kv := range page.Items {
		v := kv.Value
		if v == nil {
			v = []byte{}
		}
		memo[string(kv.Key[len(prefix):])] = v
	}
	return memo, nil
}

// setStepMemo hands a step the run's memory (steprunner.Step.Memo).
func setStepMemo(step *steprunner.Step, memo map[string][]byte) {
	if memo != nil {
		stepmemo.Set(step, memo)
	}
}

// RunMemo returns the memory of a run (steprunner.Outcome.WithMemo) as
// committed: an empty map for a run without memory. It works from any
// Runtime on the store; ErrRunNotFound for an unknown run.
func (rt *Runtime) RunMemo(ctx context.Context, runID string) (map[string][]byte, error) {
	if err := ValidateRunID(runID); err != nil {
		return nil, err
	}
	rec, _, err := rt.loadRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	memo, err := rt.loadMemo(ctx, rec)
	if memo == nil && err == nil {
		memo = map[string][]byte{}
	}
	return memo, err
}
