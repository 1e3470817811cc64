package cluster

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Calls on the pipe, many at once, each get their own reply.
func TestPipeRoundTrip(t *testing.T) {
	cfg := Config{Epoch: 7, Secret: []byte("s3cret")}
	s, calls, _ := serve(t, cfg)
	cfg.Pipe = []string{"Echo"}
	c := dial(t, s.Addr(), cfg)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			var reply echoReply
			text := strconv.Itoa(i)
			if err := c.Call(ctx, "Echo", &echoReq{Text: text, Count: 2}, &reply); err != nil {
				errs <- err
			} else if reply.Text != text+text {
				errs <- errors.New("call " + text + " got " + reply.Text)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if calls.Load() != 64 {
		t.Fatalf("%d calls handled, want 64", calls.Load())
	}
	if c.pipe == nil {
		t.Fatal("no pipe open after piped calls")
	}
}

// The pipe is authenticated as a call is: a wrong secret or another epoch
// is refused before any call on it runs.
func TestPipeRefusedCallsChangeNothing(t *testing.T) {
	cfg := Config{Epoch: 7, Secret: []byte("s3cret")}
	s, calls, _ := serve(t, cfg)
	ctx := ctxT(t)
	var reply echoReply
	err := dial(t, s.Addr(), Config{Epoch: 7, Secret: []byte("guess"), Pipe: []string{"Echo"}}).Call(ctx, "Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("wrong secret: %v, want ErrUnauthenticated", err)
	}
	err = dial(t, s.Addr(), Config{Epoch: 6, Secret: cfg.Secret, Pipe: []string{"Echo"}}).Call(ctx, "Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if !errors.Is(err, ErrStaleEpoch) {
		t.Errorf("stale epoch: %v, want ErrStaleEpoch", err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d refused calls reached the handler", n)
	}
}

// Every reply on the pipe names the writer's epoch, and a reply of another
// epoch is refused, as a unary call's.
func TestPipeReplyOfAnotherEpochIsRefused(t *testing.T) {
	s, _, _ := serve(t, Config{Epoch: 8, Secret: []byte("s3cret")})
	c := dial(t, s.Addr(), Config{Epoch: 8, Secret: []byte("s3cret"), Pipe: []string{"Echo"}})
	var reply echoReply
	if err := c.Call(ctxT(t), "Echo", &echoReq{Text: "x", Count: 1}, &reply); err != nil {
		t.Fatal(err)
	}
	c.epoch = "9" // the pipe is open: the check is the reply's own
	err := c.Call(ctxT(t), "Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if err == nil || errors.Is(err, ErrStaleEpoch) || status.Code(err) != codes.Unavailable {
		// ErrStaleEpoch says nothing was done; this call reached a writer.
		t.Fatalf("reply of epoch 8 on the pipe of a client of epoch 9: %v, want an Unavailable (outcome unknown)", err)
	}
}

// TestPipeStaleReplyLeavesOutcomesUnknown: a reply of another epoch breaks
// the pipe, and the calls pending on it, which the writer may have done
// (here: is doing), fail as a broken pipe's do (outcome unknown), never
// as a refusal (ErrStaleEpoch: nothing done), which a member would retry.
func TestPipeStaleReplyLeavesOutcomesUnknown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s := serveHandlers(t, Config{Epoch: 8, Secret: []byte("s")}, map[string]Handler{
		"Echo": func(ctx context.Context, decode func(Message) error) (Message, error) {
			var req echoReq
			if err := decode(&req); err != nil {
				return nil, err
			}
			if req.Text == "slow" {
				started <- struct{}{}
				<-release
			}
			return &echoReply{Text: req.Text}, nil
		},
	})
	defer close(release)
	c := dial(t, s.Addr(), Config{Epoch: 8, Secret: []byte("s"), Pipe: []string{"Echo"}})
	var r0 echoReply
	if err := c.Call(ctxT(t), "Echo", &echoReq{Text: "open", Count: 1}, &r0); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		var reply echoReply
		slow <- c.Call(ctxT(t), "Echo", &echoReq{Text: "slow", Count: 1}, &reply)
	}()
	<-started // the writer acts on the call
	c.epoch = "9"
	var r1 echoReply
	_ = c.Call(ctxT(t), "Echo", &echoReq{Text: "x", Count: 1}, &r1)
	if err := <-slow; err == nil || errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("a call the writer was doing ended with %v, want outcome unknown (not ErrStaleEpoch)", err)
	}
}

// A handler's error reaches the caller as its status; the pipe stays open.
func TestPipeHandlerError(t *testing.T) {
	s := serveHandlers(t, Config{Epoch: 1, Secret: []byte("s")}, map[string]Handler{
		"Fail": func(context.Context, func(Message) error) (Message, error) {
			return nil, status.Error(codes.InvalidArgument, "no such thing")
		},
	})
	c := dial(t, s.Addr(), Config{Epoch: 1, Secret: []byte("s"), Pipe: []string{"Fail", "Nope"}})
	var reply echoReply
	for range 2 {
		err := c.Call(ctxT(t), "Fail", &echoReq{}, &reply)
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "no such thing" {
			t.Fatalf("a failing handler: %v", err)
		}
	}
	if err := c.Call(ctxT(t), "Nope", &echoReq{}, &reply); status.Code(err) != codes.Unimplemented {
		t.Fatalf("an unknown method: %v", err)
	}
}

