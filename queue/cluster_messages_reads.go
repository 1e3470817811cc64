package queue

import (
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/format"
)

// The messages of reads and inspection (rpcGet, rpcScan, rpcStats,
// rpcQueues, rpcGetJob, rpcDeadJobs, rpcRequeueDead, rpcHealth), each
// with its field numbers and codec (see cluster_messages.go).

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
	fsyLimit     // the encoded Limit (limit.go)
	fsyThrottled // Stats.Throttled
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
	if !s.Limit.IsZero() {
		w.Key(fsyLimit)
		w.B = appendLimit(w.B, s.Limit)
	}
	w.Bool(fsyThrottled, s.Throttled)
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
			case fsyLimit:
				s.Limit = readLimit(r)
			case fsyThrottled:
				s.Throttled = r.Bool()
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

// limitsReply is the reply of rpcLimits: the queues' limits, by name.
type limitsReply struct {
	Names  []string
	Limits []Limit // Limits[i] is the limit of Names[i]
	Err    *wireErr
}

// limitsReply field numbers.
const (
	fliNames = iota + 1
	fliLimits
	fliErr
)

// MarshalMsg implements message.
func (p *limitsReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.Strings(fliNames, p.Names)
	if p.Limits != nil {
		w.Array(fliLimits, len(p.Limits))
		for _, l := range p.Limits {
			w.B = appendLimit(w.B, l)
		}
	}
	if p.Err != nil {
		w.Key(fliErr)
		w.B = p.Err.appendMsg(w.B)
	}
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *limitsReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *limitsReply, r *format.Reader) {
		*p = limitsReply{}
		r.Numbered("limitsReply", func(f uint64) {
			switch f {
			case fliNames:
				p.Names = readList(r, func(s *string, r *format.Reader) { *s = r.String() })
			case fliLimits:
				p.Limits = readList(r, func(l *Limit, r *format.Reader) { *l = readLimit(r) })
			case fliErr:
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
