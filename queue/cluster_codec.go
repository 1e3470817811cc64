package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"
)

// The hot messages of cluster calls (a commit call and its reply, a claim's
// reply) and the types in them encode themselves, slice based (the
// primitives of github.com/tinylib/msgp): each struct is a msgpack map
// keyed by small field numbers, where the reflective codec writes every
// field name, looks each up again to decode it, and reads through an
// io.Reader. A field at its zero value is left out. A decoder skips the
// numbers it does not know, so a field added on one side is still ignored
// by the other; a number, once used, keeps its meaning.
//
// The writer's decoder of a commit call keeps slices of the message for
// byte fields (the cluster codec gives it a buffer of its own, see
// cluster.Decode), each capped to its length, so that appending to one
// cannot write over the next; a member's decoders of replies copy them
// (see fieldReader.own).
//
// A busy member's commit call (BenchmarkClusterWire: 17 settlements) is
// 16 KiB, encoded in 12 us and decoded in 17-22 us with 208 allocations;
// through the reflective codec's reader, with every field written, it was
// 18 KiB, 21 us and 54-63 us with 399.

// txnOp field numbers.
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
	w := beginFields(b)
	w.uint(fopKind, uint64(op.Kind))
	w.bytes(fopKey, op.Key)
	w.bytes(fopValue, op.Value)
	w.bytes(fopExpect, op.Expect)
	w.bool(fopAbsent, op.Absent)
	w.string(fopQueue, op.Queue)
	w.string(fopJobID, op.JobID)
	w.uint(fopToken, op.Token)
	w.int(fopPriority, int64(op.Priority))
	w.int(fopRunAt, op.RunAt)
	w.uint(fopMaxAttempts, uint64(op.MaxAttempts))
	w.headers(fopHeaders, op.Headers)
	w.string(fopDedupKey, op.DedupKey)
	w.string(fopError, op.Error)
	w.uint(fopStates, uint64(op.States))
	w.string(fopDeadNotify, op.DeadNotify)
	w.bool(fopClaim, op.Claim)
	w.bool(fopDispatch, op.Dispatch)
	return w.end()
}

func (op *txnOp) read(r *fieldReader) {
	*op = txnOp{}
	r.fields("txnOp", func(f uint64) {
		switch f {
		case fopKind:
			op.Kind = uint8(r.uintN(math.MaxUint8))
		case fopKey:
			op.Key = r.bytes()
		case fopValue:
			op.Value = r.bytes()
		case fopExpect:
			op.Expect = r.bytes()
		case fopAbsent:
			op.Absent = r.bool()
		case fopQueue:
			op.Queue = r.string()
		case fopJobID:
			op.JobID = r.string()
		case fopToken:
			op.Token = r.uint()
		case fopPriority:
			op.Priority = int32(r.intN(math.MinInt32, math.MaxInt32))
		case fopRunAt:
			op.RunAt = r.int()
		case fopMaxAttempts:
			op.MaxAttempts = uint32(r.uintN(math.MaxUint32))
		case fopHeaders:
			op.Headers = r.headers()
		case fopDedupKey:
			op.DedupKey = r.string()
		case fopError:
			op.Error = r.string()
		case fopStates:
			op.States = uint32(r.uintN(math.MaxUint32))
		case fopDeadNotify:
			op.DeadNotify = r.string()
		case fopClaim:
			op.Claim = r.bool()
		case fopDispatch:
			op.Dispatch = r.bool()
		default:
			r.skip()
		}
	})
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
	fjHistory
	fjToken
	fjPrefetched
	fjHasJob // the wireJob has a Job (its fields may all be zero)
)

// appendMsg appends w, or nil for a nil w.
func (w *wireJob) appendMsg(b []byte) []byte {
	if w == nil {
		return msgp.AppendNil(b)
	}
	fw := beginFields(b)
	if j := w.Job; j != nil {
		fw.bool(fjHasJob, true)
		fw.string(fjID, j.ID)
		fw.string(fjQueue, j.Queue)
		fw.bytes(fjPayload, j.Payload)
		fw.headers(fjHeaders, j.Headers)
		fw.int(fjPriority, int64(j.Priority))
		fw.string(fjDedupKey, j.DedupKey)
		fw.uint(fjState, uint64(j.State))
		fw.uint(fjAttempt, uint64(j.Attempt))
		fw.uint(fjMaxAttempts, uint64(j.MaxAttempts))
		fw.time(fjEnqueuedAt, j.EnqueuedAt)
		fw.time(fjRunAt, j.RunAt)
		fw.bool(fjCancelRequested, j.CancelRequested)
		fw.history(fjHistory, j.History)
	}
	fw.uint(fjToken, w.Token)
	fw.bytes(fjPrefetched, w.Prefetched)
	return fw.end()
}