// A caller that gives up returns at once; the pipe serves the next call.
func TestPipeCallerGivesUp(t *testing.T) {
	release := make(chan struct{})
	s := serveHandlers(t, Config{Epoch: 1, Secret: []byte("s")}, map[string]Handler{
		"Echo": echoHandler(release),
	})
	c := dial(t, s.Addr(), Config{Epoch: 1, Secret: []byte("s"), Pipe: []string{"Echo"}})
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error)
	go func() {
		var reply echoReply
		done <- c.Call(ctx, "Echo", &echoReq{Text: "slow", Count: 1}, &reply)
	}()
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("a cancelled call: %v, want Canceled", err)
	}
	close(release)
	var reply echoReply
	if err := c.Call(ctxT(t), "Echo", &echoReq{Text: "a", Count: 2}, &reply); err != nil || reply.Text != "aa" {
		t.Fatalf("the next call: %q, %v", reply.Text, err)
	}
}

// A graceful stop answers the calls on their way, then ends the pipe,
// without waiting for its ctx; the next call fails.
func TestPipeGracefulStop(t *testing.T) {
	release := make(chan struct{})
	s := serveHandlers(t, Config{Epoch: 1, Secret: []byte("s")}, map[string]Handler{
		"Echo": echoHandler(release),
	})
	c := dial(t, s.Addr(), Config{Epoch: 1, Secret: []byte("s"), Pipe: []string{"Echo"}})
	ctx := ctxT(t)
	var reply echoReply
	if err := c.Call(ctx, "Echo", &echoReq{Text: "open", Count: 1}, &reply); err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error)
	go func() {
		var reply echoReply
		err := c.Call(ctx, "Echo", &echoReq{Text: "slow", Count: 1}, &reply)
		if err == nil && reply.Text != "slow" {
			err = errors.New("got " + reply.Text)
		}
		inFlight <- err
	}()
	<-started
	stopped := make(chan struct{})
	go func() {
		s.GracefulStop(ctx) // ctx: 30s; the test waits for far less
		close(stopped)
	}()
	close(release)
	if err := <-inFlight; err != nil {
		t.Fatalf("the call in flight at the stop: %v", err)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("GracefulStop waited for the pipe until its ctx ended")
	}
	if err := c.Call(ctx, "Echo", &echoReq{Text: "late", Count: 1}, &reply); err == nil {
		t.Fatal("a call after the stop succeeded")
	}
}

// started is signalled by echoHandler when a slow call (Text "slow")
// reaches it.
var started = make(chan struct{}, 1)

// echoHandler echoes; a call of Text "slow" waits for release first.
func echoHandler(release chan struct{}) Handler {
	return func(ctx context.Context, decode func(Message) error) (Message, error) {
		var req echoReq
		if err := decode(&req); err != nil {
			return nil, err
		}
		if req.Text == "slow" {
			select {
			case started <- struct{}{}:
			default:
			}
			<-release
		}
		return &echoReply{Text: strings.Repeat(req.Text, req.Count)}, nil
	}
}

func serveHandlers(t *testing.T, cfg Config, methods map[string]Handler) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(lis, cfg, methods)
	go s.Serve()
	t.Cleanup(s.Stop)
	return s
}

// Processes of different wire versions refuse each other: a member of the
// releases before the version was sent (no header) is refused before its
// call runs, and a reply of a writer of those releases (no header in
// reply, no pipe) is refused by the member.
func TestWireVersionMismatch(t *testing.T) {
	cfg := Config{Epoch: 7, Secret: []byte("s3cret")}
	s, calls, logs := serve(t, cfg)
	ctx := ctxT(t)
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(CodecName)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var reply echoReply
	oldMember := metadata.AppendToOutgoingContext(ctx, mdEpoch, "7", mdSecret, "73336372657" /* hex of s3cret */ +"4")
	err = conn.Invoke(oldMember, "/"+ServiceName+"/Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if !errors.Is(mapErr(err), ErrWireVersion) || calls.Load() != 0 {
		t.Fatalf("a call without the wire version: %v (%d handled), want ErrWireVersion", err, calls.Load())
	}
	if !strings.Contains(logs.String(), "wire version 1") {
		t.Errorf("refusal logged as %q", logs.String())
	}

	// A writer of the old wire: serves Echo, sends no version, has no pipe.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := grpc.NewServer()
	old.RegisterService(&grpc.ServiceDesc{ServiceName: ServiceName, HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req echoReq
			if err := dec(&req); err != nil {
				return nil, err
			}
			_ = grpc.SetHeader(ctx, metadata.MD{mdEpoch: {"7"}})
			return &echoReply{Text: req.Text}, nil
		},
	}}}, struct{}{})
	go old.Serve(lis)
	defer old.Stop()
	if err := dial(t, lis.Addr().String(), cfg).Call(ctx, "Echo", &echoReq{Text: "x", Count: 1}, &reply); !errors.Is(err, ErrWireVersion) {
		t.Errorf("a reply without the wire version: %v, want ErrWireVersion", err)
	}
	cfg.Pipe = []string{"Echo"}
	if err := dial(t, lis.Addr().String(), cfg).Call(ctx, "Echo", &echoReq{Text: "x", Count: 1}, &reply); !errors.Is(err, ErrWireVersion) {
		t.Errorf("a pipe to a writer without one: %v, want ErrWireVersion", err)
	}
}

