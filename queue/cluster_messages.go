package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/handoff"
)

// The messages of cluster calls, each with its field numbers and codec.
//
// Each method of the writer takes one request type and returns one reply
// type (the rpc constants below). Every message is a field-numbered struct
// of internal/format (see its documentation, "Field-numbered messages"):
// a msgpack map from the small field numbers listed with its type to the
// values, where a field at its zero value is left out and a decoder skips
// the numbers it does not know, so a field added on one side is ignored by
// the other. A number, once used, keeps its meaning. Every reply that can
// fail carries a wireErr, which the member turns back into this package's
// typed errors.
//
// The writer decodes requests with byte fields that are slices of the
// message (the cluster codec gives it a buffer of its own, see
// cluster.Decode), each capped to its length, so that appending to one
// cannot write over the next; a member decodes replies with copies
// (format.NewCopyingReader): it hands a reply's payloads to its workers,
// and a slice of one would keep the whole reply (up to
// maxMemberClaimBytes of payloads) alive while any of them runs.

// Writer methods.
const (
	rpcCommit      = "Commit"      // commitReq -> commitReply
	rpcClaim       = "Claim"       // claimReq -> claimReply
	rpcRenew       = "Renew"       // renewReq -> renewReply
	rpcEvents      = "Events"      // eventsReq -> eventsReply
	rpcGet         = "Get"         // getReq -> getReply
	rpcScan        = "Scan"        // scanReq -> scanReply
	rpcStats       = "Stats"       // statsReq -> statsReply
	rpcQueues      = "Queues"      // noArgs -> queuesReply
	rpcGetJob      = "GetJob"      // getJobReq -> jobReply
	rpcDeadJobs    = "DeadJobs"    // deadJobsReq -> deadJobsReply
	rpcRequeueDead = "RequeueDead" // getJobReq -> jobReply
	rpcHealth      = "Health"      // noArgs -> healthReply
)

// message is a request or a reply of a cluster call: the cluster codec
// encodes it with MarshalMsg and decodes it with UnmarshalMsg.
type message = cluster.Message

var (
	_ message = (*commitReq)(nil)
	_ message = (*commitReply)(nil)
	_ message = (*claimReq)(nil)
	_ message = (*claimReply)(nil)
	_ message = (*renewReq)(nil)
	_ message = (*renewReply)(nil)
	_ message = (*eventsReq)(nil)
	_ message = (*eventsReply)(nil)
	_ message = (*getReq)(nil)
	_ message = (*getReply)(nil)
	_ message = (*scanReq)(nil)
	_ message = (*scanReply)(nil)
	_ message = (*statsReq)(nil)
	_ message = (*statsReply)(nil)
	_ message = (*queuesReply)(nil)
	_ message = (*getJobReq)(nil)
	_ message = (*jobReply)(nil)
	_ message = (*deadJobsReq)(nil)
	_ message = (*deadJobsReply)(nil)
	_ message = (*healthReply)(nil)
	_ message = (*noArgs)(nil)
)

// decodeRequest and decodeReply decode a message with read: a request's
// byte fields are slices of b, a reply's are copies (see above).
func decodeRequest[T any](b []byte, v *T, read func(*T, *format.Reader)) ([]byte, error) {
	r := format.NewReader(b)
	read(v, &r)
	return r.Rest(), r.Err()
}

func decodeReply[T any](b []byte, v *T, read func(*T, *format.Reader)) ([]byte, error) {
	r := format.NewCopyingReader(b)
	read(v, &r)
	return r.Rest(), r.Err()
}

// noArgs is the request of a method that takes none.
type noArgs struct{}

func (*noArgs) MarshalMsg(b []byte) ([]byte, error) { w := format.BeginFields(b); return w.End(), nil }

func (n *noArgs) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, n, func(_ *noArgs, r *format.Reader) { r.Numbered("noArgs", func(uint64) { r.Skip() }) })
}

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

// wireOpts field numbers.
const (
	fwoLease = iota + 1
	fwoMaxAttempts
	fwoBackoffBase
	fwoBackoffMax
	fwoQueues // a map of queue names to field-numbered QueueConfigs
)

func (o *wireOpts) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	w.Int(fwoLease, int64(o.Lease))
	w.Uint(fwoMaxAttempts, uint64(o.MaxAttempts))
	w.Int(fwoBackoffBase, int64(o.BackoffBase))
	w.Int(fwoBackoffMax, int64(o.BackoffMax))
	if o.Queues != nil {
		w.Key(fwoQueues)
		w.B = format.AppendMapLen(w.B, len(o.Queues))
		for name, c := range o.Queues {
			w.B = format.AppendString(w.B, name)
			w.B = appendQueueConfig(w.B, &c)
		}
	}
	return w.End()
}

func (o *wireOpts) read(r *format.Reader) {
	*o = wireOpts{}
	r.Numbered("wireOpts", func(f uint64) {
		switch f {
		case fwoLease:
			o.Lease = time.Duration(r.Int64())
		case fwoMaxAttempts:
			o.MaxAttempts = r.Uint32()
		case fwoBackoffBase:
			o.BackoffBase = time.Duration(r.Int64())
		case fwoBackoffMax:
			o.BackoffMax = time.Duration(r.Int64())
		case fwoQueues:
			n := r.MapLen()
			if n < 0 {
				return
			}
			o.Queues = make(map[string]QueueConfig, min(n, 1024))
			for i := 0; i < n && r.Err() == nil; i++ {
				name := r.String()
				o.Queues[name] = readQueueConfig(r)
			}
		default:
			r.Skip()
		}
	})
}

