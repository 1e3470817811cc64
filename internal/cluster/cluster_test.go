package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/testenv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

type echoReq struct {
	Text  string
	Count int
}

func (e *echoReq) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(1, e.Text)
	w.Int(2, int64(e.Count))
	return w.End(), nil
}

func (e *echoReq) UnmarshalMsg(b []byte) ([]byte, error) {
	r := format.NewReader(b)
	r.Numbered("echoReq", func(f uint64) {
		switch f {
		case 1:
			e.Text = r.String()
		case 2:
			e.Count = int(r.Int32())
		default:
			r.Skip()
		}
	})
	return r.Rest(), r.Err()
}

type echoReply struct {
	Text string
}

func (e *echoReply) MarshalMsg(b []byte) ([]byte, error) {
	w := format.BeginFields(b)
	w.String(1, e.Text)
	return w.End(), nil
}

func (e *echoReply) UnmarshalMsg(b []byte) ([]byte, error) {
	r := format.NewCopyingReader(b)
	r.Numbered("echoReply", func(f uint64) {
		switch f {
		case 1:
			e.Text = r.String()
		default:
			r.Skip()
		}
	})
	return r.Rest(), r.Err()
}

// serve starts a server of an "Echo" method for cfg and returns it, the
// number of calls that reached the handler, and its log.
func serve(t *testing.T, cfg Config) (*Server, *atomic.Int64, *testenv.Buffer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	var calls atomic.Int64
	s := NewServer(lis, cfg, map[string]Handler{
		"Echo": func(ctx context.Context, decode func(Message) error) (Message, error) {
			var req echoReq
			if err := decode(&req); err != nil {
				return nil, err
			}
			calls.Add(1)
			return &echoReply{Text: strings.Repeat(req.Text, req.Count)}, nil
		},
	})
	go s.Serve()
	t.Cleanup(s.Stop)
	return s, &calls, logs
}