// FuzzPipeFrames: whatever bytes arrive as a frame on the pipe decode to
// a frame or an error, never a panic, and a frame decoded encodes again
// to the same header and body.
func FuzzPipeFrames(f *testing.F) {
	for _, v := range []Message{
		&pipeReq{Seq: 3, Method: "Commit", Req: &echoReq{Text: "x", Count: 2}},
		&pipeReply{Seq: 3, Epoch: 7, Reply: &echoReply{Text: "xx"}},
		&pipeReply{Seq: 4, Epoch: 7, Code: 9, Msg: "refused"},
	} {
		data, err := Encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pipeReq
		if Decode(data, &req) == nil {
			req.Req = rawMessage(req.body)
			enc, err := Encode(&req)
			if err != nil {
				t.Fatal(err)
			}
			var again pipeReq
			if err := Decode(enc, &again); err != nil || again.Seq != req.Seq || again.Method != req.Method || string(again.body) != string(req.body) {
				t.Fatalf("pipeReq changed through an encoding: %+v, %+v (%v)", req, again, err)
			}
		}
		var rep pipeReply
		if Decode(data, &rep) == nil {
			rep.Reply = rawMessage(rep.body)
			enc, err := Encode(&rep)
			if err != nil {
				t.Fatal(err)
			}
			var again pipeReply
			if err := Decode(enc, &again); err != nil || again.Seq != rep.Seq || again.Epoch != rep.Epoch || again.Code != rep.Code || again.Msg != rep.Msg {
				t.Fatalf("pipeReply changed through an encoding: %+v, %+v (%v)", rep, again, err)
			}
			if rep.Code == 0 && string(again.body) != string(rep.body) {
				t.Fatalf("pipeReply's body changed: %q, %q", rep.body, again.body)
			}
		}
	})
}

// rawMessage encodes as its bytes.
type rawMessage []byte

func (m rawMessage) MarshalMsg(b []byte) ([]byte, error)   { return append(b, m...), nil }
func (m rawMessage) UnmarshalMsg(b []byte) ([]byte, error) { return nil, nil }

// Messages above gRPC's default 4 MiB cross the pipe both ways, as they
// do a unary call (TestLargeMessages), beside small calls on it.
func TestPipeLargeMessages(t *testing.T) {
	cfg := Config{Epoch: 7, Secret: []byte("s3cret")}
	s, calls, _ := serve(t, cfg)
	cfg.Pipe = []string{"Echo"}
	c := dial(t, s.Addr(), cfg)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		var reply echoReply
		if err := c.Call(ctx, "Echo", &echoReq{Text: "s", Count: 3}, &reply); err != nil || reply.Text != "sss" {
			t.Errorf("a small call beside: %q, %v", reply.Text, err)
		}
	})
	var reply echoReply
	if err := c.Call(ctx, "Echo", &echoReq{Text: strings.Repeat("x", 5<<20), Count: 2}, &reply); err != nil {
		t.Fatalf("a 5 MiB request with a 10 MiB reply on the pipe: %v", err)
	}
	wg.Wait()
	if len(reply.Text) != 10<<20 || calls.Load() != 2 {
		t.Fatalf("reply of %d bytes after %d calls", len(reply.Text), calls.Load())
	}
}

// A writer that dies with calls on the pipe fails them (their outcome is
// unknown), rather than leaving them waiting; later calls fail too.
func TestPipeBreaksWithItsWriter(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := serveHandlers(t, Config{Epoch: 1, Secret: []byte("s")}, map[string]Handler{
		"Echo": echoHandler(release),
	})
	c := dial(t, s.Addr(), Config{Epoch: 1, Secret: []byte("s"), Pipe: []string{"Echo"}})
	ctx := ctxT(t)
	inFlight := make(chan error)
	go func() {
		var reply echoReply
		inFlight <- c.Call(ctx, "Echo", &echoReq{Text: "slow", Count: 1}, &reply)
	}()
	<-started
	s.Stop()
	if err := <-inFlight; err == nil || ctx.Err() != nil {
		t.Fatalf("the call in flight when the writer stopped: %v (ctx %v)", err, ctx.Err())
	}
	var reply echoReply
	if err := c.Call(ctx, "Echo", &echoReq{Text: "late", Count: 1}, &reply); err == nil {
		t.Fatal("a call after the writer stopped succeeded")
	}
}
