package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/stepwell/stepwell/internal/format"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The pipe: a client's calls of the methods named in Config.Pipe go over
// one long-lived bidirectional stream (pipeMethod) instead of a unary
// call each. A unary call costs both sides a new HTTP/2 stream, its
// headers and trailers, their encoding and parsing, and the call's
// authentication; on the pipe, a call is one message each way, and the
// stream is authenticated once, when it opens (tap and authStream, as any
// call), for the writer's epoch. Each reply names that epoch again, and
// the client checks it (as a unary call's reply header): a member never
// acts on another epoch's answer.
//
// Calls on the pipe are concurrent: the writer serves each message as it
// arrives (pipeServeWorkers goroutines per pipe, more for a burst) and
// replies in any order, each reply with its call's sequence number. A
// broken pipe fails every call on it as a broken connection fails a unary
// call (the call may or may not have been done); the next call opens a
// new pipe. A writer that stops gracefully ends its pipes once the calls
// on them are answered, and answers any that arrive after with
// codes.Unavailable, having done nothing.
const pipeMethod = "Pipe"

// pipeServeWorkers is how many goroutines serve a pipe's calls: a call
// that finds them all busy gets one of its own (see NumStreamWorkers in
// NewServer: long-lived goroutines, whose stacks have grown already).
const pipeServeWorkers = 2

// pipeReq is a call on the pipe: its sequence number and method, then the
// request message itself (not nested: it follows the header's map).
type pipeReq struct {
	Seq    uint64
	Method string
	Req    Message // to encode
	body   []byte  // decoded: the request's bytes
}

// pipeReq field numbers.
const (
	fpSeq = iota + 1
	fpMethod
)

// MarshalMsg implements Message.
func (p *pipeReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.Uint(fpSeq, p.Seq)
	w.String(fpMethod, p.Method)
	return p.Req.MarshalMsg(w.End())
}

// UnmarshalMsg implements Message: it keeps the request's bytes, a slice
// of b, and returns no rest.
func (p *pipeReq) UnmarshalMsg(b []byte) ([]byte, error) {
	r := format.NewReader(b)
	r.Numbered("pipeReq", func(f uint64) {
		switch f {
		case fpSeq:
			p.Seq = r.Uint64()
		case fpMethod:
			p.Method = r.String()
		default:
			r.Skip()
		}
	})
	p.body = r.Rest()
	return nil, r.Err()
}

// pipeReply answers a pipeReq: its sequence number, the writer's epoch,
// the error (a status) or the reply message, which follows the header.
type pipeReply struct {
	Seq   uint64
	Epoch uint64
	Code  uint32 // a codes.Code; OK: Reply follows
	Msg   string
	Reply Message // to encode
	body  []byte  // decoded: the reply's bytes
}

// pipeReply field numbers.
const (
	fprSeq = iota + 1
	fprEpoch
	fprCode
	fprMsg
)

// MarshalMsg implements Message.
func (p *pipeReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.Uint(fprSeq, p.Seq)
	w.Uint(fprEpoch, p.Epoch)
	w.Uint(fprCode, uint64(p.Code))
	w.String(fprMsg, p.Msg)
	b = w.End()
	if p.Code != uint32(codes.OK) {
		return b, nil
	}
	return p.Reply.MarshalMsg(b)
}

// UnmarshalMsg implements Message: it keeps the reply's bytes, a slice of
// b, and returns no rest.
func (p *pipeReply) UnmarshalMsg(b []byte) ([]byte, error) {
	r := format.NewReader(b)
	r.Numbered("pipeReply", func(f uint64) {
		switch f {
		case fprSeq:
			p.Seq = r.Uint64()
		case fprEpoch:
			p.Epoch = r.Uint64()
		case fprCode:
			p.Code = r.Uint32()
		case fprMsg:
			p.Msg = r.String()
		default:
			r.Skip()
		}
	})
	p.body = r.Rest()
	return nil, r.Err()
}

