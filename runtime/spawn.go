package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// Child runs (steprunner.Spawn). The settlement of a Spawn writes, in one
// transaction: the step's ack; each child's run record (compare-and-put
// from absent, with Parent, ParentStep, ChildIndex and Depth), its index
// entry and its step-0 job; one entry per child under the parent
// (runrec.ChildKey, not ended); the pending counters of the Spawn's
// shards (runrec.PendingKey); the parent's Join (its step's payload); and
// the parent's record, waiting (WaitFor childrenWait) with Spawned the
// number of children, Pending the number of shards, and CurrentStep n+1.
//
// A child's first end (terminate, whatever ends it) also, in the same
// transaction: marks the child JoinReported, overwrites its entry under
// the parent with its status, result and error, and decrements its
// shard's counter; the end that empties the shard deletes it instead and
// compare-and-puts the parent's record with Pending one less, and the one
// that brings Pending to 0 starts the parent's step n+1 with the Join's
// payload (parked if the parent is paused). A child counts once:
// JoinReported is written with the decrement, so a retried child that
// ends again leaves its parent alone, whether the parent still waits or
// has joined. A child whose shard key is gone (its parent joined, was
// cancelled, or expired) only writes its entry, if the parent exists.
//
// Cancel of a waiting parent (Pending > 0) deletes its shard keys and
// enqueues, in the transaction that ends it, a cascade notice on the
// notices queue of its step queue: its handler cancels every child not
// ended yet (Cancel, which cascades in turn for a child that waits for
// children of its own).

// childrenWait is a waiting parent's WaitFor: it has a '/', so no signal
// name (ValidateSignalName) ever matches it.
const childrenWait = "workflow/children"

// noticeCascade marks a cascade notice on a notices queue (headerNotice):
// cancel the children of a cancelled parent.
const noticeCascade = "cascade"

// Spawn limits' defaults (WithSpawnLimits).
const (
	DefaultMaxChildren   = 10000
	DefaultMaxSpawnDepth = 8
	DefaultMaxSpawnBytes = 16 << 20
)

// SpawnLimits bound a Spawn (WithSpawnLimits). Zero fields take the
// defaults.
type SpawnLimits struct {
	// MaxChildren bounds the children of one Spawn (default 10,000).
	MaxChildren int
	// MaxDepth bounds the nesting: a run submitted by Submit is at depth
	// 0, its children at 1; a Spawn whose children would be deeper than
	// MaxDepth fails (default 8).
	MaxDepth int
	// MaxBytes bounds the bytes of one Spawn's children: inputs, headers
	// and run IDs summed (default 16 MiB, half the queue's transaction
	// limit queue.MaxTxnInlineBytes, which the children's records and jobs
	// must fit in with them).
	MaxBytes int
}

func (l SpawnLimits) withDefaults() SpawnLimits {
	if l.MaxChildren <= 0 {
		l.MaxChildren = DefaultMaxChildren
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxSpawnDepth
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxSpawnBytes
	}
	return l
}

// WithSpawnLimits sets the limits of a Spawn (see SpawnLimits). A Spawn
// over one fails its step permanently with a *SpawnLimitError before
// anything of it is written.
func WithSpawnLimits(l SpawnLimits) Option {
	return func(o *options) error {
		if l.MaxChildren < 0 || l.MaxDepth < 0 || l.MaxBytes < 0 {
			return invalid("negative spawn limit %+v", l)
		}
		if l.MaxBytes > queue.MaxTxnInlineBytes/2 {
			return invalid("spawn MaxBytes %d over %d", l.MaxBytes, queue.MaxTxnInlineBytes/2)
		}
		o.spawnLimits = l.withDefaults()
		return nil
	}
}

// ErrSpawnLimit is wrapped by SpawnLimitError.
var ErrSpawnLimit = errors.New("runtime: spawn over a limit")

// ErrInvalidChild: a Spawn's child is invalid (an empty Spawn, a
// duplicate RunID, a reserved header, an invalid Queue; an invalid or too
// long RunID is ErrInvalidRunID). It fails the step permanently.
var ErrInvalidChild = errors.New("runtime: invalid child run")