// QueueConfig field numbers.
const (
	fqcLease = iota + 1
	fqcMaxAttempts
	fqcBackoffBase
	fqcBackoffMax
	fqcDoneRetention
	fqcDeadRetention
)

func appendQueueConfig(b []byte, c *QueueConfig) []byte {
	w := format.BeginFields(b)
	w.Int(fqcLease, int64(c.Lease))
	w.Uint(fqcMaxAttempts, uint64(c.MaxAttempts))
	w.Int(fqcBackoffBase, int64(c.BackoffBase))
	w.Int(fqcBackoffMax, int64(c.BackoffMax))
	w.Int(fqcDoneRetention, int64(c.DoneRetention))
	w.Int(fqcDeadRetention, int64(c.DeadRetention))
	return w.End()
}

func readQueueConfig(r *format.Reader) QueueConfig {
	var c QueueConfig
	r.Numbered("QueueConfig", func(f uint64) {
		switch f {
		case fqcLease:
			c.Lease = time.Duration(r.Int64())
		case fqcMaxAttempts:
			c.MaxAttempts = r.Uint32()
		case fqcBackoffBase:
			c.BackoffBase = time.Duration(r.Int64())
		case fqcBackoffMax:
			c.BackoffMax = time.Duration(r.Int64())
		case fqcDoneRetention:
			c.DoneRetention = time.Duration(r.Int64())
		case fqcDeadRetention:
			c.DeadRetention = time.Duration(r.Int64())
		default:
			r.Skip()
		}
	})
	return c
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

// txnOp field numbers (txnOp itself is in commit.go).
const (
	fopKind = iota + 1
	fopKey
	fopValue
	fopExpect
	fopAbsent
	fopQueue
	fopJobID
	fopToken
	fopPriority
	fopRunAt
	fopMaxAttempts
	fopHeaders
	fopDedupKey
	fopError
	fopStates
	fopDeadNotify
	fopClaim
	fopDispatch
)

func (op *txnOp) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	w.Uint(fopKind, uint64(op.Kind))
	w.Bytes(fopKey, op.Key)
	w.Bytes(fopValue, op.Value)
	w.Bytes(fopExpect, op.Expect)
	w.Bool(fopAbsent, op.Absent)
	w.String(fopQueue, op.Queue)
	w.String(fopJobID, op.JobID)
	w.Uint(fopToken, op.Token)
	w.Int(fopPriority, int64(op.Priority))
	w.Int(fopRunAt, op.RunAt)
	w.Uint(fopMaxAttempts, uint64(op.MaxAttempts))
	w.StringMap(fopHeaders, op.Headers)
	w.String(fopDedupKey, op.DedupKey)
	w.String(fopError, op.Error)
	w.Uint(fopStates, uint64(op.States))
	w.String(fopDeadNotify, op.DeadNotify)
	w.Bool(fopClaim, op.Claim)
	w.Bool(fopDispatch, op.Dispatch)
	return w.End()
}

func (op *txnOp) read(r *format.Reader) {
	*op = txnOp{}
	r.Numbered("txnOp", func(f uint64) {
		switch f {
		case fopKind:
			op.Kind = r.Uint8()
		case fopKey:
			op.Key = r.Bin()
		case fopValue:
			op.Value = r.Bin()
		case fopExpect:
			op.Expect = r.Bin()
		case fopAbsent:
			op.Absent = r.Bool()
		case fopQueue:
			op.Queue = r.String()
		case fopJobID:
			op.JobID = r.String()
		case fopToken:
			op.Token = r.Uint64()
		case fopPriority:
			op.Priority = r.Int32()
		case fopRunAt:
			op.RunAt = r.Int64()
		case fopMaxAttempts:
			op.MaxAttempts = r.Uint32()
		case fopHeaders:
			op.Headers = r.StringMap()
		case fopDedupKey:
			op.DedupKey = r.String()
		case fopError:
			op.Error = r.String()
		case fopStates:
			op.States = r.Uint32()
		case fopDeadNotify:
			op.DeadNotify = r.String()
		case fopClaim:
			op.Claim = r.Bool()
		case fopDispatch:
			op.Dispatch = r.Bool()
		default:
			r.Skip()
		}
	})
}

// wireJob is a Job with its claim token.
type wireJob struct {
	Job        *Job
	Token      uint64
	Prefetched []byte // see claimReq.Prefetch
}

// wireJob field numbers: its Job's fields, then its own.
const (
	fjID = iota + 1
	fjQueue
	fjPayload
	fjHeaders
	fjPriority
	fjDedupKey
	fjState
	fjAttempt
	fjMaxAttempts
	fjEnqueuedAt
	fjRunAt
	fjCancelRequested
	fjHistory // each Attempt as two values: At (unix ns), Error
	fjToken
	fjPrefetched
	fjHasJob // the wireJob has a Job (its fields may all be zero)
)

