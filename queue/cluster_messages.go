package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/handoff"
)

// The wire form of cluster calls: plain structs, encoded by the cluster
// transport's msgpack codec (as maps of field names, or of field numbers
// for the hot types of cluster_codec.go, so a field added on one side is
// ignored by the other). Each method of the writer takes one
// request type and returns one reply type; every reply that can fail
// carries a wireErr, which the member turns back into this package's typed
// errors.

// Writer methods.
const (
	rpcCommit      = "Commit"      // commitReq -> commitReply
	rpcClaim       = "Claim"       // claimReq -> claimReply
	rpcRenew       = "Renew"       // renewReq -> renewReply
	rpcEvents      = "Events"      // eventsReq -> eventsReply
	rpcGet         = "Get"         // getReq -> getReply
	rpcScan        = "Scan"        // scanReq -> scanReply
	rpcStats       = "Stats"       // statsReq -> statsReply
	rpcQueues      = "Queues"      // struct{} -> queuesReply
	rpcGetJob      = "GetJob"      // getJobReq -> jobReply
	rpcDeadJobs    = "DeadJobs"    // deadJobsReq -> deadJobsReply
	rpcRequeueDead = "RequeueDead" // getJobReq -> jobReply
	rpcHealth      = "Health"      // struct{} -> healthReply
)

// wireOpts are the caller's queue settings: a call is applied with the
// caller's defaults and per-queue configs, as it would be in its own
// process.
type wireOpts struct {
	Lease       time.Duration
	MaxAttempts uint32
	BackoffBase time.Duration
	BackoffMax  time.Duration
	Queues      map[string]QueueConfig
}

func toWireOpts(o options) wireOpts {
	return wireOpts{Lease: o.lease, MaxAttempts: o.maxAttempts, BackoffBase: o.backoffBase,
		BackoffMax: o.backoffMax, Queues: o.queues}
}

// apply returns the writer's options with the caller's queue settings.
func (w wireOpts) apply(o options, member string) options {
	if w.Lease > 0 {
		o.lease = w.Lease
	}
	if w.MaxAttempts > 0 {
		o.maxAttempts = w.MaxAttempts
	}
	if w.BackoffBase > 0 {
		o.backoffBase = w.BackoffBase
	}
	if w.BackoffMax > 0 {
		o.backoffMax = w.BackoffMax
	}
	if w.Queues != nil {
		o.queues = w.Queues
	}
	o.member = member
	return o
}

// wireJob is a Job with its claim token.
type wireJob struct {
	Job        *Job
	Token      uint64
	Prefetched []byte `msgpack:",omitempty"` // see claimReq.Prefetch
}

func toWireJob(j *Job) *wireJob {
	if j == nil {
		return nil
	}
	return &wireJob{Job: j, Token: j.token}
}

func (w *wireJob) job() *Job {
	if w == nil || w.Job == nil {
		return nil
	}
	w.Job.token, w.Job.prefetched = w.Token, w.Prefetched
	return w.Job
}

type commitReq struct {
	Member string
	Opts   wireOpts
	Txns   [][]txnOp
	// Dispatch says that the member took one of its own Work slots for
	// each enqueue with Dispatch set: the writer claims those jobs for it
	// when dispatch would start them (a member that does not say so gets
	// no job dispatched).
	Dispatch bool
	// Claims ride the call (see remote.claimRide, refillFor): the writer
	// claims for the member after the transactions, before it waits for
	// their WAL write (which the claims usually share), without waiting
	// for a job. A writer that does not know the field ignores
	// it, and its reply has no Claims.
	Claims []claimWant `msgpack:",omitempty"`
}

// claimWant is a claim riding a commit call: up to N jobs of Queue.
type claimWant struct {
	Queue    string
	N        int
	Prefetch handoff.Prefetch // as claimReq.Prefetch
	// IfTxn, if positive, makes the claim depend on the call's
	// transaction IfTxn-1: it is made only if that one applies (a
	// settlement's refill, see refillFor).
	IfTxn int `msgpack:",omitempty"`
}

type wireEnqueued struct {
	JobID     string
	Duplicate bool
	// Claimed is the job if it was claimed at its enqueue, without its
	// payload: the member has it (the enqueue's), and fills it in.
	Claimed *wireJob
}

type wireTxnResult struct {
	Enqueued  []wireEnqueued
	Cancelled []CancelOutcome
	Err       *wireErr
}

type commitReply struct {
	Results []wireTxnResult
	Claims  []claimReply `msgpack:",omitempty"` // per commitReq.Claims
}

type claimReq struct {
	Member string
	Opts   wireOpts
	Queue  string
	N      int
	Wait   time.Duration // 0: do not wait for a job
	// Prefetch names a value to read with each job (see
	// handoff.Prefetch; zero: none): it comes in wireJob.Prefetched.
	Prefetch handoff.Prefetch
}

type claimReply struct {
	Jobs []*wireJob
	Err  *wireErr
}

type claimRef struct {
	ID    string
	Token uint64
	Queue string `msgpack:",omitempty"` // the member's own bookkeeping
}

