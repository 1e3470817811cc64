package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
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
    started later opens the store as usual (restart the UI to join it in
    cluster mode).

With --write, and no process writing the store, the UI becomes its writer, in
cluster mode: a service started later must open the store with
queue.WithCluster, and then joins the UI's writer as a member (a service NOT
in cluster mode cannot open the store until the UI stops). With --read-only
the UI opens the store read-only whatever runs.

It listens on 127.0.0.1:8080 by default. An address other than loopback
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
			defer closeQueue(q, &err)
			if why != "" {
				opts.ReadOnly, opts.ReadOnlyReason = true, why
				fmt.Fprintf(c.stderr, "stepwell ui: read-only: %s\n", why)
			}
			rt, err := inspector(q)
			if err != nil {
				return err
			}
			h, err := ui.New(rt, opts)
			if err != nil {
				return usageError("%v", err)
			}
			if q.Role() == queue.RoleReadOnly {
				h = &refreshing{h: h, q: q, every: uiRefreshEvery, log: opts.Logger}
			}
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
	return nil, nil
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
		"To act on runs from here: run the service that writes the store with queue.WithCluster and restart the UI " +
		"(it joins it as a member), or, while no process writes the store, restart the UI with --write " +
		"(it becomes the writer, in cluster mode: a service must then use queue.WithCluster to join it)"
	uiCannotJoin = "another process writes the store and this UI cannot join it (it is not in cluster mode, or did not answer): " +
		"open the store with queue.WithCluster in that process, then restart the UI, to act on runs from here"
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
	if !write {
		raw, err := c.storeURL()
		if err != nil {
			return nil, "", err
		}
		if !clusterWriterNamed(ctx, raw) {
			q, err := c.openRead(ctx)
			return q, uiNoWriter, err
		}
	}
	q, err := c.openWrite(ctx, w)
	if err == nil && !write && q.Role() == queue.RoleWriter {
		// The writer the store named had stopped, and this took its
		// place: give it up at once.
		if err := q.Close(ctx); err != nil {
			return nil, "", fmt.Errorf("closing the store after taking a stopped writer's place: %w", err)
		}
		q, err = c.openRead(ctx)
		return q, uiNoWriter, err
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

// clusterWriterNamed reports whether the store at raw names a writer in
// cluster mode that has not closed it (its owner object): one runs, or
// ran and stopped without closing.
func clusterWriterNamed(ctx context.Context, raw string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := objstore.Open(ctx, raw)
	if err != nil {
		return false
	}
	defer b.Close()
	own, err := engine.ReadOwner(ctx, b)
	return err == nil && own != nil && !own.Closed && own.Addr != ""
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