// appendMsg appends w, or nil for a nil w.
func (w *wireJob) appendMsg(b []byte) []byte {
	if w == nil {
		return format.AppendNil(b)
	}
	fw := format.BeginFields(b)
	if j := w.Job; j != nil {
		fw.Bool(fjHasJob, true)
		fw.String(fjID, j.ID)
		fw.String(fjQueue, j.Queue)
		fw.Bytes(fjPayload, j.Payload)
		fw.StringMap(fjHeaders, j.Headers)
		fw.Int(fjPriority, int64(j.Priority))
		fw.String(fjDedupKey, j.DedupKey)
		fw.Uint(fjState, uint64(j.State))
		fw.Uint(fjAttempt, uint64(j.Attempt))
		fw.Uint(fjMaxAttempts, uint64(j.MaxAttempts))
		fw.Int(fjEnqueuedAt, timeNano(j.EnqueuedAt))
		fw.Int(fjRunAt, timeNano(j.RunAt))
		fw.Bool(fjCancelRequested, j.CancelRequested)
		if j.History != nil {
			fw.Array(fjHistory, 2*len(j.History))
			for _, a := range j.History {
				fw.B = format.AppendString(format.AppendInt(fw.B, timeNano(a.At)), a.Error)
			}
		}
	}
	fw.Uint(fjToken, w.Token)
	fw.Bytes(fjPrefetched, w.Prefetched)
	return fw.End()
}

// readWireJob reads a wireJob, or nil.
func readWireJob(r *format.Reader) *wireJob {
	if r.Nil() {
		return nil
	}
	w := new(wireJob)
	j := new(Job)
	r.Numbered("wireJob", func(f uint64) {
		switch f {
		case fjHasJob:
			if r.Bool() {
				w.Job = j
			}
		case fjID:
			j.ID = r.String()
		case fjQueue:
			j.Queue = r.String()
		case fjPayload:
			j.Payload = r.Bin()
		case fjHeaders:
			j.Headers = r.StringMap()
		case fjPriority:
			j.Priority = r.Int32()
		case fjDedupKey:
			j.DedupKey = r.String()
		case fjState:
			j.State = State(r.Uint8())
		case fjAttempt:
			j.Attempt = r.Uint32()
		case fjMaxAttempts:
			j.MaxAttempts = r.Uint32()
		case fjEnqueuedAt:
			j.EnqueuedAt = unixNano(r.Int64())
		case fjRunAt:
			j.RunAt = unixNano(r.Int64())
		case fjCancelRequested:
			j.CancelRequested = r.Bool()
		case fjHistory:
			n, h := format.List[Attempt](r)
			if n%2 != 0 {
				r.Fail(fmt.Errorf("a history of %d values: want pairs", n))
			}
			for i := 0; i+1 < n && r.Err() == nil; i += 2 {
				h = append(h, Attempt{At: unixNano(r.Int64()), Error: r.String()})
			}
			j.History = h
		case fjToken:
			w.Token = r.Uint64()
		case fjPrefetched:
			w.Prefetched = r.Bin()
		default:
			r.Skip()
		}
	})
	return w
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
	// for a job.
	Claims []claimWant
}

// commitReq field numbers.
const (
	fcMember = iota + 1
	fcOpts
	fcTxns
	fcDispatch
	fcClaims
)

