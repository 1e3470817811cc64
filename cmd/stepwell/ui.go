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
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/ui"
)

// uiTokenEnv is read when --auth-token is absent (a flag's value shows in
// the process list).
const uiTokenEnv = "STEPWELL_UI_AUTH_TOKEN"

func uiCommand() *command {
	var w writeFlags
	var listen, token, basic, basePath, title string
	var insecure, readOnly bool
	return &command{
		name:     "ui",
		synopsis: "[--listen ADDR] [--auth-token T | --basic-auth USER:PASS | --insecure-no-auth] [--read-only]",
		help: `Serves the web UI (package ui) of the store until interrupted: runs, one run
with its history, queues with their dead letters, the store's writer, and the
actions (cancel, retry, pause, resume, signal, requeue).

The store is opened as the write commands open it: while a service runs the
store in cluster mode, the UI joins it as a member and the service's writer
takes its actions; with no process on the store, the UI becomes its writer
(in cluster mode: a service started later joins it). When a writer holds the
store that the UI cannot join (not in cluster mode, or not answering within
--wait), or with --read-only, the UI opens it read-only and says why on every
page: it shows everything and takes no action. While the UI is the writer, a
service that is NOT in cluster mode cannot open the store: start the UI after
the service, or with --read-only.

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
			fs.BoolVar(&readOnly, "read-only", false, "open the store read-only: no actions")
			fs.StringVar(&basePath, "base-path", "", "serve under this `PATH` prefix (behind a proxy), e.g. /stepwell")
			fs.StringVar(&title, "title", "", "the UI's `TITLE` (default Stepwell)")
			fs.StringVar(&w.listen, "cluster-listen", "127.0.0.1:0",
				"`ADDR` to serve cluster members on while the UI is the store's writer (queue.ClusterConfig.Listen)")
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
			if opts.StoreURL, err = c.storeURL(); err != nil {
				return err
			}
			q, why, err := c.openUI(ctx, w, readOnly)
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

// openUI opens the store for the UI: as a write command does (a member of
// a writer in cluster mode, or the writer), else read-only with why.
func (c *cli) openUI(ctx context.Context, w writeFlags, readOnly bool) (*queue.Queue, string, error) {
	if readOnly {
		q, err := c.openRead(ctx)
		return q, "started with --read-only", err
	}
	q, err := c.openWrite(ctx, w)
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
	return q, "another process writes the store and this UI cannot join it (it is not in cluster mode, or did not answer): " +
		"open the store with queue.WithCluster in that process to act on runs from here", nil
}
