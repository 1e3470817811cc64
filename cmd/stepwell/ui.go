package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/ui"
)

// uiTokenEnv is read when --auth-token is absent (a flag's value shows in
// the process list).
const uiTokenEnv = "STEPWELL_UI_AUTH_TOKEN"

func uiCommand() *command {
	var w writeFlags
	var listen, token, basic, basePath, title string
	var insecure, readOnly, write bool
	return &command{
		name:     "ui",
		synopsis: "[--listen ADDR] [--auth-token T | --basic-auth USER:PASS | --insecure-no-auth] [--write | --read-only]",
		help: `Serves the web UI (package ui) of the store until interrupted: runs, one run
with its history, queues with their dead letters, the store's writer, and the
actions (cancel, retry, pause, resume, signal, requeue).

By default the UI never becomes the store's writer, so it never stands in the
way of a service that opens the store:

  - while a service runs the store in cluster mode (queue.WithCluster), the
    UI joins it as a member and the service's writer takes its actions;
  - otherwise (no process writes the store, or its writer is not in cluster
    mode, or does not answer within --wait) the UI opens the store read-only:
    it shows everything, brings it up to date as pages are loaded, takes no
    action, and says on every page why and how to enable actions. A service
    started later opens the store as usual; one in cluster mode is joined as
    a member when pages are loaded (the UI looks for it at most every 5s
    while pages load, and reads nothing while none does).

With --write, and no process writing the store, the UI becomes its writer, in
cluster mode: a service started later must open the store with
queue.WithCluster, and then joins the UI's writer as a member (a service NOT
in cluster mode cannot open the store until the UI stops). With --read-only
the UI opens the store read-only whatever runs.

It listens on 127.0.0.1:8080 by default, and there answers only requests
addressed to localhost or a loopback IP (a page of another site pointed
at 127.0.0.1 by its DNS is refused). An address other than loopback
needs --auth-token (or $` + uiTokenEnv + `), --basic-auth USER:PASS, or
--insecure-no-auth, which serves anyone who reaches it (a warning is
printed). With a token, open the URL printed at start (it carries
?token=...): the browser keeps a cookie.
`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&listen, "listen", "127.0.0.1:8080", "`ADDR` to serve the UI on")
			fs.StringVar(&token, "auth-token", "", "require this `TOKEN` (Authorization: Bearer, or a cookie set by ?token=)")
			fs.StringVar(&basic, "basic-auth", "", "require HTTP basic credentials `USER:PASS`")
			fs.BoolVar(&insecure, "insecure-no-auth", false, "serve a non-loopback --listen without authentication")
			fs.BoolVar(&readOnly, "read-only", false, "open the store read-only: no actions, even while a writer in cluster mode runs")
			fs.BoolVar(&write, "write", false,
				"become the store's writer (in cluster mode) when no process writes it, to take actions; by default the UI\n"+
					"then opens the store read-only, so that a service can open it")
			fs.StringVar(&basePath, "base-path", "", "serve under this `PATH` prefix (behind a proxy), e.g. /stepwell")
			fs.StringVar(&title, "title", "", "the UI's `TITLE` (default Stepwell)")
			fs.StringVar(&w.listen, "cluster-listen", "127.0.0.1:0",
				"`ADDR` to serve cluster members on while the UI is the store's writer (--write; queue.ClusterConfig.Listen)")
			fs.DurationVar(&w.wait, "wait", defaultWait, "how long (duration `D`) to look for the writer of a store in cluster mode")
			fs.StringVar(&w.tlsCA, "tls-ca", "", "cluster TLS: CA certificates, PEM `FILE` (see 'stepwell help cancel')")
			fs.StringVar(&w.tlsCert, "tls-cert", "", "cluster TLS: this process's certificate, PEM `FILE`")
			fs.StringVar(&w.tlsKey, "tls-key", "", "cluster TLS: the private key of --tls-cert, PEM `FILE`")
			fs.BoolVar(&w.tlsMutual, "tls-mutual", false, "cluster TLS: require members' certificates while the UI is the writer")
		},
		exec: func(ctx context.Context, c *cli, _ []string) (err error) {
			if token == "" {
				token = c.env(uiTokenEnv)
			}
			opts := ui.Options{BasePath: basePath, Title: title,
				Logger: slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			auth, err := uiAuth(listen, token, basic, insecure)
			if err != nil {
				return err
			}
			opts.Authorize = auth
			if insecure {
				fmt.Fprintf(c.stderr, "stepwell ui: WARNING: --insecure-no-auth: anyone who reaches %s can see every run and cancel, retry or signal it\n", listen)
			}
			if write && readOnly {
				return usageError("--write and --read-only are exclusive")
			}
			if opts.StoreURL, err = c.storeURL(); err != nil {
				return err
			}
			q, why, err := c.openUI(ctx, w, readOnly, write)
			if err != nil {
				return err
			}
			if why != "" {
				fmt.Fprintf(c.stderr, "stepwell ui: read-only: %s\n", why)
			}
			g, err := newUIGen(q, opts, why)
			if err != nil {
				_ = q.Close(context.Background())
				return err
			}
			h := &uiSwitch{opts: opts, log: opts.Logger, stderr: c.stderr, ctx: ctx}
			h.cur.Store(g)
			if q.Role() == queue.RoleReadOnly && !readOnly {
				// A writer in cluster mode that starts later is joined.
				h.join = func(ctx context.Context) (*queue.Queue, error) { return c.joinNamed(ctx, w) }
				h.named = func(ctx context.Context) string { return namedClusterWriter(ctx, opts.StoreURL) }
				h.seen = h.named(ctx)
			}
			defer func() {
				h.joins.Wait()
				closeQueue(h.cur.Load().q, &err)
			}()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return failed("--listen: %v", err)
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
			addr := "http://" + ln.Addr().String() + basePath + "/"
			if token != "" {
				addr += "runs?token=" + token
			}
			fmt.Fprintf(c.stdout, "stepwell ui: serving %s (the store's %s)\n", addr, q.Role())
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			select {
			case err := <-served:
				return fmt.Errorf("serving: %w", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			return nil
		},
	}
}

// uiAuth checks the authentication flags against the listen address and
// returns the Authorize hook they ask for.
func uiAuth(listen, token, basic string, insecure bool) (func(http.ResponseWriter, *http.Request) bool, error) {
	n := 0
	for _, set := range []bool{token != "", basic != "", insecure} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, usageError("--auth-token, --basic-auth and --insecure-no-auth are exclusive")
	}
	switch {
	case token != "":
		if len(token) < 16 {
			return nil, usageError("--auth-token must have at least 16 characters")
		}
		return ui.TokenAuth(token), nil
	case basic != "":
		user, pass, ok := strings.Cut(basic, ":")
		if !ok || user == "" || pass == "" {
			return nil, usageError("--basic-auth wants USER:PASS")
		}
		return ui.BasicAuth(user, pass), nil
	case insecure:
		return nil, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, usageError("--listen %q: %v", listen, err)
	}
	if !loopback(host) {
		return nil, usageError("--listen %s is not a loopback address: anyone who reaches it could act on runs.\n"+
			"Pass --auth-token TOKEN (or set %s), --basic-auth USER:PASS, or --insecure-no-auth", listen, uiTokenEnv)
	}
	return loopbackHostOnly, nil
}

