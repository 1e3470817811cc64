package steprunner

import (
	"slices"

	"github.com/stepwell/stepwell/internal/stepmemo"
)

// The runtime's access to what Step and Outcome keep unexported.
func init() {
	stepmemo.Set = func(step any, memo map[string][]byte) { step.(*Step).memo = memo }
	stepmemo.Writes = func(out any) []stepmemo.Write { return slices.Clone(out.(Outcome).memo) }
	stepmemo.NextQueue = func(out any) (string, bool) { return out.(Outcome).nextQueue() }
}

// WithMemo returns o with a write of key to the run's memory: value, or,
// when value is nil, the key's deletion (an empty non-nil value is kept,
// empty). It works on every kind of Outcome. The runtime applies the
// writes in the transaction that settles the step as o says, in the order
// given (the last write of a key wins), so the next step, or a retry of
// this one, sees exactly what committed, all of it or none of it.
// Writes of an Outcome that is not settled as such are discarded with
// it: an error returned with it, a run cancelled from outside while the
// step ran (unless o is Cancel), a settlement that cannot commit.
//
// The runtime bounds the memory (runtime.WithMemoLimits): a key of 1 to
// 256 bytes of printable ASCII, a value up to 256 KiB, a run's memory up
// to 1 MiB and 1,000 keys by default. An Outcome whose writes break a
// limit or carry an invalid key is refused: the step fails permanently
// and the run ends Failed with an error that wraps runtime.ErrMemoTooLarge
// (a *runtime.MemoLimitError) or runtime.ErrInvalidMemoKey, and nothing
// of the Outcome is written.
//
// Like the constructors, WithMemo keeps value without copying it; o itself
// is not changed.
func (o Outcome) WithMemo(key string, value []byte) Outcome {
	// A full slice expression: append copies, so copies of o that share
	// its writes never see this one.
	o.memo = append(o.memo[:len(o.memo):len(o.memo)], stepmemo.Write{Key: key, Value: value})
	return o
}

// Memo returns the value of key in the run's memory as it committed
// before this delivery of the step started (see Outcome.WithMemo), and
// whether the key is set. It reads nothing from the store: the runtime
// loads the memory with the step. Treat the value as read-only.
func (s *Step) Memo(key string) ([]byte, bool) {
	v, ok := s.memo[key]
	return v, ok
}

// MemoKeys returns the number of keys in the run's memory as the step
// sees it.
func (s *Step) MemoKeys() int { return len(s.memo) }