// servePipe serves one pipe: its calls, each on a worker, until the
// client closes it, it breaks, or the server stops.
func (s *Server) servePipe(methods map[string]Handler) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		ctx := ss.Context()
		var (
			smu     sync.Mutex     // serializes SendMsg
			running sync.WaitGroup // calls being served
			work    = make(chan *pipeReq)
		)
		serve := func(req *pipeReq) {
			defer running.Done()
			rep := &pipeReply{Seq: req.Seq, Epoch: s.cfg.Epoch}
			var reply Message
			var err error
			if h := methods[req.Method]; h == nil {
				err = status.Errorf(codes.Unimplemented, "cluster: no method %q", req.Method)
			} else {
				reply, err = h(ctx, func(m Message) error { return Decode(req.body, m) })
			}
			if err != nil {
				st := status.Convert(err)
				rep.Code, rep.Msg = uint32(st.Code()), st.Message()
				if rep.Code == uint32(codes.OK) {
					rep.Code = uint32(codes.Unknown)
				}
			} else {
				rep.Reply = reply
			}
			smu.Lock()
			err = ss.SendMsg(rep)
			smu.Unlock()
			_ = err // the pipe broke: the client fails the call
		}
		for range pipeServeWorkers {
			go func() {
				for req := range work {
					serve(req)
				}
			}()
		}
		// The receiver hands each call to a worker itself (one hand-off a
		// call, as a unary call's). mu orders its dispatches with the
		// end of the pipe: none after stopped (refused instead) or ended.
		var (
			mu      sync.Mutex
			stopped bool // graceful stop: calls are refused
			ended   bool // the handler returns: nothing more is sent
		)
		recvErr := make(chan error, 1)
		go func() {
			for {
				req := new(pipeReq)
				if err := ss.RecvMsg(req); err != nil {
					recvErr <- err
					return
				}
				mu.Lock()
				switch {
				case ended:
					mu.Unlock()
					return
				case stopped:
					// Refused, having done nothing: the writer is stopping.
					rep := &pipeReply{Seq: req.Seq, Epoch: s.cfg.Epoch, Code: uint32(codes.Unavailable), Msg: "cluster: the writer is stopping"}
					smu.Lock()
					_ = ss.SendMsg(rep)
					smu.Unlock()
					mu.Unlock()
					continue
				}
				running.Add(1)
				mu.Unlock()
				select {
				case work <- req:
				default:
					go serve(req)
				}
			}
		}()
		end := func() {
			mu.Lock()
			stopped = true
			mu.Unlock()
			running.Wait() // every reply sent before the stream ends
			mu.Lock()
			ended = true
			mu.Unlock()
			close(work)
		}
		select {
		case err := <-recvErr:
			end()
			if errors.Is(err, io.EOF) {
				return nil // the client closed the pipe
			}
			return err
		case <-s.stopping:
			// Graceful stop: the calls on their way are answered, any
			// that arrive meanwhile are refused, then the pipe ends.
			end()
			return status.Error(codes.Unavailable, "cluster: the writer is stopping")
		}
	}
}

// pipe is a client's open pipe.
type pipe struct {
	stream grpc.ClientStream
	cancel context.CancelFunc

	smu sync.Mutex // serializes SendMsg

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]*pipeCall // guarded by mu
	err     error                // why the pipe broke; guarded by mu
}

// pipeCall is a call waiting for its reply on a pipe.
type pipeCall struct {
	reply Message
	done  chan error // buffered: the reply's outcome
}