// readWireJob reads a wireJob, or nil.
func readWireJob(r *fieldReader) *wireJob {
	if r.null() {
		return nil
	}
	w := new(wireJob)
	j := new(Job)
	r.fields("wireJob", func(f uint64) {
		switch f {
		case fjHasJob:
			if r.bool() {
				w.Job = j
			}
		case fjID:
			j.ID = r.string()
		case fjQueue:
			j.Queue = r.string()
		case fjPayload:
			j.Payload = r.bytes()
		case fjHeaders:
			j.Headers = r.headers()
		case fjPriority:
			j.Priority = int32(r.intN(math.MinInt32, math.MaxInt32))
		case fjDedupKey:
			j.DedupKey = r.string()
		case fjState:
			j.State = State(r.uintN(math.MaxUint8))
		case fjAttempt:
			j.Attempt = uint32(r.uintN(math.MaxUint32))
		case fjMaxAttempts:
			j.MaxAttempts = uint32(r.uintN(math.MaxUint32))
		case fjEnqueuedAt:
			j.EnqueuedAt = unixNano(r.int())
		case fjRunAt:
			j.RunAt = unixNano(r.int())
		case fjCancelRequested:
			j.CancelRequested = r.bool()
		case fjHistory:
			n, ok := r.arrayLen()
			if n%2 != 0 {
				r.keep(fmt.Errorf("a history of %d values: want pairs", n))
			}
			if ok {
				j.History = make([]Attempt, 0, min(n/2, maxTrustedLen))
			}
			for i := 0; i+1 < n && r.err == nil; i += 2 {
				j.History = append(j.History, Attempt{At: unixNano(r.int()), Error: r.string()})
			}
		case fjToken:
			w.Token = r.uint()
		case fjPrefetched:
			w.Prefetched = r.bytes()
		default:
			r.skip()
		}
	})
	return w
}