// MarshalMsg implements message.
func (c *commitReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(fcMember, c.Member)
	w.Key(fcOpts)
	w.B = c.Opts.appendMsg(w.B)
	if c.Txns != nil {
		w.Array(fcTxns, len(c.Txns))
		for _, ops := range c.Txns {
			if ops == nil {
				w.B = format.AppendNil(w.B)
				continue
			}
			w.B = format.AppendArrayLen(w.B, len(ops))
			for i := range ops {
				w.B = ops[i].appendMsg(w.B)
			}
		}
	}
	w.Bool(fcDispatch, c.Dispatch)
	if c.Claims != nil {
		w.Array(fcClaims, len(c.Claims))
		for i := range c.Claims {
			w.B = c.Claims[i].appendMsg(w.B)
		}
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (c *commitReq) UnmarshalMsg(b []byte) ([]byte, error) {
	*c = commitReq{}
	r := format.NewReader(b)
	r.Numbered("commitReq", func(f uint64) {
		switch f {
		case fcMember:
			c.Member = r.String()
		case fcOpts:
			c.Opts.read(&r)
		case fcTxns:
			c.Txns = readList(&r, func(ops *[]txnOp, r *format.Reader) { *ops = readList(r, (*txnOp).read) })
		case fcDispatch:
			c.Dispatch = r.Bool()
		case fcClaims:
			c.Claims = readList(&r, (*claimWant).read)
		default:
			r.Skip()
		}
	})
	return r.Rest(), r.Err()
}

// claimWant is a claim riding a commit call: up to N jobs of Queue.
type claimWant struct {
	Queue    string
	N        int
	Prefetch handoff.Prefetch // as claimReq.Prefetch
	// IfTxn, if positive, makes the claim depend on the call's
	// transaction IfTxn-1: it is made only if that one applies (a
	// settlement's refill, see refillFor).
	IfTxn int
}

// claimWant field numbers.
const (
	fcwQueue = iota + 1
	fcwN
	fcwPrefetchHeader
	fcwPrefetchPrefix
	fcwIfTxn
)

func (c *claimWant) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	w.String(fcwQueue, c.Queue)
	w.Int(fcwN, int64(c.N))
	w.String(fcwPrefetchHeader, c.Prefetch.Header)
	w.String(fcwPrefetchPrefix, c.Prefetch.Prefix)
	w.Int(fcwIfTxn, int64(c.IfTxn))
	return w.End()
}

func (c *claimWant) read(r *format.Reader) {
	*c = claimWant{}
	r.Numbered("claimWant", func(f uint64) {
		switch f {
		case fcwQueue:
			c.Queue = r.String()
		case fcwN:
			c.N = readCount(r)
		case fcwPrefetchHeader:
			c.Prefetch.Header = r.String()
		case fcwPrefetchPrefix:
			c.Prefetch.Prefix = r.String()
		case fcwIfTxn:
			c.IfTxn = readCount(r)
		default:
			r.Skip()
		}
	})
}

type commitReply struct {
	Results []wireTxnResult
	Claims  []claimReply // per commitReq.Claims
}

// commitReply field numbers.
const (
	fcrResults = iota + 1
	fcrClaims
)

// MarshalMsg implements message.
func (c *commitReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	if c.Results != nil {
		w.Array(fcrResults, len(c.Results))
		for i := range c.Results {
			w.B = c.Results[i].appendMsg(w.B)
		}
	}
	if c.Claims != nil {
		w.Array(fcrClaims, len(c.Claims))
		for i := range c.Claims {
			w.B = c.Claims[i].appendMsg(w.B)
		}
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (c *commitReply) UnmarshalMsg(b []byte) ([]byte, error) {
	*c = commitReply{}
	r := format.NewCopyingReader(b)
	r.Numbered("commitReply", func(f uint64) {
		switch f {
		case fcrResults:
			c.Results = readList(&r, (*wireTxnResult).read)
		case fcrClaims:
			c.Claims = readList(&r, (*claimReply).read)
		default:
			r.Skip()
		}
	})
	return r.Rest(), r.Err()
}

type wireTxnResult struct {
	Enqueued  []wireEnqueued
	Cancelled []CancelOutcome
	Err       *wireErr
}

// wireTxnResult field numbers.
const (
	ftrEnqueued = iota + 1
	ftrCancelled
	ftrErr
)

func (t *wireTxnResult) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	if t.Enqueued != nil {
		w.Array(ftrEnqueued, len(t.Enqueued))
		for i := range t.Enqueued {
			w.B = t.Enqueued[i].appendMsg(w.B)
		}
	}
	if t.Cancelled != nil {
		w.Array(ftrCancelled, len(t.Cancelled))
		for _, c := range t.Cancelled {
			w.B = format.AppendUint(w.B, uint64(c))
		}
	}
	if t.Err != nil {
		w.Key(ftrErr)
		w.B = t.Err.appendMsg(w.B)
	}
	return w.End()
}

func (t *wireTxnResult) read(r *format.Reader) {
	*t = wireTxnResult{}
	r.Numbered("wireTxnResult", func(f uint64) {
		switch f {
		case ftrEnqueued:
			t.Enqueued = readList(r, (*wireEnqueued).read)
		case ftrCancelled:
			t.Cancelled = readList(r, func(c *CancelOutcome, r *format.Reader) { *c = CancelOutcome(r.Uint8()) })
		case ftrErr:
			t.Err = readErr(r)
		default:
			r.Skip()
		}
	})
}

type wireEnqueued struct {
	JobID     string
	Duplicate bool
	// Claimed is the job if it was claimed at its enqueue, without its
	// payload: the member has it (the enqueue's), and fills it in.
	Claimed *wireJob
}

// wireEnqueued field numbers.
const (
	feJobID = iota + 1
	feDuplicate
	feClaimed
)

func (e *wireEnqueued) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	w.String(feJobID, e.JobID)
	w.Bool(feDuplicate, e.Duplicate)
	if e.Claimed != nil {
		w.Key(feClaimed)
		w.B = e.Claimed.appendMsg(w.B)
	}
	return w.End()
}

func (e *wireEnqueued) read(r *format.Reader) {
	*e = wireEnqueued{}
	r.Numbered("wireEnqueued", func(f uint64) {
		switch f {
		case feJobID:
			e.JobID = r.String()
		case feDuplicate:
			e.Duplicate = r.Bool()
		case feClaimed:
			e.Claimed = readWireJob(r)
		default:
			r.Skip()
		}
	})
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

// claimReq field numbers.
const (
	fcqMember = iota + 1
	fcqOpts
	fcqQueue
	fcqN
	fcqWait
	fcqPrefetchHeader
	fcqPrefetchPrefix
)

// MarshalMsg implements message.
func (c *claimReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(fcqMember, c.Member)
	w.Key(fcqOpts)
	w.B = c.Opts.appendMsg(w.B)
	w.String(fcqQueue, c.Queue)
	w.Int(fcqN, int64(c.N))
	w.Int(fcqWait, int64(c.Wait))
	w.String(fcqPrefetchHeader, c.Prefetch.Header)
	w.String(fcqPrefetchPrefix, c.Prefetch.Prefix)
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (c *claimReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, c, func(c *claimReq, r *format.Reader) {
		*c = claimReq{}
		r.Numbered("claimReq", func(f uint64) {
			switch f {
			case fcqMember:
				c.Member = r.String()
			case fcqOpts:
				c.Opts.read(r)
			case fcqQueue:
				c.Queue = r.String()
			case fcqN:
				c.N = readCount(r)
			case fcqWait:
				c.Wait = time.Duration(r.Int64())
			case fcqPrefetchHeader:
				c.Prefetch.Header = r.String()
			case fcqPrefetchPrefix:
				c.Prefetch.Prefix = r.String()
			default:
				r.Skip()
			}
		})
	})
}

type claimReply struct {
	Jobs []*wireJob
	Err  *wireErr
}

// claimReply field numbers.
const (
	fclJobs = iota + 1
	fclErr
)

func (c *claimReply) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	if c.Jobs != nil {
		w.Array(fclJobs, len(c.Jobs))
		for _, j := range c.Jobs {
			w.B = j.appendMsg(w.B)
		}
	}
	if c.Err != nil {
		w.Key(fclErr)
		w.B = c.Err.appendMsg(w.B)
	}
	return w.End()
}

func (c *claimReply) read(r *format.Reader) {
	*c = claimReply{}
	r.Numbered("claimReply", func(f uint64) {
		switch f {
		case fclJobs:
			c.Jobs = readList(r, func(j **wireJob, r *format.Reader) { *j = readWireJob(r) })
		case fclErr:
			c.Err = readErr(r)
		default:
			r.Skip()
		}
	})
}

// MarshalMsg implements message.
func (c *claimReply) MarshalMsg(b []byte) ([]byte, error) { return c.appendMsg(b), nil }

// UnmarshalMsg implements message.
func (c *claimReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, c, (*claimReply).read)
}

