package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/cluster"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/format"
)

// The messages of cluster calls, each with its field numbers and codec:
// here what they share (the method list, queue settings, jobs, claim
// references, errors), and each method's own messages in
// cluster_messages_commit.go (Commit), cluster_messages_claims.go (Claim,
// Renew, Events) and cluster_messages_reads.go (the rest).
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
	rpcWatch       = "Watch"       // watchReq -> watchReply
	rpcLimits      = "Limits"      // noArgs -> limitsReply
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
	_ message = (*limitsReply)(nil)
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
	"invalid-option": ErrInvalidOption, "invalid-limit": ErrInvalidLimit,
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
			"empty-key", "invalid-option", "invalid-limit"} {
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
