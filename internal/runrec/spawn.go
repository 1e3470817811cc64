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
//	workflow/pending/<parent>/<step:010d>/<shard:02d>   the number of children
//	                                                     of that shard still
//	                                                     running (decimal)
//
// A Spawn of n children counts them in min(n, JoinShards) shards, child i
// in shard i % JoinShards, so that children ending at once rarely write
// the same key: a child's end decrements its shard's counter
// (compare-and-put), and only the end that empties a shard deletes it and
// compare-and-puts the parent's record (Pending: the shards left), so the
// parent's record takes JoinShards writes per Spawn, not n. A shard key
// exists only while its parent waits for that Spawn: the end that
// empties it deletes it, and so does the parent's end (Cancel).
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
	PendingPrefix  = "workflow/pending/"
)

// JoinShards bounds the shards of a Spawn's pending counters. Children
// ending at once then rarely write one key, and the parent's record takes
// at most 16 writes per Spawn; the 16 ends that empty the shards, which
// come together at the end, are serialized on it (more shards make that
// tail longer). It is part of the on-bucket state (a child finds its
// shard as ChildIndex % JoinShards): never change it.
const JoinShards = 16

// PendingKey returns the key of the pending counter of shard shard of the
// Spawn of step step of run parent.
func PendingKey(parent string, step uint32, shard int) []byte {
	return []byte(fmt.Sprintf("%s%s/%010d/%02d", PendingPrefix, parent, step, shard))
}

// PendingStepPrefix returns the prefix of the pending counters of one
// Spawn.
func PendingStepPrefix(parent string, step uint32) []byte {
	return []byte(fmt.Sprintf("%s%s/%010d/", PendingPrefix, parent, step))
}

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