type claimRef struct {
	ID    string
	Token uint64
	Queue string // the member's own bookkeeping
}

// claimRef field numbers.
const (
	frfID = iota + 1
	frfToken
	frfQueue
)

func (c *claimRef) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	w.String(frfID, c.ID)
	w.Uint(frfToken, c.Token)
	w.String(frfQueue, c.Queue)
	return w.End()
}

func (c *claimRef) read(r *format.Reader) {
	*c = claimRef{}
	r.Numbered("claimRef", func(f uint64) {
		switch f {
		case frfID:
			c.ID = r.String()
		case frfToken:
			c.Token = r.Uint64()
		case frfQueue:
			c.Queue = r.String()
		default:
			r.Skip()
		}
	})
}

// appendClaimRefs appends refs as field num, unless nil.
func appendClaimRefs(w *format.FieldWriter, num uint8, refs []claimRef) {
	if refs != nil {
		w.Array(num, len(refs))
		for i := range refs {
			w.B = refs[i].appendMsg(w.B)
		}
	}
}

type renewReq struct {
	Member string
	Opts   wireOpts
	Claims []claimRef
}

// renewReq field numbers.
const (
	frqMember = iota + 1
	frqOpts
	frqClaims
)

// MarshalMsg implements message.
func (q *renewReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(frqMember, q.Member)
	w.Key(frqOpts)
	w.B = q.Opts.appendMsg(w.B)
	appendClaimRefs(&w, frqClaims, q.Claims)
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *renewReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *renewReq, r *format.Reader) {
		*q = renewReq{}
		r.Numbered("renewReq", func(f uint64) {
			switch f {
			case frqMember:
				q.Member = r.String()
			case frqOpts:
				q.Opts.read(r)
			case frqClaims:
				q.Claims = readList(r, (*claimRef).read)
			default:
				r.Skip()
			}
		})
	})
}

type renewReply struct {
	Lost []bool // per claim: the lease is gone
}

// renewReply field numbers.
const frpLost = 1

// MarshalMsg implements message.
func (p *renewReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	if p.Lost != nil {
		w.Array(frpLost, len(p.Lost))
		for _, l := range p.Lost {
			w.B = format.AppendBool(w.B, l)
		}
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *renewReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *renewReply, r *format.Reader) {
		*p = renewReply{}
		r.Numbered("renewReply", func(f uint64) {
			switch f {
			case frpLost:
				p.Lost = readList(r, func(l *bool, r *format.Reader) { *l = r.Bool() })
			default:
				r.Skip()
			}
		})
	})
}

// eventsReq long-polls the writer for what happened to the caller's
// claims. It lists them all, so that a writer that took over learns who
// holds the claims it adopted.
type eventsReq struct {
	Member string
	Claims []claimRef
	Wait   time.Duration
}

// eventsReq field numbers.
const (
	fevMember = iota + 1
	fevClaims
	fevWait
)