// loopbackHostOnly is the Authorize hook of a UI served on a loopback
// address without authentication: it answers only requests whose Host
// names this machine (localhost, or a loopback IP). A page of another
// site whose name its owner pointed at 127.0.0.1 (DNS rebinding) is
// same-origin to the browser, which would let it read the UI's pages and
// their form tokens and post actions; its requests carry that name as
// Host, and are refused (421).
func loopbackHostOnly(w http.ResponseWriter, r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".") // [::1], localhost.
	if loopback(strings.ToLower(host)) {
		return true
	}
	http.Error(w, fmt.Sprintf("stepwell ui answers on this address to localhost names only, not to Host %q "+
		"(behind a reverse proxy, have it send Host: localhost, or serve with --auth-token)", r.Host), http.StatusMisdirectedRequest)
	return false
}

// loopback reports whether host (of a listen address) only accepts
// connections from this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Why a UI is read-only, on every page (ui.Options.ReadOnlyReason).
const (
	uiNoWriter = "no writer in cluster mode runs on this store, and the UI does not become one by default " +
		"(it would keep a service that is not in cluster mode from opening the store). " +
		"To act on runs from here: run the service that writes the store with queue.WithCluster " +
		"(the UI joins it as a member as pages load), or, while no process writes the store, restart the UI with --write " +
		"(it becomes the writer, in cluster mode: a service must then use queue.WithCluster to join it)"
	uiCannotJoin = "another process writes the store and this UI cannot join it (it is not in cluster mode, or did not answer): " +
		"open the store with queue.WithCluster in that process to act on runs from here (the UI joins it as a member as pages load)"
)

