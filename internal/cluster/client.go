package cluster

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

// Client calls one writer epoch's methods.
type Client struct {
	conn  *grpc.ClientConn
	epoch string
	piped map[string]bool // methods called on the pipe (Config.Pipe)

	pmu  sync.Mutex
	pipe *pipe // the open pipe; nil: none (opened by the next piped call)
}

// Dial returns a client of the writer at addr for the epoch in cfg. It
// connects lazily: the first call (or Check) dials.
func Dial(addr string, cfg Config) (*Client, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("cluster: Dial needs the epoch's secret")
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	epoch := strconv.FormatUint(cfg.Epoch, 10)
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(callCreds{epoch: epoch, secret: hex.EncodeToString(cfg.Secret)}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(CodecName), grpc.MaxCallRecvMsgSize(MaxMessage), grpc.MaxCallSendMsgSize(MaxMessage)),
		grpc.WithStaticStreamWindowSize(streamWindow), grpc.WithStaticConnWindowSize(connWindow),
	}
	if cfg.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.Dialer))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: dial %s: %w", addr, err)
	}
	c := &Client{conn: conn, epoch: epoch, piped: map[string]bool{}}
	for _, m := range cfg.Pipe {
		c.piped[m] = true
	}
	return c, nil
}

// Call calls method with req and decodes the reply into reply. A refused
// call returns ErrUnauthenticated, ErrStaleEpoch or ErrWireVersion; a unary
// reply from a writer of another epoch or wire version is discarded with
// ErrStaleEpoch or ErrWireVersion (on the pipe: see readPipe). The
// methods of Config.Pipe go on the pipe (see pipeMethod), the others as
// a unary call each.
func (c *Client) Call(ctx context.Context, method string, req, reply Message) error {
	if c.piped[method] {
		return c.callPipe(ctx, method, req, reply)
	}
	var hdr metadata.MD
	err := c.conn.Invoke(ctx, "/"+ServiceName+"/"+method, req, reply, grpc.Header(&hdr))
	if err != nil {
		return mapErr(err)
	}
	return c.checkEpoch(hdr)
}

// checkEpoch checks a reply's header: the writer's epoch and wire version
// must be the client's.
func (c *Client) checkEpoch(hdr metadata.MD) error {
	if got := hdr.Get(mdWire); len(got) != 1 || got[0] != WireVersion {
		return fmt.Errorf("%w: the writer speaks %v, this process %s", ErrWireVersion, got, WireVersion)
	}
	if got := hdr.Get(mdEpoch); len(got) != 1 || got[0] != c.epoch {
		return fmt.Errorf("%w: the reply came from epoch %v, not %s", ErrStaleEpoch, got, c.epoch)
	}
	return nil
}

// Check asks the writer's health service whether it serves, authenticated
// like every call.
func (c *Client) Check(ctx context.Context) error {
	res, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.CallContentSubtype("proto"))
	if err != nil {
		return mapErr(err)
	}
	if res.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("cluster: writer health is %v", res.Status)
	}
	return nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// callCreds attaches the epoch and secret (hex: metadata values are
// printable ASCII) to every call on a connection,
// health checks included.
type callCreds struct{ epoch, secret string }

func (c callCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{mdEpoch: c.epoch, mdSecret: c.secret, mdWire: WireVersion}, nil
}

func (callCreds) RequireTransportSecurity() bool { return false }
