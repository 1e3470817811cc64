package queue

import (
	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/handoff"
)

// The messages of the Commit method (rpcCommit): a member's batch of
// transactions, with the claims riding it, and the writer's reply, each
// with its field numbers and codec (see cluster_messages.go). These are
// the hot messages: every transaction of a member crosses in them.

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

// read reads an op; names, if not nil, gives the strings that repeat from
// op to op (queue names) once each.
func (op *txnOp) read(r *format.Reader, names *nameCache) {
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
			op.Queue = names.string(r)
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
			op.DeadNotify = names.string(r)
		case fopClaim:
			op.Claim = r.Bool()
		case fopDispatch:
			op.Dispatch = r.Bool()
		default:
			r.Skip()
		}
	})
}

// nameCache holds the last few queue names a call's decode read: most of
// a call's ops name one or two queues (a step queue, its dead-letter
// queue), whose strings are then made once a call, not once an op.
type nameCache struct {
	s [4]string
	n int // the next slot to fill
}

// string reads a string, one of c's if it is there. A nil c reads it.
func (c *nameCache) string(r *format.Reader) string {
	if c == nil {
		return r.String()
	}
	b := r.StringBytes()
	for i := range c.s {
		if c.s[i] == string(b) {
			return c.s[i]
		}
	}
	v := string(b)
	c.s[c.n%len(c.s)] = v
	c.n++
	return v
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
	// claims for the member after the transactions (a refill, IfTxn: in
	// its transaction), before it waits for their WAL write (which the
	// claims usually share), without waiting for a job.
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
			var names nameCache
			readOp := func(op *txnOp, r *format.Reader) { op.read(r, &names) }
			c.Txns = readList(&r, func(ops *[]txnOp, r *format.Reader) { *ops = readList(r, readOp) })
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

// DecodesCopies implements cluster.Copier: UnmarshalMsg copies every byte
// it keeps (format.NewCopyingReader, strings).
func (*commitReply) DecodesCopies() {}

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
	// Claimed is the job if it was claimed at its enqueue, without what
	// the member has (JobID above, and the enqueue's queue, payload,
	// headers, priority and dedup key), which it fills in.
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