// MarshalMsg implements message.
func (q *eventsReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(fevMember, q.Member)
	appendClaimRefs(&w, fevClaims, q.Claims)
	w.Int(fevWait, int64(q.Wait))
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *eventsReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *eventsReq, r *format.Reader) {
		*q = eventsReq{}
		r.Numbered("eventsReq", func(f uint64) {
			switch f {
			case fevMember:
				q.Member = r.String()
			case fevClaims:
				q.Claims = readList(r, (*claimRef).read)
			case fevWait:
				q.Wait = time.Duration(r.Int64())
			default:
				r.Skip()
			}
		})
	})
}

// claimEvent tells a member that one of its claims was cancelled or lost.
type claimEvent struct {
	ID     string
	Token  uint64
	Cancel bool
	Lost   bool
}

// claimEvent field numbers.
const (
	fceID = iota + 1
	fceToken
	fceCancel
	fceLost
)

func (e *claimEvent) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	w.String(fceID, e.ID)
	w.Uint(fceToken, e.Token)
	w.Bool(fceCancel, e.Cancel)
	w.Bool(fceLost, e.Lost)
	return w.End()
}

func (e *claimEvent) read(r *format.Reader) {
	*e = claimEvent{}
	r.Numbered("claimEvent", func(f uint64) {
		switch f {
		case fceID:
			e.ID = r.String()
		case fceToken:
			e.Token = r.Uint64()
		case fceCancel:
			e.Cancel = r.Bool()
		case fceLost:
			e.Lost = r.Bool()
		default:
			r.Skip()
		}
	})
}

type eventsReply struct {
	Events []claimEvent
	Health healthReply // the writer's store health
	// Closing: the writer is closing; its store will be free shortly.
	Closing bool
}

// eventsReply field numbers.
const (
	ferEvents = iota + 1
	ferHealth
	ferClosing
)

// MarshalMsg implements message.
func (p *eventsReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	if p.Events != nil {
		w.Array(ferEvents, len(p.Events))
		for i := range p.Events {
			w.B = p.Events[i].appendMsg(w.B)
		}
	}
	w.Key(ferHealth)
	w.B = p.Health.appendMsg(w.B)
	w.Bool(ferClosing, p.Closing)
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *eventsReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *eventsReply, r *format.Reader) {
		*p = eventsReply{}
		r.Numbered("eventsReply", func(f uint64) {
			switch f {
			case ferEvents:
				p.Events = readList(r, (*claimEvent).read)
			case ferHealth:
				p.Health.read(r)
			case ferClosing:
				p.Closing = r.Bool()
			default:
				r.Skip()
			}
		})
	})
}

type healthReply struct {
	Healthy   bool
	Since     time.Time
	LastError string
	Stalled   time.Duration
}

// healthReply field numbers.
const (
	fhHealthy = iota + 1
	fhSince   // unix ns
	fhLastError
	fhStalled
)

func (h *healthReply) appendMsg(b []byte) []byte {
	w := format.BeginFields(b)
	w.Bool(fhHealthy, h.Healthy)
	w.Int(fhSince, timeNano(h.Since))
	w.String(fhLastError, h.LastError)
	w.Int(fhStalled, int64(h.Stalled))
	return w.End()
}

func (h *healthReply) read(r *format.Reader) {
	*h = healthReply{}
	r.Numbered("healthReply", func(f uint64) {
		switch f {
		case fhHealthy:
			h.Healthy = r.Bool()
		case fhSince:
			h.Since = unixNano(r.Int64())
		case fhLastError:
			h.LastError = r.String()
		case fhStalled:
			h.Stalled = time.Duration(r.Int64())
		default:
			r.Skip()
		}
	})
}

// MarshalMsg implements message.
func (h *healthReply) MarshalMsg(b []byte) ([]byte, error) { return h.appendMsg(b), nil }

// UnmarshalMsg implements message.
func (h *healthReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, h, (*healthReply).read)
}

// getReq reads keys: a member's concurrent reads share a call.
type getReq struct{ Keys []string }

// getReq field numbers.
const fgKeys = 1

// MarshalMsg implements message.
func (q *getReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.Strings(fgKeys, q.Keys)
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *getReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *getReq, r *format.Reader) {
		*q = getReq{}
		r.Numbered("getReq", func(f uint64) {
			switch f {
			case fgKeys:
				q.Keys = readList(r, func(k *string, r *format.Reader) { *k = r.String() })
			default:
				r.Skip()
			}
		})
	})
}

type getReply struct {
	Values [][]byte
	Errs   []*wireErr // per key; nil: found
}

// getReply field numbers.
const (
	fgrValues = iota + 1 // each value, or nil
	fgrErrs              // each error, or nil
)

// MarshalMsg implements message.
func (p *getReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	if p.Values != nil {
		w.Array(fgrValues, len(p.Values))
		for _, v := range p.Values {
			w.B = format.AppendBytes(w.B, v)
		}
	}
	if p.Errs != nil {
		w.Array(fgrErrs, len(p.Errs))
		for _, e := range p.Errs {
			w.B = e.appendMsg(w.B)
		}
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *getReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *getReply, r *format.Reader) {
		*p = getReply{}
		r.Numbered("getReply", func(f uint64) {
			switch f {
			case fgrValues:
				p.Values = readList(r, func(v *[]byte, r *format.Reader) { *v = r.Bin() })
			case fgrErrs:
				p.Errs = readList(r, func(e **wireErr, r *format.Reader) { *e = readErr(r) })
			default:
				r.Skip()
			}
		})
	})
}

