package queue

import (
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/handoff"
)

// The messages of claims (rpcClaim, rpcRenew, rpcEvents), each with its
// field numbers and codec (see cluster_messages.go). A claim riding a
// commit call is a claimWant (cluster_messages_commit.go).

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

// DecodesCopies implements cluster.Copier: decodeReply copies every byte
// it keeps.
func (*claimReply) DecodesCopies() {}

// UnmarshalMsg implements message.
func (c *claimReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, c, (*claimReply).read)
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
