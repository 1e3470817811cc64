package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
)

// tapConn keeps a copy of the bytes a client's connection writes and
// reads, in their order on the wire, to be parsed as HTTP/2 frames.
type tapConn struct {
	net.Conn
	wmu   sync.Mutex // held across each write, so that concurrent writes are recorded in order
	sent  bytes.Buffer
	rmu   sync.Mutex // the transport reads from one goroutine
	recvd bytes.Buffer
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, err := c.Conn.Write(p)
	c.sent.Write(p[:n])
	return n, err
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rmu.Lock()
	c.recvd.Write(p[:n])
	c.rmu.Unlock()
	return n, err
}

// frameCounts counts the frames of each type in b, a stream of HTTP/2
// frames, and the bytes their DATA frames carry.
func frameCounts(t *testing.T, b []byte) (map[http2.FrameType]int, int) {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	fr.SetMaxReadFrameSize(1 << 24)
	counts := map[http2.FrameType]int{}
	data := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return counts, data
		}
		if err != nil {
			t.Fatalf("parsing the connection's frames: %v", err)
		}
		counts[f.Header().Type]++
		if d, ok := f.(*http2.DataFrame); ok {
			data += len(d.Data())
		}
	}
}

// A busy pipe carries its calls, not flow control: no pings beside them
// and no window update every few calls (each costs a write on one side
// and a wake-up on the other). gRPC's dynamic windows would ping after
// the first data frame each side receives and update every 16 KiB.
func TestPipeCarriesNoFlowControlChatter(t *testing.T) {
	cfg := Config{Epoch: 3, Secret: []byte("s3cret")}
	s, _, _ := serve(t, cfg)
	var mu sync.Mutex
	var conns []*tapConn
	cfg.Pipe = []string{"Echo"}
	cfg.Dialer = func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		tc := &tapConn{Conn: c}
		mu.Lock()
		conns = append(conns, tc)
		mu.Unlock()
		return tc, nil
	}
	c := dial(t, s.Addr(), cfg)
	ctx := ctxT(t)
	const calls, size = 200, 4 << 10 // 800 KiB each way
	text := strings.Repeat("x", size)
	for range calls {
		var reply echoReply
		if err := c.Call(ctx, "Echo", &echoReq{Text: text, Count: 1}, &reply); err != nil {
			t.Fatal(err)
		}
		if len(reply.Text) != size {
			t.Fatalf("reply of %d bytes, want %d", len(reply.Text), size)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d connections, want 1", len(conns))
	}
	tc := conns[0]
	tc.wmu.Lock()
	defer tc.wmu.Unlock()
	tc.rmu.Lock()
	defer tc.rmu.Unlock()
	sent := tc.sent.Bytes()
	if !bytes.HasPrefix(sent, []byte(http2.ClientPreface)) {
		t.Fatal("the client's bytes do not begin with the HTTP/2 preface")
	}
	for side, b := range map[string][]byte{"member": sent[len(http2.ClientPreface):], "writer": tc.recvd.Bytes()} {
		n, data := frameCounts(t, b)
		t.Logf("%s sent %d data frames (%d bytes), %d ping, %d window update frames", side, n[http2.FrameData], data, n[http2.FramePing], n[http2.FrameWindowUpdate])
		// Messages are framed as gRPC likes (two may share a frame).
		if data < calls*size {
			t.Errorf("%s: %d bytes of data for %d calls of %d: the tap missed the calls", side, data, calls, size)
		}
		if n[http2.FramePing] != 0 {
			t.Errorf("%s sent %d pings, want none (keepalive pings only an idle connection)", side, n[http2.FramePing])
		}
		// One raises the connection's window from HTTP/2's default as the
		// connection opens; no other is due before 1 MiB (a quarter of the
		// stream's window) is read, and the test moves 800 KiB.
		if n[http2.FrameWindowUpdate] > 1 {
			t.Errorf("%s sent %d window updates, want at most 1", side, n[http2.FrameWindowUpdate])
		}
	}
}