// ErrChildExists: a Spawn names a run that already exists with the same
// input (with another input it is ErrInputMismatch). It fails the step
// permanently, nothing written: a child is always a new run.
var ErrChildExists = errors.New("runtime: child run already exists")

// SpawnLimitError: a Spawn over a limit (WithSpawnLimits). The step fails
// permanently and its run ends Failed with it; nothing of the Spawn is
// written.
type SpawnLimitError struct {
	// What is over its limit: "children" (their number), "depth" (the
	// children's nesting depth) or "bytes" (their inputs, headers and IDs).
	What      string
	Size, Max int
}

func (e *SpawnLimitError) Error() string {
	return fmt.Sprintf("runtime: spawn of %s %d, at most %d", e.What, e.Size, e.Max)
}

// Unwrap returns ErrSpawnLimit.
func (e *SpawnLimitError) Unwrap() error { return ErrSpawnLimit }

// spawnPlan is a checked Spawn: its children's run IDs, in order.
type spawnPlan struct {
	ids      []string
	children []steprunner.Child
}

// planSpawn checks a Spawn outcome of step n of rec's run against the
// limits, before anything is written.
func (rt *Runtime) planSpawn(rec *kvrecord.Run, n uint32, out steprunner.Outcome) (*spawnPlan, error) {
	cs, lim := out.Children(), rt.opts.spawnLimits
	switch {
	case len(cs) == 0:
		return nil, fmt.Errorf("%w: Spawn of no children", ErrInvalidChild)
	case len(cs) > lim.MaxChildren:
		return nil, &SpawnLimitError{What: "children", Size: len(cs), Max: lim.MaxChildren}
	case int(rec.Depth)+1 > lim.MaxDepth:
		return nil, &SpawnLimitError{What: "depth", Size: int(rec.Depth) + 1, Max: lim.MaxDepth}
	}
	p := &spawnPlan{ids: make([]string, len(cs)), children: cs}
	seen := make(map[string]int, len(cs))
	size := 0
	for i, c := range cs {
		id := c.RunID
		if id == "" {
			id = steprunner.DeriveChildRunID(rec.RunID, n, i)
		}
		if err := ValidateRunID(id); err != nil {
			return nil, fmt.Errorf("child %d: %w", i, err)
		}
		if j, dup := seen[id]; dup || id == rec.RunID {
			return nil, fmt.Errorf("%w: child %d: run ID %q (child %d, or the parent's)", ErrInvalidChild, i, id, j)
		}
		seen[id] = i
		for k, v := range c.Headers {
			if strings.HasPrefix(k, ReservedPrefix) {
				return nil, fmt.Errorf("%w: child %d: %w: %q", ErrInvalidChild, i, ErrReservedHeader, k)
			}
			size += len(k) + len(v)
		}
		if err := checkHeaderBudget(c.Headers); err != nil {
			return nil, fmt.Errorf("%w: child %d: %w", ErrInvalidChild, i, err)
		}
		if c.Queue != "" {
			if err := ValidateQueueName(c.Queue); err != nil {
				return nil, fmt.Errorf("%w: child %d: %w", ErrInvalidChild, i, err)
			}
		}
		size += len(c.Input) + len(id)
		p.ids[i] = id
	}
	if size > lim.MaxBytes {
		return nil, &SpawnLimitError{What: "bytes", Size: size, Max: lim.MaxBytes}
	}
	return p, nil
}

