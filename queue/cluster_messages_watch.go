package queue

import (
	"time"

	"github.com/stepwell/stepwell/internal/format"
)

// The messages of Watch (watch.go): a member's long-poll for changes of
// the keys it watches.

var (
	_ message = (*watchReq)(nil)
	_ message = (*watchReply)(nil)
)

// watchReq asks the writer to answer once one of Keys changed: its value
// is not the one whose sum the member sent (Sums: len(watchSum) bytes per
// key, in order), or a commit wrote it; or after Wait with none.
type watchReq struct {
	Keys []string
	Sums []byte
	Wait time.Duration
}

// watchReq field numbers.
const (
	fwqKeys = iota + 1
	fwqSums
	fwqWait
)

// MarshalMsg implements message.
func (q *watchReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.Strings(fwqKeys, q.Keys)
	w.Bytes(fwqSums, q.Sums)
	w.Int(fwqWait, int64(q.Wait))
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (q *watchReq) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeRequest(b, q, func(q *watchReq, r *format.Reader) {
		*q = watchReq{}
		r.Numbered("watchReq", func(f uint64) {
			switch f {
			case fwqKeys:
				q.Keys = readList(r, func(k *string, r *format.Reader) { *k = r.String() })
			case fwqSums:
				q.Sums = r.Bin()
			case fwqWait:
				q.Wait = time.Duration(r.Int64())
			default:
				r.Skip()
			}
		})
	})
}

// watchReply lists the watched keys that changed (none: the wait ended).
type watchReply struct {
	Changed []string
}

// watchReply field numbers.
const (
	fwrChanged = iota + 1
)

// MarshalMsg implements message.
func (p *watchReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.Strings(fwrChanged, p.Changed)
	return w.End(), nil
}

// UnmarshalMsg implements message.
func (p *watchReply) UnmarshalMsg(b []byte) ([]byte, error) {
	return decodeReply(b, p, func(p *watchReply, r *format.Reader) {
		*p = watchReply{}
		r.Numbered("watchReply", func(f uint64) {
			switch f {
			case fwrChanged:
				p.Changed = readList(r, func(k *string, r *format.Reader) { *k = r.String() })
			default:
				r.Skip()
			}
		})
	})
}