// openUI opens the store for the UI and says why it is read-only ("": it
// is not). By default it joins a writer in cluster mode as a member, and
// opens the store read-only otherwise; with write, it opens it as a write
// command does (a member, or the writer in cluster mode), read-only if a
// writer holds it that it cannot join.
func (c *cli) openUI(ctx context.Context, w writeFlags, readOnly, write bool) (*queue.Queue, string, error) {
	if readOnly {
		q, err := c.openRead(ctx)
		return q, "started with --read-only", err
	}
	var q *queue.Queue
	var err error
	if write {
		q, err = c.openWrite(ctx, w)
	} else {
		q, err = c.joinCluster(ctx, w)
		if q == nil && err == nil {
			q, err = c.openRead(ctx)
			return q, uiNoWriter, err
		}
	}
	if err == nil {
		return q, "", nil
	}
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitLocked {
		return nil, "", err
	}
	q, rerr := c.openRead(ctx)
	if rerr != nil {
		return nil, "", rerr
	}
	return q, uiCannotJoin, nil
}

// joinCluster opens the store as a member of the writer in cluster mode
// it names, and returns nil (and no error) if it names none that runs: no
// writer in cluster mode, or one that had stopped (see joinNamed).
func (c *cli) joinCluster(ctx context.Context, w writeFlags) (*queue.Queue, error) {
	raw, err := c.storeURL()
	if err != nil {
		return nil, err
	}
	if namedClusterWriter(ctx, raw) == "" {
		return nil, nil
	}
	return c.joinNamed(ctx, w)
}

// joinNamed opens the store as a member of the writer in cluster mode it
// names (the caller read the owner object), and returns nil (and no
// error) if that writer had stopped: this took its place as a write
// command would, and gave it up at once.
func (c *cli) joinNamed(ctx context.Context, w writeFlags) (*queue.Queue, error) {
	q, err := c.openWrite(ctx, w)
	if err != nil {
		return nil, err
	}
	if q.Role() == queue.RoleWriter {
		if err := q.Close(ctx); err != nil {
			return nil, fmt.Errorf("closing the store after taking a stopped writer's place: %w", err)
		}
		return nil, nil
	}
	return q, nil
}

// namedClusterWriter returns the identity (its writer ID and epoch) of
// the writer in cluster mode that the store at raw names and that has not
// closed it, or "" if it names none (or cannot be read).
func namedClusterWriter(ctx context.Context, raw string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := objstore.Open(ctx, raw)
	if err != nil {
		return ""
	}
	defer b.Close()
	own, err := engine.ReadOwner(ctx, b)
	if err != nil || own == nil || own.Closed || own.Addr == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d", own.Writer, own.Epoch)
}

// uiRefreshEvery is how often at most a read-only UI brings the store up
// to date (queue.Queue.Refresh), when pages are loaded.
const uiRefreshEvery = time.Second

// refreshing serves h after bringing q, opened read-only, up to date with
// what its writer committed, at most every every: pages and their live
// parts show new runs, and an idle UI reads nothing.
type refreshing struct {
	h     http.Handler
	q     *queue.Queue
	every time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	last time.Time // guarded by mu
}

func (r *refreshing) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	if time.Since(r.last) >= r.every {
		if err := r.q.Refresh(req.Context()); err != nil && req.Context().Err() == nil {
			r.log.Warn("stepwell ui: bringing the store up to date", "err", err)
		}
		r.last = time.Now()
	}
	r.mu.Unlock()
	r.h.ServeHTTP(w, req)
}