// spawn adds to txn (which acks step n) the children of sp and parks next,
// the parent's record with CurrentStep n+1, until they end.
func (rt *Runtime) spawn(txn *queue.Txn, rec, next *kvrecord.Run, job *queue.Job, n uint32, sp *spawnPlan, tp string) {
	now := rt.opts.now().UnixNano()
	for i, c := range sp.children {
		id := sp.ids[i]
		ch := &kvrecord.Run{
			RunID: id, SubmittedAt: now, UpdatedAt: now, InputHash: runrec.HashInput(c.Input),
			State: kvrecord.StateActive, CurrentJob: newJobID(), Headers: c.Headers,
			Priority: rec.Priority, MaxAttempts: rec.MaxAttempts, NotifyQueue: rec.NotifyQueue,
			Queue: c.Queue, StepTimeout: rec.StepTimeout, RetryMaxAttempts: rec.RetryMaxAttempts,
			RetryInitialBackoff: rec.RetryInitialBackoff, RetryMaxBackoff: rec.RetryMaxBackoff,
			RetryMultiplier: rec.RetryMultiplier, RetryJitter: rec.RetryJitter,
			Parent: rec.RunID, ParentStep: n, ChildIndex: uint32(i), Depth: rec.Depth + 1,
			HistorySeq: submittedSeq, // its history's submitted entry: this record
		}
		if ch.Queue == "" {
			ch.Queue = job.Queue
		}
		opts := qx.WithDispatch(rt.stepOptions(ch, 0, ch.CurrentJob, tp), true)
		input := c.Input
		if input == nil {
			input = []byte{}
		}
		txn.CompareAndPut(kvrecord.RunKey(id), nil, runrec.EncodeRun(ch)).
			Put(runrec.SubmittedKey(now, id), []byte{}).
			Enqueue(ch.Queue, input, opts).
			Put(runrec.ChildKey(rec.RunID, n, i), runrec.EncodeChildEntry(&runrec.ChildEntry{RunID: id}))
	}
	shards := joinShards(len(sp.ids))
	for sh := range shards {
		count := (len(sp.ids) - sh + shards - 1) / shards // children i with i % shards == sh
		txn.Put(runrec.PendingKey(rec.RunID, n, sh), []byte(strconv.Itoa(count)))
	}
	payload := job.Payload
	if payload == nil {
		payload = []byte{}
	}
	txn.Put(runrec.JoinKey(rec.RunID), runrec.EncodeJoin(&runrec.Join{RunID: rec.RunID, Step: n, Payload: payload, TraceParent: tp}))
	next.CurrentJob, next.WaitFor = "", childrenWait
	next.Spawned, next.SpawnStep, next.Pending = uint32(len(sp.ids)), n, uint32(shards)
}

// joinShards is the number of pending counters of a Spawn of n children
// (child i counts in shard i % runrec.JoinShards, which is below it).
func joinShards(n int) int { return min(n, runrec.JoinShards) }

// spawnConflict explains a Spawn's settlement that failed its conditions:
// a child's run ID that exists (ErrInputMismatch, or ErrChildExists with
// the same input); nil if none does (the parent's record moved: settle
// again).
func (rt *Runtime) spawnConflict(ctx context.Context, sp *spawnPlan) error {
	for i, id := range sp.ids {
		ch, _, err := rt.loadRun(ctx, id)
		if errors.Is(err, ErrRunNotFound) {
			continue
		}
		if err != nil {
			return nil // read again at the next attempt
		}
		if ch.InputHash != runrec.HashInput(sp.children[i].Input) {
			return fmt.Errorf("child %d: %w: run %q", i, ErrInputMismatch, id)
		}
		return fmt.Errorf("child %d: %w: run %q", i, ErrChildExists, id)
	}
	return nil
}

