package runrec

import (
	"fmt"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/kvrecord"
)

// Key prefixes of child runs (steprunner.Spawn), all under the parent's
// run ID:
//
//	workflow/children/<parent>/<step:010d>/<index:06d>  ChildEntry: one child
//	                                                     of the Spawn of step
//	                                                     <step>, and how it ended
//	workflow/join/<parent>                              Join: what the parent's
//	                                                     step after its latest
//	                                                     Spawn starts with
//
// The Spawn's settlement writes them (entries not ended) with the
// children's run records; a child's first end overwrites its entry in the
// transaction that ends it, which compare-and-puts the parent's record
// (its Pending count). They are deleted with the parent's record
// (expiry), so a join never depends on the children's terminal records,
// whose retention may end first.
const (
	ChildrenPrefix = "workflow/children/"
	JoinPrefix     = "workflow/join/"
)

// ChildKey returns the key of child index of the Spawn of step step of
// run parent.
func ChildKey(parent string, step uint32, index int) []byte {
	return []byte(fmt.Sprintf("%s%s/%010d/%06d", ChildrenPrefix, parent, step, index))
}

// ChildStepPrefix returns the prefix of the children of one Spawn.
func ChildStepPrefix(parent string, step uint32) []byte {
	return []byte(fmt.Sprintf("%s%s/%010d/", ChildrenPrefix, parent, step))
}

// ChildRunPrefix returns the prefix of all of a run's children entries.
func ChildRunPrefix(parent string) []byte { return []byte(ChildrenPrefix + parent + "/") }

// JoinKey returns the key of a run's Join.
func JoinKey(parent string) []byte { return []byte(JoinPrefix + parent) }

// ChildEntry is one child of a Spawn, kept under its parent: Ended is
// false until the child's first end, which sets Status, Result and Error.
type ChildEntry struct {
	Version uint8
	RunID   string
	Ended   bool
	Status  uint8
	Result  []byte
	Error   string
}

// Join is what the step after a parent's latest Spawn starts with: the
// spawning step's payload and the run's trace context.
type Join struct {
	Version     uint8
	RunID       string
	Step        uint32
	Payload     []byte
	TraceParent string
}

// EncodeChildEntry encodes a child entry (format.Marshal's bytes). It sets
// e.Version.
func EncodeChildEntry(e *ChildEntry) []byte {
	e.Version = kvrecord.Version
	b, err := format.Marshal(e)
	if err != nil {
		panic(err) // cannot fail: plain fields
	}
	return b
}

// DecodeChildEntry decodes a child entry. Its errors wrap
// kvrecord.ErrCorrupt.
func DecodeChildEntry(b []byte) (*ChildEntry, error) {
	var e ChildEntry
	if err := format.UnmarshalExact(b, &e); err != nil || e.Version != kvrecord.Version || e.RunID == "" {
		return nil, fmt.Errorf("%w: child entry: %v", kvrecord.ErrCorrupt, err)
	}
	return &e, nil
}

// EncodeJoin encodes a Join (format.Marshal's bytes). It sets j.Version.
func EncodeJoin(j *Join) []byte {
	j.Version = kvrecord.Version
	b, err := format.Marshal(j)
	if err != nil {
		panic(err) // cannot fail: plain fields
	}
	return b
}

// DecodeJoin decodes a Join. Its errors wrap kvrecord.ErrCorrupt.
func DecodeJoin(b []byte) (*Join, error) {
	var j Join
	if err := format.UnmarshalExact(b, &j); err != nil || j.Version != kvrecord.Version || j.RunID == "" {
		return nil, fmt.Errorf("%w: join: %v", kvrecord.ErrCorrupt, err)
	}
	return &j, nil
}