// uiJoinEvery is how often at most a read-only UI looks for a writer in
// cluster mode to join, when pages are loaded.
const uiJoinEvery = 5 * time.Second

// uiGen is the UI of one open of the store. Requests hold mu read-locked;
// the switch to the next one write-locks it before closing q.
type uiGen struct {
	h  http.Handler
	q  *queue.Queue
	mu sync.RWMutex
	// closed is set, under mu, once the next one took over.
	closed bool
}

// newUIGen builds the UI of q, opened read-only for the reason why, or
// not ("").
func newUIGen(q *queue.Queue, opts ui.Options, why string) (*uiGen, error) {
	rt, err := inspector(q)
	if err != nil {
		return nil, err
	}
	opts.ReadOnly, opts.ReadOnlyReason = why != "", why
	h, err := ui.New(rt, opts)
	if err != nil {
		return nil, usageError("%v", err)
	}
	if q.Role() == queue.RoleReadOnly {
		h = &refreshing{h: h, q: q, every: uiRefreshEvery, log: opts.Logger}
	}
	return &uiGen{h: h, q: q}, nil
}

// uiSwitch serves the current UI. While it is read-only and join is set,
// a page load looks for a writer in cluster mode to join (at most every
// uiJoinEvery, in the background): once joined, the next pages are a
// member's, with their actions, and the read-only open is closed after
// the requests it was serving.
type uiSwitch struct {
	cur    atomic.Pointer[uiGen]
	opts   ui.Options
	log    *slog.Logger
	stderr io.Writer
	join   func(context.Context) (*queue.Queue, error) // joinNamed; nil: never switches
	named  func(context.Context) string                // see namedClusterWriter
	ctx    context.Context                             // the command's: ends the joins
	joins  sync.WaitGroup
	// seen is the writer in cluster mode the store named when the UI last
	// looked (see tryJoin). Only the look in flight uses it.
	seen string

	mu       sync.Mutex
	joining  bool      // guarded by mu
	lastJoin time.Time // guarded by mu
}

func (s *uiSwitch) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.maybeJoin()
	for {
		g := s.cur.Load()
		g.mu.RLock()
		if !g.closed {
			g.h.ServeHTTP(w, req)
			g.mu.RUnlock()
			return
		}
		g.mu.RUnlock() // replaced meanwhile: serve the next one
	}
}

// maybeJoin starts a look for a writer in cluster mode to join, unless
// the UI has joined one, a look runs, or the last began within
// uiJoinEvery.
func (s *uiSwitch) maybeJoin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.join == nil || s.joining || time.Since(s.lastJoin) < uiJoinEvery || s.ctx.Err() != nil {
		return
	}
	s.joining, s.lastJoin = true, time.Now()
	s.joins.Add(1)
	go func() {
		defer s.joins.Done()
		joined := s.tryJoin()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.joining = false
		if joined {
			s.join = nil
		}
	}()
}

// tryJoin joins the writer in cluster mode the store names, if one runs,
// and switches to a member's UI. It tries a writer once: one the store
// still names after the UI could not join it (it had stopped, and the
// UI took its place and gave it up, as at start; or it did not answer)
// is not tried again. So a UI never keeps taking a stopped writer's
// place, which would keep a service not in cluster mode from opening the
// store meanwhile.
func (s *uiSwitch) tryJoin() bool {
	w := s.named(s.ctx)
	if w == "" || w == s.seen {
		return false
	}
	s.seen = w
	q, err := s.join(s.ctx)
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("stepwell ui: joining the store's writer in cluster mode", "err", err)
		}
		return false
	}
	if q == nil {
		return false
	}
	g, err := newUIGen(q, s.opts, "")
	if err != nil {
		s.log.Warn("stepwell ui: joining the store's writer in cluster mode", "err", err)
		_ = q.Close(context.Background())
		return false
	}
	old := s.cur.Swap(g)
	fmt.Fprintf(s.stderr, "stepwell ui: joined the store's writer in cluster mode as a member: actions are on\n")
	old.mu.Lock()
	old.closed = true
	old.mu.Unlock()
	if err := old.q.Close(context.Background()); err != nil {
		s.log.Warn("stepwell ui: closing the read-only store", "err", err)
	}
	return true
}