type scanReq struct {
	Prefix, After string
	Limit         int
}

// scanReq field numbers.
const (
	fsPrefix = iota + 1
	fsAfter
	fsLimit
)

// MarshalMsg implements message.
func (q *scanReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(fsPrefix, q.Prefix)
	w.String(fsAfter, q.After)
	w.Int(fsLimit, int64(q.Limit))
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *scanReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *scanReq, r *format.Reader) {
		*q = scanReq{}
		r.Numbered("scanReq", func(f uint64) {
			switch f {
			case fsPrefix:
				q.Prefix = r.String()
			case fsAfter:
				q.After = r.String()
			case fsLimit:
				q.Limit = int(r.Int64())
			default:
				r.Skip()
			}
		})
	})
}

type scanReply struct {
	KVs  []KV
	More bool
	Err  *wireErr
}

// scanReply field numbers.
const (
	fsrKVs = iota + 1 // each KV as two values: Key, Value
	fsrMore
	fsrErr
)

// MarshalMsg implements message.
func (p *scanReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	if p.KVs != nil {
		w.Array(fsrKVs, 2*len(p.KVs))
		for _, kv := range p.KVs {
			w.B = format.AppendBytes(format.AppendBytes(w.B, kv.Key), kv.Value)
		}
	}
	w.Bool(fsrMore, p.More)
	if p.Err != nil {
		w.Key(fsrErr)
		w.B = p.Err.appendMsg(w.B)
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *scanReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *scanReply, r *format.Reader) {
		*p = scanReply{}
		r.Numbered("scanReply", func(f uint64) {
			switch f {
			case fsrKVs:
				n, kvs := format.List[KV](r)
				if n%2 != 0 {
					r.Fail(fmt.Errorf("%d values of key-value pairs: want pairs", n))
				}
				for i := 0; i+1 < n && r.Err() == nil; i += 2 {
					kvs = append(kvs, KV{Key: r.Bin(), Value: r.Bin()})
				}
				p.KVs = kvs
			case fsrMore:
				p.More = r.Bool()
			case fsrErr:
				p.Err = readErr(r)
			default:
				r.Skip()
			}
		})
	})
}

type statsReq struct{ Queue string }

// statsReq field numbers.
const fstQueue = 1

// MarshalMsg implements message.
func (q *statsReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(fstQueue, q.Queue)
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *statsReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *statsReq, r *format.Reader) {
		*q = statsReq{}
		r.Numbered("statsReq", func(f uint64) {
			switch f {
			case fstQueue:
				q.Queue = r.String()
			default:
				r.Skip()
			}
		})
	})
}

type statsReply struct {
	Stats Stats
	Err   *wireErr
}

// statsReply field numbers: its Stats' fields, then its own.
const (
	fsyPending = iota + 1
	fsyScheduled
	fsyClaimed
	fsyDead
	fsyDone
	fsyOldestPendingAge
	fsyErr
)

// MarshalMsg implements message.
func (p *statsReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	s := &p.Stats
	w.Int(fsyPending, s.Pending)
	w.Int(fsyScheduled, s.Scheduled)
	w.Int(fsyClaimed, s.Claimed)
	w.Int(fsyDead, s.Dead)
	w.Int(fsyDone, s.Done)
	w.Int(fsyOldestPendingAge, int64(s.OldestPendingAge))
	if p.Err != nil {
		w.Key(fsyErr)
		w.B = p.Err.appendMsg(w.B)
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *statsReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *statsReply, r *format.Reader) {
		*p = statsReply{}
		s := &p.Stats
		r.Numbered("statsReply", func(f uint64) {
			switch f {
			case fsyPending:
				s.Pending = r.Int64()
			case fsyScheduled:
				s.Scheduled = r.Int64()
			case fsyClaimed:
				s.Claimed = r.Int64()
			case fsyDead:
				s.Dead = r.Int64()
			case fsyDone:
				s.Done = r.Int64()
			case fsyOldestPendingAge:
				s.OldestPendingAge = time.Duration(r.Int64())
			case fsyErr:
				p.Err = readErr(r)
			default:
				r.Skip()
			}
		})
	})
}

type queuesReply struct {
	Names []string
	Err   *wireErr
}

// queuesReply field numbers.
const (
	fquNames = iota + 1
	fquErr
)

// MarshalMsg implements message.
func (p *queuesReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.Strings(fquNames, p.Names)
	if p.Err != nil {
		w.Key(fquErr)
		w.B = p.Err.appendMsg(w.B)
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *queuesReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *queuesReply, r *format.Reader) {
		*p = queuesReply{}
		r.Numbered("queuesReply", func(f uint64) {
			switch f {
			case fquNames:
				p.Names = readList(r, func(s *string, r *format.Reader) { *s = r.String() })
			case fquErr:
				p.Err = readErr(r)
			default:
				r.Skip()
			}
		})
	})
}

type getJobReq struct{ ID string }

// getJobReq field numbers.
const fgjID = 1