// joinParent adds to txn, which ends the child rec (next: its final
// record, not yet encoded), what its end does to its parent: see the top
// of this file. If a record cannot be read, txn gets a condition that
// fails, so that its caller reads the run again and retries, as it does
// when a record moved.
func (rt *Runtime) joinParent(txn *queue.Txn, rec, next *kvrecord.Run, e *ending) {
	next.JoinReported = true
	ctx := context.Background()
	ent := runrec.EncodeChildEntry(&runrec.ChildEntry{RunID: rec.RunID, Ended: true, Status: uint8(e.status), Result: e.result, Error: e.reason})
	entKey := runrec.ChildKey(rec.Parent, rec.ParentStep, int(rec.ChildIndex))
	shardKey := runrec.PendingKey(rec.Parent, rec.ParentStep, int(rec.ChildIndex)%runrec.JoinShards)
	cb, err := rt.q.Get(ctx, shardKey)
	if errors.Is(err, queue.ErrKeyNotFound) {
		// The parent no longer waits for this Spawn: the entry only, if
		// the parent is still kept (its record as read).
		_, pold, err := rt.loadRun(ctx, rec.Parent)
		switch {
		case errors.Is(err, ErrRunNotFound):
		case err != nil:
			failTxn(txn, rec.Parent)
		default:
			txn.Put(entKey, ent).CompareAndPut(kvrecord.RunKey(rec.Parent), pold, pold)
		}
		return
	}
	count, perr := strconv.Atoi(string(cb))
	if err != nil || perr != nil || count <= 0 {
		failTxn(txn, rec.Parent)
		return
	}
	txn.Put(entKey, ent)
	if count > 1 {
		txn.CompareAndPut(shardKey, cb, []byte(strconv.Itoa(count-1)))
		return
	}
	// The shard's last child: the parent's record counts one shard less.
	txn.CompareAndDelete(shardKey, cb)
	prec, pold, err := rt.loadRun(ctx, rec.Parent)
	if err != nil || prec.State == kvrecord.StateTerminal || prec.Pending == 0 || prec.WaitFor != childrenWait || prec.SpawnStep != rec.ParentStep {
		failTxn(txn, rec.Parent) // cannot be while the shard exists: read again
		return
	}
	pnext := *prec
	pnext.Pending--
	pnext.UpdatedAt = rt.opts.now().UnixNano()
	if pnext.Pending == 0 {
		jb, err := rt.q.Get(ctx, runrec.JoinKey(rec.Parent))
		var j *runrec.Join
		if err == nil {
			j, err = runrec.DecodeJoin(jb)
		}
		if err != nil {
			failTxn(txn, rec.Parent)
			return
		}
		clearWait(&pnext)
		rt.startStep(txn, &pnext, j.Payload, 0, nil, false, j.TraceParent)
		h := controlHistory(HistoryJoin, &pnext)
		h.ResultSize = uint64(pnext.Spawned)
		rt.addHistory(txn, &pnext, h)
	}
	txn.CompareAndPut(kvrecord.RunKey(rec.Parent), pold, runrec.EncodeRun(&pnext))
}

// failTxn adds to txn a condition that fails (ErrConditionFailed): its
// caller reads the run again and retries.
func failTxn(txn *queue.Txn, runID string) {
	txn.CompareAndPut(kvrecord.RunKey(runID), []byte{0}, []byte{0})
}

// deleteShards adds to txn, which ends rec while it waits for children,
// the deletion of its Spawn's pending counters.
func deleteShards(txn *queue.Txn, rec *kvrecord.Run) {
	for sh := range joinShards(int(rec.Spawned)) {
		txn.Delete(runrec.PendingKey(rec.RunID, rec.SpawnStep, sh))
	}
}

// childrenEnded returns how many children of the Spawn rec waits for
// have ended: Spawned less the pending counters' sum.
func (rt *Runtime) childrenEnded(ctx context.Context, rec *kvrecord.Run) (int, error) {
	page, err := rt.q.Scan(ctx, runrec.PendingStepPrefix(rec.RunID, rec.SpawnStep), queue.ScanOptions{Limit: runrec.JoinShards})
	if err != nil {
		return 0, err
	}
	ended := int(rec.Spawned)
	for _, kv := range page.Items {
		n, _ := strconv.Atoi(string(kv.Value))
		ended -= n
	}
	return ended, nil
}

// cascadeNotice adds to txn, which ends rec while it waits for children,
// the notice that cancels them (see cascade).
func (rt *Runtime) cascadeNotice(txn *queue.Txn, rec *kvrecord.Run, stepQueue string) {
	if stepQueue == "" {
		stepQueue = rt.opts.queueName
	}
	txn.Enqueue(runrec.NoticesQueue(stepQueue), []byte(rec.RunID), queue.EnqueueOptions{
		Headers:     map[string]string{HeaderRunID: rec.RunID, headerNotice: noticeCascade, HeaderStep: fmt.Sprint(rec.SpawnStep)},
		MaxAttempts: timerAttempts,
	})
}