func dial(t *testing.T, addr string, cfg Config) *Client {
	t.Helper()
	c, err := Dial(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCallRoundTrip(t *testing.T) {
	cfg := Config{Epoch: 7, Secret: []byte("s3cret")}
	s, calls, _ := serve(t, cfg)
	c := dial(t, s.Addr(), cfg)
	var reply echoReply
	if err := c.Call(ctxT(t), "Echo", &echoReq{Text: "ab", Count: 3}, &reply); err != nil {
		t.Fatal(err)
	}
	if reply.Text != "ababab" || calls.Load() != 1 {
		t.Fatalf("reply %+v after %d calls", reply, calls.Load())
	}
	if err := c.Check(ctxT(t)); err != nil {
		t.Fatalf("health check: %v", err)
	}
}

// A call carries messages above gRPC's default 4 MiB both ways: a member
// submits and reads values up to the store's WithMaxValueSize (64 MiB by
// default), and batches many transactions in a call. With the default, a
// 4 MiB request was refused with ResourceExhausted, and a member's Submit
// of a 4 MiB input failed with ErrOutcomeUnknown.
func TestLargeMessages(t *testing.T) {
	cfg := Config{Epoch: 7, Secret: []byte("s3cret")}
	s, calls, _ := serve(t, cfg)
	c := dial(t, s.Addr(), cfg)
	big := strings.Repeat("x", 5<<20)
	var reply echoReply
	if err := c.Call(ctxT(t), "Echo", &echoReq{Text: big, Count: 2}, &reply); err != nil {
		t.Fatalf("a 5 MiB request with a 10 MiB reply: %v", err)
	}
	if len(reply.Text) != 10<<20 || calls.Load() != 1 {
		t.Fatalf("reply of %d bytes after %d calls", len(reply.Text), calls.Load())
	}
	// Refused as ever without the secret: from its headers (see tap).
	err := dial(t, s.Addr(), Config{Epoch: 7, Secret: []byte("guess")}).Call(ctxT(t), "Echo", &echoReq{Text: big, Count: 1}, &reply)
	if !errors.Is(err, ErrUnauthenticated) || calls.Load() != 1 {
		t.Fatalf("a large call with a wrong secret: %v (%d calls handled), want ErrUnauthenticated", err, calls.Load())
	}
}

// Calls without the secret, with a wrong one, or for another epoch are
// refused before the handler runs, and logged.
func TestRefusedCallsChangeNothing(t *testing.T) {
	cfg := Config{Epoch: 7, Secret: []byte("s3cret")}
	s, calls, logs := serve(t, cfg)
	ctx := ctxT(t)
	var reply echoReply

	err := dial(t, s.Addr(), Config{Epoch: 7, Secret: []byte("guess")}).Call(ctx, "Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("wrong secret: %v, want ErrUnauthenticated", err)
	}
	err = dial(t, s.Addr(), Config{Epoch: 6, Secret: cfg.Secret}).Call(ctx, "Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if !errors.Is(err, ErrStaleEpoch) {
		t.Errorf("stale epoch: %v, want ErrStaleEpoch", err)
	}
	if err := dial(t, s.Addr(), Config{Epoch: 7, Secret: []byte("guess")}).Check(ctx); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("health check with a wrong secret: %v, want ErrUnauthenticated", err)
	}
	// A plain gRPC client with no credentials at all.
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(CodecName)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(ctx, "/"+ServiceName+"/Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no credentials: %v, want Unauthenticated", err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d refused calls reached the handler", n)
	}
	if !strings.Contains(logs.String(), "cluster call refused") {
		t.Errorf("refusals not logged: %q", logs.String())
	}
}

// A member of the epoch before (its writer's address reused by this one)
// carries that epoch's secret: it is told its epoch is stale, and the log
// says so, not that a wrong secret was tried.
func TestOldEpochCallIsStale(t *testing.T) {
	s, calls, logs := serve(t, Config{Epoch: 8, Secret: []byte("s3cret")})
	var reply echoReply
	err := dial(t, s.Addr(), Config{Epoch: 7, Secret: []byte("the old secret")}).Call(ctxT(t), "Echo", &echoReq{Text: "x", Count: 1}, &reply)
	if !errors.Is(err, ErrStaleEpoch) || calls.Load() != 0 {
		t.Fatalf("a call of epoch 7 with its own secret: %v (%d calls handled), want ErrStaleEpoch", err, calls.Load())
	}
	if l := logs.String(); !strings.Contains(l, "stale epoch 7") || strings.Contains(l, "wrong secret") {
		t.Fatalf("refusal logged as %q", l)
	}
}

// A reply from a writer of another epoch is discarded: a deposed writer
// listening at the address a member dials (it restarted, or the address
// was reused) does not answer for the new one. Here the server is of epoch
// 8 and accepts (its own secret and epoch), but the client expects 9.
func TestReplyOfAnotherEpochIsRefused(t *testing.T) {
	s, _, _ := serve(t, Config{Epoch: 8, Secret: []byte("s3cret")})
	c := dial(t, s.Addr(), Config{Epoch: 8, Secret: []byte("s3cret")})
	c.epoch = "9" // what the member read in the owner object
	var reply echoReply
	if err := c.Call(ctxT(t), "Echo", &echoReq{Text: "x", Count: 1}, &reply); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("reply of epoch 8 to a client of epoch 9: %v, want ErrStaleEpoch", err)
	}
}

// With mutual TLS, a client without a certificate the server trusts cannot
// even connect; one with it calls as usual.
func TestMutualTLS(t *testing.T) {
	ca := testenv.NewCA(t)
	pool := ca.Pool
	serverCert := ca.Issue(t, "127.0.0.1")
	clientCert := ca.Issue(t, "member")
	cfg := Config{Epoch: 3, Secret: []byte("s3cret"), TLS: &tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}}
	s, calls, _ := serve(t, cfg)
	ctx := ctxT(t)
	var reply echoReply
	good := dial(t, s.Addr(), Config{Epoch: 3, Secret: cfg.Secret, TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}})
	if err := good.Call(ctx, "Echo", &echoReq{Text: "y", Count: 2}, &reply); err != nil || reply.Text != "yy" {
		t.Fatalf("call with a client certificate: %+v, %v", reply, err)
	}
	noCert := dial(t, s.Addr(), Config{Epoch: 3, Secret: cfg.Secret, TLS: &tls.Config{RootCAs: pool}})
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := noCert.Call(short, "Echo", &echoReq{Text: "y", Count: 2}, &reply); err == nil {
		t.Fatal("a client without a certificate got through")
	}
	plain := dial(t, s.Addr(), Config{Epoch: 3, Secret: cfg.Secret})
	if err := plain.Call(short, "Echo", &echoReq{Text: "y", Count: 2}, &reply); err == nil {
		t.Fatal("a plaintext client got through")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls reached the handler, want 1", n)
	}
}