// MarshalMsg implements message.
func (q *getJobReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(fgjID, q.ID)
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *getJobReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *getJobReq, r *format.Reader) {
		*q = getJobReq{}
		r.Numbered("getJobReq", func(f uint64) {
			switch f {
			case fgjID:
				q.ID = r.String()
			default:
				r.Skip()
			}
		})
	})
}

type jobReply struct {
	Job *wireJob
	Err *wireErr
}

// jobReply field numbers.
const (
	fjrJob = iota + 1
	fjrErr
)

// MarshalMsg implements message.
func (p *jobReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	if p.Job != nil {
		w.Key(fjrJob)
		w.B = p.Job.appendMsg(w.B)
	}
	if p.Err != nil {
		w.Key(fjrErr)
		w.B = p.Err.appendMsg(w.B)
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *jobReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *jobReply, r *format.Reader) {
		*p = jobReply{}
		r.Numbered("jobReply", func(f uint64) {
			switch f {
			case fjrJob:
				p.Job = readWireJob(r)
			case fjrErr:
				p.Err = readErr(r)
			default:
				r.Skip()
			}
		})
	})
}

type deadJobsReq struct {
	Queue, After string
	Limit        int
}

// deadJobsReq field numbers.
const (
	fdqQueue = iota + 1
	fdqAfter
	fdqLimit
)

// MarshalMsg implements message.
func (q *deadJobsReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(fdqQueue, q.Queue)
	w.String(fdqAfter, q.After)
	w.Int(fdqLimit, int64(q.Limit))
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *deadJobsReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *deadJobsReq, r *format.Reader) {
		*q = deadJobsReq{}
		r.Numbered("deadJobsReq", func(f uint64) {
			switch f {
			case fdqQueue:
				q.Queue = r.String()
			case fdqAfter:
				q.After = r.String()
			case fdqLimit:
				q.Limit = int(r.Int64())
			default:
				r.Skip()
			}
		})
	})
}

type deadJobsReply struct {
	Jobs []*wireJob
	Next string
	Err  *wireErr
}

// deadJobsReply field numbers.
const (
	fdrJobs = iota + 1
	fdrNext
	fdrErr
)

// MarshalMsg implements message.
func (p *deadJobsReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	if p.Jobs != nil {
		w.Array(fdrJobs, len(p.Jobs))
		for _, j := range p.Jobs {
			w.B = j.appendMsg(w.B)
		}
	}
	w.String(fdrNext, p.Next)
	if p.Err != nil {
		w.Key(fdrErr)
		w.B = p.Err.appendMsg(w.B)
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *deadJobsReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *deadJobsReply, r *format.Reader) {
		*p = deadJobsReply{}
		r.Numbered("deadJobsReply", func(f uint64) {
			switch f {
			case fdrJobs:
				p.Jobs = readList(r, func(j **wireJob, r *format.Reader) { *j = readWireJob(r) })
			case fdrNext:
				p.Next = r.String()
			case fdrErr:
				p.Err = readErr(r)
			default:
				r.Skip()
			}
		})
	})
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

// wireErr field numbers.
const (
	ferKind = iota + 1
	ferMsg
	ferJobID
	ferKey
	ferWhat
	ferSize
	ferMax
)

// appendMsg appends e, or nil for a nil e.
func (e *wireErr) appendMsg(b []byte) []byte {
	if e == nil {
		return format.AppendNil(b)
	}
	w := format.BeginFields(b)
	w.String(ferKind, e.Kind)
	w.String(ferMsg, e.Msg)
	w.String(ferJobID, e.JobID)
	w.Bytes(ferKey, e.Key)
	w.String(ferWhat, e.What)
	w.Int(ferSize, int64(e.Size))
	w.Int(ferMax, int64(e.Max))
	return w.End()
}

// readErr reads a wireErr, or nil.
func readErr(r *format.Reader) *wireErr {
	if r.Nil() {
		return nil
	}
	e := new(wireErr)
	r.Numbered("wireErr", func(f uint64) {
		switch f {
		case ferKind:
			e.Kind = r.String()
		case ferMsg:
			e.Msg = r.String()
		case ferJobID:
			e.JobID = r.String()
		case ferKey:
			e.Key = r.Bin()
		case ferWhat:
			e.What = r.String()
		case ferSize:
			e.Size = int(r.Int64())
		case ferMax:
			e.Max = int(r.Int64())
		default:
			r.Skip()
		}
	})
	return e
}

// readList reads an array, each value with read; nil stays nil. The slice
// grows as its values are read (see format.List).
func readList[T any](r *format.Reader, read func(*T, *format.Reader)) []T {
	n, s := format.List[T](r)
	for i := 0; i < n && r.Err() == nil; i++ {
		s = append(s, *new(T))
		read(&s[i], r)
	}
	return s
}

// readCount reads a count: an integer in [0, MaxInt32].
func readCount(r *format.Reader) int {
	v := r.Int32()
	if v < 0 {
		r.Fail(fmt.Errorf("a count of %d", v))
		return 0
	}
	return int(v)
}

// timeNano is t in unix nanoseconds, 0 for the zero time (see unixNano).
func timeNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
