package cluster

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"log/slog"
	"net"
	goruntime "runtime"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// ServiceName is the gRPC service of a writer's methods.
const ServiceName = "stepwell.cluster.v1.Writer"

// Handler serves one method: decode reads the request into a value of the
// method's request type; the reply is encoded with Codec. decode is called
// only for authenticated calls of the server's epoch.
type Handler func(ctx context.Context, decode func(req Message) error) (reply Message, err error)

// Config configures a Server or a Client.
type Config struct {
	// Epoch and Secret identify the writer's epoch: a server serves only
	// calls that carry both; a client sends them and accepts replies of
	// that epoch only. Secret must not be empty.
	Epoch  uint64
	Secret []byte
	// TLS, if set, secures the connection: for a server, its certificate
	// (and ClientAuth/ClientCAs for mutual TLS); for a client, the roots
	// (and its certificate). Nil: plaintext HTTP/2, for a trusted network.
	TLS *tls.Config
	// Logger receives refused calls (rate-limited). Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Dialer, if set, makes a client's connections (tests inject network
	// faults with it). Nil: TCP.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Pipe names the methods a client calls on its pipe, one long-lived
	// stream (see pipeMethod), rather than as a unary call each: the hot
	// ones, which never wait long on the server. A server serves every
	// method both ways.
	Pipe []string
}

// Keepalive: a connection idle for keepaliveTime is pinged, and closed if
// the ping is not answered within keepaliveTimeout, so a member learns of
// a dead writer's host without waiting on a call.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
)

// MaxMessage bounds a call's request and reply: a transaction carries values
// up to the queue's largest (64 MiB by default), and a member batches
// several transactions in one call. Calls are authenticated from their
// headers before their message is read (see tap), so only a member can
// make the writer read a large one.
const MaxMessage = 512 << 20

// Flow control: both sides announce fixed windows instead of letting gRPC
// size them from round-trip estimates. The estimator pings the peer at
// the first data frame it receives, and again at the first after each
// answer, and windows of 64 KiB are updated every 16 KiB: in the 200
// calls of TestPipeCarriesNoFlowControlChatter the writer's side sent 399
// pings or answers and 250 window updates (now none and one), each a
// write on one side and a wake-up on the other. Measured (stepwell bench
// --cluster 2 --concurrency 16, file://, 4 alternating pairs): the
// members' CPU per transition fell 14-28%, the whole cluster's 11-22%,
// and transitions/s rose 6-20%. A stream's window is updated after a
// quarter of it is read (1 MiB), and bounds the bytes of its calls in
// flight per round trip (4 MiB: 400 MB/s over a 10 ms link; the
// estimator could grow it to 16 MiB) and what its receiver may hold
// unread; gRPC refills the connection's window as data arrives. Windows
// reserve no memory.
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

// Server serves a writer's methods to the store's members.
type Server struct {
	g      *grpc.Server
	lis    net.Listener
	cfg    Config
	health *health.Server
	refuse refusalLog
	// The credentials a call must carry, as they travel (computed once:
	// every call is checked twice, see tap and check).
	secret []byte
	epoch  string
	// stopping is closed when the server starts stopping: its pipes end.
	stopping chan struct{}
	stopOnce sync.Once
}

// NewServer returns a server of methods on lis, for the epoch in cfg. Call
// Serve to start it.
func NewServer(lis net.Listener, cfg Config, methods map[string]Handler) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{lis: lis, cfg: cfg, refuse: refusalLog{log: cfg.Logger},
		secret: []byte(hex.EncodeToString(cfg.Secret)), epoch: strconv.FormatUint(cfg.Epoch, 10),
		stopping: make(chan struct{})}
	opts := []grpc.ServerOption{
		grpc.InTapHandle(s.tap),
		grpc.ChainUnaryInterceptor(s.authUnary),
		grpc.ChainStreamInterceptor(s.authStream),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.MaxRecvMsgSize(MaxMessage), grpc.MaxSendMsgSize(MaxMessage),
		grpc.StaticStreamWindowSize(streamWindow), grpc.StaticConnWindowSize(connWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
		// Calls run on long-lived goroutines whose stacks have grown
		// already, not on a new goroutine each (the stack copies cost a
		// busy writer a tenth of its CPU). A call that finds every worker
		// busy (long-polls hold theirs) gets a goroutine of its own.
		grpc.NumStreamWorkers(uint32(max(4, 2*goruntime.GOMAXPROCS(0)))),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.g = grpc.NewServer(opts...)
	desc := grpc.ServiceDesc{ServiceName: ServiceName, HandlerType: (*any)(nil), Metadata: "stepwell"}
	for name, h := range methods {
		full := "/" + ServiceName + "/" + name
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				call := func(ctx context.Context, _ any) (any, error) { return h(ctx, func(m Message) error { return dec(m) }) }
				if ic == nil {
					return call(ctx, nil)
				}
				return ic(ctx, nil, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, call)
			},
		})
	}
	desc.Streams = append(desc.Streams, grpc.StreamDesc{StreamName: pipeMethod, Handler: s.servePipe(methods),
		ServerStreams: true, ClientStreams: true})
	s.g.RegisterService(&desc, struct{}{})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.g, s.health)
	return s
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Serve serves until Stop or GracefulStop.
func (s *Server) Serve() error { return s.g.Serve(s.lis) }

