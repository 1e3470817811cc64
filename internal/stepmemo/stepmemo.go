// Package stepmemo lets the runtime reach what steprunner keeps
// unexported: it hands a step the run's memory (Step.Memo), and reads an
// Outcome's memory writes (Outcome.WithMemo) and next step queue
// (Outcome.OnQueue). steprunner sets the functions in its init; the
// runtime calls them.
package stepmemo

// Write is one write to a run's memory that an Outcome carries: Value nil
// deletes Key.
type Write struct {
	Key   string
	Value []byte
}

// Set stores memo, the run's memory as it committed before the step
// started, in step (a *steprunner.Step). steprunner's init sets it; memo
// is read-only from then on.
var Set func(step any, memo map[string][]byte)

// Writes returns the memory writes of out (a steprunner.Outcome), in
// order, as a slice of the caller's; nil if none. steprunner's init sets
// it.
var Writes func(out any) []Write

// NextQueue returns the step queue that OnQueue named for the next step
// of out (a steprunner.Outcome), and whether OnQueue was called; ("",
// false) for an Outcome whose kind has no next step. steprunner's init
// sets it.
var NextQueue func(out any) (name string, ok bool)