type renewReq struct {
	Member string
	Opts   wireOpts
	Claims []claimRef
}

type renewReply struct {
	Lost []bool // per claim: the lease is gone
}

// eventsReq long-polls the writer for what happened to the caller's
// claims. It lists them all, so that a writer that took over learns who
// holds the claims it adopted.
type eventsReq struct {
	Member string
	Claims []claimRef
	Wait   time.Duration
}

// claimEvent tells a member that one of its claims was cancelled or lost.
type claimEvent struct {
	ID     string
	Token  uint64
	Cancel bool
	Lost   bool
}

type eventsReply struct {
	Events []claimEvent
	Health healthReply // the writer's store health
	// Closing: the writer is closing; its store will be free shortly.
	Closing bool
}

// getReq reads keys: a member's concurrent reads share a call.
type getReq struct{ Keys []string }

type getReply struct {
	Values [][]byte
	Errs   []*wireErr // per key; nil: found
}

type scanReq struct {
	Prefix, After string
	Limit         int
}

type scanReply struct {
	KVs  []KV
	More bool
	Err  *wireErr
}

type statsReq struct{ Queue string }

type statsReply struct {
	Stats Stats
	Err   *wireErr
}

type queuesReply struct {
	Names []string
	Err   *wireErr
}

type getJobReq struct{ ID string }

type jobReply struct {
	Job *wireJob
	Err *wireErr
}

type deadJobsReq struct {
	Queue, After string
	Limit        int
}

type deadJobsReply struct {
	Jobs []*wireJob
	Next string
	Err  *wireErr
}

type healthReply struct {
	Healthy   bool
	Since     time.Time
	LastError string
	Stalled   time.Duration
}

// wireErr is an error as it crosses the wire: its kind names the sentinel
// (or typed error) it must be again on the other side.
type wireErr struct {
	Kind  string
	Msg   string
	JobID string
	Key   []byte
	What  string
	Size  int
	Max   int
}

func (e *wireErr) Error() string { return e.Msg }

// wireSentinels are the errors that cross the wire by name.
var wireSentinels = map[string]error{
	"job-not-found": ErrJobNotFound, "job-exists": ErrJobExists, "not-dead": ErrNotDead,
	"invalid-cursor": ErrInvalidCursor, "key-not-found": ErrKeyNotFound, "invalid-job-id": ErrInvalidJobID,
	"empty-queue": ErrEmptyQueueName, "empty-key": ErrEmptyKey, "read-only": ErrReadOnly,
	"closed": ErrClosed, "fenced": ErrFenced, "corrupt": ErrCorrupt, "outcome-unknown": ErrOutcomeUnknown,
	"invalid-option": ErrInvalidOption,
}

func toWireErr(err error) *wireErr {
	if err == nil {
		return nil
	}
	err = mapErr(err)
	w := &wireErr{Msg: err.Error()}
	var cl *ClaimLostError
	var cf *ConditionFailedError
	var tl *TooLargeError
	switch {
	case errors.As(err, &cl):
		w.Kind, w.JobID = "claim-lost", cl.JobID
	case errors.As(err, &cf):
		w.Kind, w.Key = "condition-failed", cf.Key
	case errors.As(err, &tl):
		w.Kind, w.What, w.Size, w.Max = "too-large", tl.What, tl.Size, tl.Max
	default:
		// Ordered: an outcome-unknown error also wraps ErrClosed.
		for _, k := range []string{"outcome-unknown", "fenced", "closed", "corrupt", "read-only", "job-not-found",
			"job-exists", "not-dead", "invalid-cursor", "key-not-found", "invalid-job-id", "empty-queue",
			"empty-key", "invalid-option"} {
			if errors.Is(err, wireSentinels[k]) {
				w.Kind = k
				break
			}
		}
	}
	return w
}

// errFromWire is the member-side error of a wireErr: the same typed error
// or sentinel the writer returned, with its message. A fenced or closed
// writer is errWriterGone: the member retries with the next writer.
func errFromWire(w *wireErr) error {
	if w == nil {
		return nil
	}
	switch w.Kind {
	case "claim-lost":
		return &ClaimLostError{JobID: w.JobID}
	case "condition-failed":
		return &ConditionFailedError{Key: w.Key}
	case "too-large":
		return &TooLargeError{What: w.What, Size: w.Size, Max: w.Max}
	case "fenced", "closed":
		return fmt.Errorf("%w: %s", errWriterGone, w.Msg)
	case "outcome-unknown":
		return fmt.Errorf("%w: the writer: %s", engine.ErrOutcomeUnknown, w.Msg)
	}
	if s := wireSentinels[w.Kind]; s != nil {
		if s.Error() == w.Msg {
			return s
		}
		return fmt.Errorf("%w (%s)", s, w.Msg)
	}
	return errors.New(w.Msg)
}

// errWriterGone: the writer a member called is gone (closed, fenced, or
// unreachable): nothing was done, or it is not known whether it was (see
// remote.commit). The member finds the next writer and retries.
var errWriterGone = errors.New("queue: the cluster's writer is gone")