// cascade handles a cascade notice: it cancels every child of the
// cancelled parent's Spawn that has not ended, then acknowledges the
// notice. Cancel is idempotent, so a cascade that a crash interrupts is
// done again from the start.
func (rt *Runtime) cascade(ctx context.Context, notice *queue.Job) error {
	parent := notice.Headers[HeaderRunID]
	var step uint32
	if _, err := fmt.Sscan(notice.Headers[HeaderStep], &step); err != nil {
		return rt.q.DeadLetter(ctx, notice, "undecodable cascade notice")
	}
	prefix := runrec.ChildStepPrefix(parent, step)
	var after []byte
	for {
		page, err := rt.q.Scan(ctx, prefix, queue.ScanOptions{After: after, Limit: 500})
		if err != nil {
			return err
		}
		for _, kv := range page.Items {
			ent, err := runrec.DecodeChildEntry(kv.Value)
			if err != nil || ent.Ended {
				continue
			}
			if _, err := rt.Cancel(ctx, ent.RunID); err != nil {
				return err // the notice is retried
			}
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	err := rt.q.Ack(ctx, notice)
	if queue.IsClaimLost(err) {
		return nil
	}
	return err
}

// childResults reads the results of the children of the Spawn of step
// rec.SpawnStep, in the order given. A child not ended (its parent was
// cancelled while waiting, then retried) has Status 0.
func (rt *Runtime) childResults(ctx context.Context, rec *kvrecord.Run) ([]steprunner.ChildResult, error) {
	out := make([]steprunner.ChildResult, 0, rec.Spawned)
	err := rt.scanChildren(ctx, rec, func(e *runrec.ChildEntry) {
		out = append(out, steprunner.ChildResult{RunID: e.RunID, Status: terminal.Status(e.Status), Result: e.Result, Error: e.Error})
	})
	return out, err
}

// scanChildren calls f with each child entry of rec's latest Spawn, in
// order.
func (rt *Runtime) scanChildren(ctx context.Context, rec *kvrecord.Run, f func(*runrec.ChildEntry)) error {
	var after []byte
	for {
		page, err := rt.q.Scan(ctx, runrec.ChildStepPrefix(rec.RunID, rec.SpawnStep), queue.ScanOptions{After: after, Limit: 1000})
		if err != nil {
			return err
		}
		for _, kv := range page.Items {
			e, err := runrec.DecodeChildEntry(kv.Value)
			if err != nil {
				return err
			}
			f(e)
		}
		if page.Next == nil {
			return nil
		}
		after = page.Next
	}
}

// childIDs returns the run IDs of the children of rec's latest Spawn.
func (rt *Runtime) childIDs(ctx context.Context, rec *kvrecord.Run) ([]string, error) {
	if rec.Spawned == 0 {
		return nil, nil
	}
	ids := make([]string, 0, rec.Spawned)
	err := rt.scanChildren(ctx, rec, func(e *runrec.ChildEntry) { ids = append(ids, e.RunID) })
	return ids, err
}

// waitingFor is what Status reports a waiting run waits for.
func (rt *Runtime) waitingFor(ctx context.Context, rec *kvrecord.Run) (string, error) {
	if rec.ConcLine != 0 {
		return rt.concWaitingFor(ctx, rec)
	}
	if rec.WaitFor != childrenWait {
		return rec.WaitFor, nil
	}
	ended, err := rt.childrenEnded(ctx, rec)
	return fmt.Sprintf("children: %d of %d ended", ended, rec.Spawned), err
}

// deleteChildKeys adds to deleteRunKeys's transaction the deletion of a
// parent's children entries and Join.
func (rt *Runtime) deleteChildKeys(ctx context.Context, txn *queue.Txn, rec *kvrecord.Run, old []byte) error {
	if rec.Spawned == 0 {
		return nil
	}
	txn.Delete(runrec.JoinKey(rec.RunID))
	return rt.deletePrefix(ctx, txn, rec, old, runrec.ChildRunPrefix(rec.RunID))
}