// EncodeMsgpack implements msgpack.CustomEncoder, for the replies that the
// reflective codec encodes (a job read, dead letters).
func (w *wireJob) EncodeMsgpack(e *msgpack.Encoder) error {
	return msgpack.RawMessage(w.appendMsg(nil)).EncodeMsgpack(e)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (w *wireJob) DecodeMsgpack(d *msgpack.Decoder) error {
	raw, err := d.DecodeRaw()
	if err != nil {
		return err
	}
	r := fieldReader{b: raw}
	if got := readWireJob(&r); got != nil {
		*w = *got
	}
	return r.done()
}

// wireEnqueued field numbers.
const (
	feJobID = iota + 1
	feDuplicate
	feClaimed
)

func (e *wireEnqueued) appendMsg(b []byte) []byte {
	w := beginFields(b)
	w.string(feJobID, e.JobID)
	w.bool(feDuplicate, e.Duplicate)
	if e.Claimed != nil {
		w.key(feClaimed)
		w.b = e.Claimed.appendMsg(w.b)
	}
	return w.end()
}

func (e *wireEnqueued) read(r *fieldReader) {
	*e = wireEnqueued{}
	r.fields("wireEnqueued", func(f uint64) {
		switch f {
		case feJobID:
			e.JobID = r.string()
		case feDuplicate:
			e.Duplicate = r.bool()
		case feClaimed:
			e.Claimed = readWireJob(r)
		default:
			r.skip()
		}
	})
}

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

// appendErr appends e, or nil for a nil e.
func appendErr(b []byte, e *wireErr) []byte {
	if e == nil {
		return msgp.AppendNil(b)
	}
	w := beginFields(b)
	w.string(ferKind, e.Kind)
	w.string(ferMsg, e.Msg)
	w.string(ferJobID, e.JobID)
	w.bytes(ferKey, e.Key)
	w.string(ferWhat, e.What)
	w.int(ferSize, int64(e.Size))
	w.int(ferMax, int64(e.Max))
	return w.end()
}

// readErr reads a wireErr, or nil.
func readErr(r *fieldReader) *wireErr {
	if r.null() {
		return nil
	}
	e := new(wireErr)
	r.fields("wireErr", func(f uint64) {
		switch f {
		case ferKind:
			e.Kind = r.string()
		case ferMsg:
			e.Msg = r.string()
		case ferJobID:
			e.JobID = r.string()
		case ferKey:
			e.Key = r.bytes()
		case ferWhat:
			e.What = r.string()
		case ferSize:
			e.Size = int(r.int())
		case ferMax:
			e.Max = int(r.int())
		default:
			r.skip()
		}
	})
	return e
}

// wireTxnResult field numbers.
const (
	ftrEnqueued = iota + 1
	ftrCancelled
	ftrErr
)

func (t *wireTxnResult) appendMsg(b []byte) []byte {
	w := beginFields(b)
	if t.Enqueued != nil {
		w.array(ftrEnqueued, len(t.Enqueued))
		for i := range t.Enqueued {
			w.b = t.Enqueued[i].appendMsg(w.b)
		}
	}
	if t.Cancelled != nil {
		w.array(ftrCancelled, len(t.Cancelled))
		for _, c := range t.Cancelled {
			w.b = msgp.AppendUint8(w.b, uint8(c))
		}
	}
	if t.Err != nil {
		w.key(ftrErr)
		w.b = appendErr(w.b, t.Err)
	}
	return w.end()
}

func (t *wireTxnResult) read(r *fieldReader) {
	*t = wireTxnResult{}
	r.fields("wireTxnResult", func(f uint64) {
		switch f {
		case ftrEnqueued:
			t.Enqueued = readSlice(r, (*wireEnqueued).read)
		case ftrCancelled:
			t.Cancelled = readSlice(r, func(c *CancelOutcome, r *fieldReader) { *c = CancelOutcome(r.uintN(math.MaxUint8)) })
		case ftrErr:
			t.Err = readErr(r)
		default:
			r.skip()
		}
	})
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
	w := beginFields(b)
	w.string(fcwQueue, c.Queue)
	w.int(fcwN, int64(c.N))
	w.string(fcwPrefetchHeader, c.Prefetch.Header)
	w.string(fcwPrefetchPrefix, c.Prefetch.Prefix)
	w.int(fcwIfTxn, int64(c.IfTxn))
	return w.end()
}

func (c *claimWant) read(r *fieldReader) {
	*c = claimWant{}
	r.fields("claimWant", func(f uint64) {
		switch f {
		case fcwQueue:
			c.Queue = r.string()
		case fcwN:
			c.N = int(r.intN(0, math.MaxInt32))
		case fcwPrefetchHeader:
			c.Prefetch.Header = r.string()
		case fcwPrefetchPrefix:
			c.Prefetch.Prefix = r.string()
		case fcwIfTxn:
			c.IfTxn = int(r.intN(0, math.MaxInt32))
		default:
			r.skip()
		}
	})
}

// claimReply field numbers.
const (
	fclJobs = iota + 1
	fclErr
)

func (c *claimReply) appendMsg(b []byte) []byte {
	w := beginFields(b)
	if c.Jobs != nil {
		w.array(fclJobs, len(c.Jobs))
		for _, j := range c.Jobs {
			w.b = j.appendMsg(w.b)
		}
	}
	if c.Err != nil {
		w.key(fclErr)
		w.b = appendErr(w.b, c.Err)
	}
	return w.end()
}

func (c *claimReply) read(r *fieldReader) {
	*c = claimReply{}
	r.fields("claimReply", func(f uint64) {
		switch f {
		case fclJobs:
			c.Jobs = readSlice(r, func(j **wireJob, r *fieldReader) { *j = readWireJob(r) })
		case fclErr:
			c.Err = readErr(r)
		default:
			r.skip()
		}
	})
}

// MarshalMsg implements msgp.Marshaler (see cluster.Codec).
func (c *claimReply) MarshalMsg(b []byte) ([]byte, error) { return c.appendMsg(b), nil }

// UnmarshalMsg implements msgp.Unmarshaler.
func (c *claimReply) UnmarshalMsg(b []byte) ([]byte, error) {
	r := fieldReader{b: b, own: true}
	c.read(&r)
	return r.b, r.err
}

// wireOpts field numbers.
const (
	fwoLease = iota + 1
	fwoMaxAttempts
	fwoBackoffBase
	fwoBackoffMax
	fwoQueues // encoded by the reflective codec: rare, and user types
)

func (o *wireOpts) appendMsg(b []byte) ([]byte, error) {
	w := beginFields(b)
	w.int(fwoLease, int64(o.Lease))
	w.uint(fwoMaxAttempts, uint64(o.MaxAttempts))
	w.int(fwoBackoffBase, int64(o.BackoffBase))
	w.int(fwoBackoffMax, int64(o.BackoffMax))
	if o.Queues != nil {
		q, err := msgpack.Marshal(o.Queues)
		if err != nil {
			return b, fmt.Errorf("queue configs: %w", err)
		}
		w.key(fwoQueues)
		w.b = append(w.b, q...)
	}
	return w.end(), nil
}

func (o *wireOpts) read(r *fieldReader) {
	*o = wireOpts{}
	r.fields("wireOpts", func(f uint64) {
		switch f {
		case fwoLease:
			o.Lease = time.Duration(r.int())
		case fwoMaxAttempts:
			o.MaxAttempts = uint32(r.uintN(math.MaxUint32))
		case fwoBackoffBase:
			o.BackoffBase = time.Duration(r.int())
		case fwoBackoffMax:
			o.BackoffMax = time.Duration(r.int())
		case fwoQueues:
			if raw := r.raw(); raw != nil {
				r.keep(msgpack.Unmarshal(raw, &o.Queues))
			}
		default:
			r.skip()
		}
	})
}

// commitReq field numbers.
const (
	fcMember = iota + 1
	fcOpts
	fcTxns
	fcDispatch
	fcClaims
)

// MarshalMsg implements msgp.Marshaler (see cluster.Codec).
func (c *commitReq) MarshalMsg(b []byte) ([]byte, error) {
	w := beginFields(b)
	w.string(fcMember, c.Member)
	w.key(fcOpts)
	var err error
	if w.b, err = c.Opts.appendMsg(w.b); err != nil {
		return b, err
	}
	if c.Txns != nil {
		w.array(fcTxns, len(c.Txns))
		for _, ops := range c.Txns {
			if ops == nil {
				w.b = msgp.AppendNil(w.b)
				continue
			}
			w.b = msgp.AppendArrayHeader(w.b, uint32(len(ops)))
			for i := range ops {
				w.b = ops[i].appendMsg(w.b)
			}
		}
	}
	w.bool(fcDispatch, c.Dispatch)
	if c.Claims != nil {
		w.array(fcClaims, len(c.Claims))
		for i := range c.Claims {
			w.b = c.Claims[i].appendMsg(w.b)
		}
	}
	return w.end(), nil
}

// UnmarshalMsg implements msgp.Unmarshaler.
func (c *commitReq) UnmarshalMsg(b []byte) ([]byte, error) {
	*c = commitReq{}
	r := fieldReader{b: b}
	r.fields("commitReq", func(f uint64) {
		switch f {
		case fcMember:
			c.Member = r.string()
		case fcOpts:
			c.Opts.read(&r)
		case fcTxns:
			c.Txns = readSlice(&r, func(ops *[]txnOp, r *fieldReader) { *ops = readSlice(r, (*txnOp).read) })
		case fcDispatch:
			c.Dispatch = r.bool()
		case fcClaims:
			c.Claims = readSlice(&r, (*claimWant).read)
		default:
			r.skip()
		}
	})
	return r.b, r.err
}

// commitReply field numbers.
const (
	fcrResults = iota + 1
	fcrClaims
)

// MarshalMsg implements msgp.Marshaler (see cluster.Codec).
func (c *commitReply) MarshalMsg(b []byte) ([]byte, error) {
	w := beginFields(b)
	if c.Results != nil {
		w.array(fcrResults, len(c.Results))
		for i := range c.Results {
			w.b = c.Results[i].appendMsg(w.b)
		}
	}
	if c.Claims != nil {
		w.array(fcrClaims, len(c.Claims))
		for i := range c.Claims {
			w.b = c.Claims[i].appendMsg(w.b)
		}
	}
	return w.end(), nil
}

// UnmarshalMsg implements msgp.Unmarshaler.
func (c *commitReply) UnmarshalMsg(b []byte) ([]byte, error) {
	*c = commitReply{}
	r := fieldReader{b: b, own: true}
	r.fields("commitReply", func(f uint64) {
		switch f {
		case fcrResults:
			c.Results = readSlice(&r, (*wireTxnResult).read)
		case fcrClaims:
			c.Claims = readSlice(&r, (*claimReply).read)
		default:
			r.skip()
		}
	})
	return r.b, r.err
}

// fieldWriter appends a struct as a map of field numbers, leaving out the
// fields at their zero value. The map's header has room for any count
// (map16) and end writes the count into it.
type fieldWriter struct {
	b  []byte
	at int // where the header is
	n  int // fields written
}

const map16 = 0xde

func beginFields(b []byte) fieldWriter {
	return fieldWriter{b: append(b, map16, 0, 0), at: len(b)}
}

// end writes the field count into the header and returns the bytes.
func (w *fieldWriter) end() []byte {
	binary.BigEndian.PutUint16(w.b[w.at+1:], uint16(w.n))
	return w.b
}

// key appends a field number; its value comes next.
func (w *fieldWriter) key(num uint8) {
	w.b = msgp.AppendUint8(w.b, num)
	w.n++
}

// array appends a field number and the header of an array of n values.
func (w *fieldWriter) array(num uint8, n int) {
	w.key(num)
	w.b = msgp.AppendArrayHeader(w.b, uint32(n))
}

func (w *fieldWriter) uint(num uint8, v uint64) {
	if v != 0 {
		w.key(num)
		w.b = msgp.AppendUint64(w.b, v)
	}
}

func (w *fieldWriter) int(num uint8, v int64) {
	if v != 0 {
		w.key(num)
		w.b = msgp.AppendInt64(w.b, v)
	}
}

func (w *fieldWriter) bool(num uint8, v bool) {
	if v {
		w.key(num)
		w.b = msgp.AppendBool(w.b, v)
	}
}

// bytes appends v; nil is left out, empty is not.
func (w *fieldWriter) bytes(num uint8, v []byte) {
	if v != nil {
		w.key(num)
		w.b = msgp.AppendBytes(w.b, v)
	}
}

func (w *fieldWriter) string(num uint8, v string) {
	if v != "" {
		w.key(num)
		w.b = msgp.AppendString(w.b, v)
	}
}

// headers appends h; nil is left out, empty is not.
func (w *fieldWriter) headers(num uint8, h map[string]string) {
	if h == nil {
		return
	}
	w.key(num)
	w.b = msgp.AppendMapHeader(w.b, uint32(len(h)))
	for k, v := range h {
		w.b = msgp.AppendString(msgp.AppendString(w.b, k), v)
	}
}

func (w *fieldWriter) time(num uint8, t time.Time) { w.int(num, timeNano(t)) }

// history appends h as its values in pairs; nil is left out.
func (w *fieldWriter) history(num uint8, h []Attempt) {
	if h == nil {
		return
	}
	w.array(num, 2*len(h))
	for _, a := range h {
		w.b = msgp.AppendString(msgp.AppendInt64(w.b, timeNano(a.At)), a.Error)
	}
}

// fieldReader reads a message; the first error sticks, and later reads
// return zero values.
type fieldReader struct {
	b   []byte // what is left to read
	err error
	// own: byte fields are copies, not slices of the message. A member
	// hands a reply's payloads to its workers, and a slice of one would
	// keep the whole reply (up to 128 MiB of payloads) while any of them
	// runs; the writer's engine copies what it keeps of a request.
	own bool
}

// fields reads a map of field numbers, calling field for each, which must
// read the field's value: a nil map leaves the value zero. An error is
// reported as what's.
func (r *fieldReader) fields(what string, field func(num uint64)) {
	if r.err != nil || r.null() {
		return
	}
	n, rest, err := msgp.ReadMapHeaderBytes(r.b)
	r.b = rest
	r.keep(err)
	for i := uint32(0); i < n && r.err == nil; i++ {
		if num := r.uint(); r.err == nil {
			field(num)
		}
	}
	if r.err != nil {
		r.err = fmt.Errorf("%s: %w", what, r.err)
	}
}

// done is the error of reading one whole value from r: what is left over
// is one.
func (r *fieldReader) done() error {
	if r.err == nil && len(r.b) > 0 {
		return fmt.Errorf("%d bytes after the value", len(r.b))
	}
	return r.err
}

func (r *fieldReader) keep(err error) {
	if r.err == nil && err != nil {
		r.err = err
	}
}

// null reads a nil if one comes next.
func (r *fieldReader) null() bool {
	if r.err == nil && msgp.IsNil(r.b) {
		r.b = r.b[1:]
		return true
	}
	return false
}

// read calls f to read the next value unless an error came first.
func read[T any](r *fieldReader, f func([]byte) (T, []byte, error)) T {
	var v T
	if r.err != nil {
		return v
	}
	v, rest, err := f(r.b)
	if err != nil {
		r.err = err
		var zero T
		return zero
	}
	r.b = rest
	return v
}

func (r *fieldReader) uint() uint64 { return read(r, msgp.ReadUint64Bytes) }
func (r *fieldReader) int() int64   { return read(r, msgp.ReadInt64Bytes) }
func (r *fieldReader) bool() bool   { return read(r, msgp.ReadBoolBytes) }

// string reads a string (msgpack str).
func (r *fieldReader) string() string { return read(r, msgp.ReadStringBytes) }

// uintN reads an unsigned integer of at most max.
func (r *fieldReader) uintN(max uint64) uint64 {
	v := r.uint()
	if v > max {
		r.keep(fmt.Errorf("%d is out of range (at most %d)", v, max))
		return 0
	}
	return v
}

// intN reads an integer in [min, max].
func (r *fieldReader) intN(min, max int64) int64 {
	v := r.int()
	if v < min || v > max {
		r.keep(fmt.Errorf("%d is out of range [%d, %d]", v, min, max))
		return 0
	}
	return v
}

// bytes reads a byte slice (msgpack bin, or nil) as a slice of the
// message, capped to its length.
func (r *fieldReader) bytes() []byte {
	if r.null() {
		return nil
	}
	v := read(r, msgp.ReadBytesZC)
	if r.own {
		return bytes.Clone(v)
	}
	return v[:len(v):len(v)]
}

// raw reads any one value and returns its encoding, a slice of the
// message.
func (r *fieldReader) raw() []byte {
	if r.err != nil {
		return nil
	}
	rest, err := msgp.Skip(r.b)
	if err != nil {
		r.err = err
		return nil
	}
	v := r.b[:len(r.b)-len(rest)]
	r.b = rest
	return v
}

func (r *fieldReader) skip() { r.raw() }

// errTooLong: a container header counts more values than the bytes left
// could hold (each takes one at least).
var errTooLong = errors.New("a container longer than its message")

// arrayLen reads an array header, or nil (ok false).
func (r *fieldReader) arrayLen() (n int, ok bool) {
	if r.null() || r.err != nil {
		return 0, false
	}
	sz := read(r, msgp.ReadArrayHeaderBytes)
	if int64(sz) > int64(len(r.b)) {
		r.keep(errTooLong)
		return 0, false
	}
	return int(sz), r.err == nil
}

// readSlice reads an array, each value with f; nil stays nil. The slice
// grows as its values are read: a header's count is not trusted with an
// allocation of its own.
func readSlice[T any](r *fieldReader, f func(*T, *fieldReader)) []T {
	n, ok := r.arrayLen()
	if !ok {
		return nil
	}
	s := make([]T, 0, min(n, maxTrustedLen))
	for i := 0; i < n && r.err == nil; i++ {
		s = append(s, *new(T))
		f(&s[i], r)
	}
	return s
}

// maxTrustedLen is the longest slice a header gets at once.
const maxTrustedLen = 1024

// headers reads a map[string]string, or nil.
func (r *fieldReader) headers() map[string]string {
	if r.null() || r.err != nil {
		return nil
	}
	n := read(r, msgp.ReadMapHeaderBytes)
	if int64(n)*2 > int64(len(r.b)) {
		r.keep(errTooLong)
	}
	if r.err != nil {
		return nil
	}
	h := make(map[string]string, min(n, maxTrustedLen))
	for i := uint32(0); i < n && r.err == nil; i++ {
		k := r.string()
		h[k] = r.string()
	}
	return h
}

// timeNano is t in unix nanoseconds, 0 for the zero time (see unixNano).
func timeNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