// Stop closes every connection at once; calls in progress fail.
func (s *Server) Stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.g.Stop()
	s.refuse.stop()
}

// GracefulStop stops taking calls and waits for those in progress, until
// ctx ends, then stops.
func (s *Server) GracefulStop(ctx context.Context) {
	s.health.Shutdown()
	s.stopOnce.Do(func() { close(s.stopping) })
	done := make(chan struct{})
	go func() {
		s.g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.g.Stop()
		<-done
	}
	s.refuse.stop()
}

// tap refuses a call that is not authenticated for this epoch as soon as
// its headers arrive, before its message is read.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if err := s.authenticate(info.Header, info.FullMethodName); err != nil {
		return nil, err
	}
	return ctx, nil
}

// check authenticates a call (again: tap has) and sets the reply header
// that names this epoch.
func (s *Server) check(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if err := s.authenticate(md, method); err != nil {
		return err
	}
	return grpc.SetHeader(ctx, metadata.MD{mdEpoch: {s.epoch}, mdWire: {WireVersion}})
}

// authenticate checks a call's metadata: nil, or the status it is refused
// with (logged).
func (s *Server) authenticate(md metadata.MD, method string) error {
	secret := md.Get(mdSecret)
	epoch := md.Get(mdEpoch)
	var why string
	var err error
	switch {
	case len(secret) != 1 || len(epoch) != 1:
		why, err = "no credentials", status.Error(codes.Unauthenticated, "stepwell-secret and stepwell-epoch metadata required")
	case epoch[0] != s.epoch:
		// Each epoch has its own secret: a member of another epoch (the
		// writer before, at an address this one reused) carries that
		// epoch's, and is told to look again, not logged as a wrong
		// secret. It learns nothing it could not read in the store.
		why, err = "stale epoch "+epoch[0], status.Error(codes.FailedPrecondition, ErrStaleEpoch.Error())
	case subtle.ConstantTimeCompare([]byte(secret[0]), s.secret) != 1:
		why, err = "wrong secret", status.Error(codes.Unauthenticated, "wrong secret")
	case len(md.Get(mdWire)) != 1 || md.Get(mdWire)[0] != WireVersion:
		// A member of another release: refused before anything runs,
		// rather than misreading its messages.
		got := "1 (none said)"
		if w := md.Get(mdWire); len(w) > 0 {
			got = w[0]
		}
		why = "wire version " + got + ", this writer's is " + WireVersion
		err = status.Error(codes.FailedPrecondition, ErrWireVersion.Error()+": the member speaks "+got+", the writer "+WireVersion)
	default:
		return nil
	}
	s.refuse.note(method, why)
	return err
}

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if err := s.authenticate(md, info.FullMethod); err != nil {
		return err
	}
	// Sent at once: the client of a pipe checks it before its first call.
	if err := ss.SendHeader(metadata.MD{mdEpoch: {s.epoch}, mdWire: {WireVersion}}); err != nil {
		return err
	}
	return h(srv, ss)
}

// refusalLog logs refused calls at WARN, at most one line per second; the
// line counts the refusals it stands for and names the latest one. The
// refusals that come within a second of a line are logged by a timer a
// second after it, so the last ones of a burst are logged even when no
// refusal follows them.
type refusalLog struct {
	log *slog.Logger

	mu          sync.Mutex
	last        time.Time   // when the last line was logged
	pending     int         // refusals since the last line
	method, why string      // the latest of them
	timer       *time.Timer // logs the pending refusals; nil if not armed
	stopped     bool
}

func (r *refusalLog) note(method, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending++
	r.method, r.why = method, why
	if wait := time.Second - time.Since(r.last); wait > 0 {
		if r.timer == nil && !r.stopped {
			r.timer = time.AfterFunc(wait, r.flush)
		}
		return
	}
	r.emit()
}

// flush logs the refusals not logged yet, if any.
func (r *refusalLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if r.pending > 0 {
		r.emit()
	}
}

// stop logs the refusals not logged yet and disarms the timer: the server
// stops.
func (r *refusalLog) stop() {
	r.mu.Lock()
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.flush()
}

// emit logs the pending refusals. REQUIRES: r.mu held.
func (r *refusalLog) emit() {
	r.log.Warn("stepwell: cluster call refused", "method", r.method, "reason", r.why, "refused", r.pending)
	r.last, r.pending = time.Now(), 0
}