// openPipe opens a pipe and checks that the writer answers for the
// client's epoch.
func (c *Client) openPipe(ctx context.Context) (*pipe, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // bounds the open only
	desc := &grpc.StreamDesc{StreamName: pipeMethod, ServerStreams: true, ClientStreams: true}
	stream, err := c.conn.NewStream(sctx, desc, "/"+ServiceName+"/"+pipeMethod)
	if err == nil {
		var hdr metadata.MD
		hdr, err = stream.Header()
		switch {
		case err == nil && len(hdr) == 0:
			// A refused (or unknown) stream ends with its status and no
			// header: RecvMsg returns that status.
			if err = stream.RecvMsg(&pipeReply{}); err == nil {
				err = c.checkEpoch(hdr)
			}
		case err == nil:
			err = c.checkEpoch(hdr)
		}
	}
	if !stop() || err != nil {
		cancel()
		if err == nil {
			err = ctx.Err()
		}
		if s, ok := status.FromError(err); ok && s.Code() == codes.Unimplemented {
			return nil, fmt.Errorf("%w: the writer serves no pipe (%v)", ErrWireVersion, err)
		}
		return nil, mapErr(err)
	}
	p := &pipe{stream: stream, cancel: cancel, pending: map[uint64]*pipeCall{}}
	go c.readPipe(p)
	return p, nil
}

// readPipe delivers a pipe's replies to their calls until it breaks.
func (c *Client) readPipe(p *pipe) {
	for {
		var rep pipeReply
		err := p.stream.RecvMsg(&rep)
		if err == nil && strconv.FormatUint(rep.Epoch, 10) != c.epoch {
			// Not a refusal (ErrStaleEpoch says nothing was done): the
			// calls on the pipe reached a writer, which may have done
			// them, so their outcome is unknown, as when a pipe breaks.
			err = status.Errorf(codes.Unavailable, "cluster: a reply on the pipe came from epoch %d, not %s", rep.Epoch, c.epoch)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "cluster: the writer ended the pipe")
			}
			c.breakPipe(p, mapErr(err))
			return
		}
		p.mu.Lock()
		call := p.pending[rep.Seq]
		delete(p.pending, rep.Seq)
		p.mu.Unlock()
		if call == nil {
			continue // its caller gave up
		}
		switch {
		case rep.Code != uint32(codes.OK):
			call.done <- mapErr(status.Error(codes.Code(rep.Code), rep.Msg))
		default:
			call.done <- Decode(rep.body, call.reply)
		}
	}
}

// breakPipe fails every call on p with err and forgets p: the next call
// opens a new pipe.
func (c *Client) breakPipe(p *pipe, err error) {
	p.cancel()
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	calls := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, call := range calls {
		call.done <- err
	}
	c.pmu.Lock()
	if c.pipe == p {
		c.pipe = nil
	}
	c.pmu.Unlock()
}

// callPipe makes a call on the pipe, opening it first if none is open.
func (c *Client) callPipe(ctx context.Context, method string, req, reply Message) error {
	c.pmu.Lock()
	p := c.pipe
	if p == nil {
		var err error
		if p, err = c.openPipe(ctx); err != nil {
			c.pmu.Unlock()
			return err
		}
		c.pipe = p
	}
	c.pmu.Unlock()

	call := &pipeCall{reply: reply, done: make(chan error, 1)}
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return err
	}
	p.seq++
	seq := p.seq
	p.pending[seq] = call
	p.mu.Unlock()

	p.smu.Lock()
	err := p.stream.SendMsg(&pipeReq{Seq: seq, Method: method, Req: req})
	p.smu.Unlock()
	if err != nil {
		if errors.Is(err, io.EOF) {
			// The pipe broke: readPipe fails the call with the reason.
			return <-call.done
		}
		// Not sent (the message could not be encoded, or is too large).
		p.mu.Lock()
		_, mine := p.pending[seq]
		delete(p.pending, seq)
		p.mu.Unlock()
		if !mine {
			return <-call.done
		}
		return mapErr(err)
	}
	select {
	case err := <-call.done:
		return err
	case <-ctx.Done():
		p.mu.Lock()
		_, mine := p.pending[seq]
		delete(p.pending, seq)
		p.mu.Unlock()
		if !mine {
			// Its reply is being delivered (or the pipe broke): wait for
			// it, so that nothing writes reply after this returns.
			<-call.done
		}
		return status.FromContextError(ctx.Err()).Err()
	}
}
