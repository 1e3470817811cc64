package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/bench"
	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// Exit codes. They are part of the CLI's interface: scripts branch on them.
const (
	exitOK       = 0 // success
	exitFailed   = 1 // the operation failed: store error, corrupt record, ...
	exitUsage    = 2 // bad flags, missing arguments, no or invalid store URL
	exitLocked   = 3 // a live writer holds the store that this command cannot join
	exitNotFound = 4 // the run or job does not exist
)

// storeEnv names the environment variable read when --store is absent.
const storeEnv = "STEPWELL_STORE"

const usageText = `stepwell: operate a Stepwell store (queues, runs, jobs, dead letters)

Usage:
  stepwell [--store URL] [--json] COMMAND [flags] [ARG]

Read commands (open the store read-only; never disturb the live writer):
  stats   [--queue Q]               per-queue counts and oldest pending age;
                                    the writer (epoch, heartbeat, address)
  queues                            queue names
  runs    [--state S] [--limit N]   runs: ID, state, current step, submitted
                                    (S: pending, running, cancelling,
                                    succeeded, failed, cancelled,
                                    waiting, paused)
  run     RUN_ID                    one run: record, outcome, step job
  dead    [--queue Q] [--limit N]   dead-lettered jobs (all queues by default)
  job     JOB_ID                    one job: fields, headers, payload, history
  schedules                         schedules: ticks, next tick, last run,
                                    ticks skipped
  limits                            queue limits: rate, burst, max running

Write commands (join the service's cluster as a member, or become the
store's writer for a moment when no process has it open):
  cancel  RUN_ID [--wait D] [--takeover]
                                    cancel a run
  requeue JOB_ID [--wait D] [--takeover]
                                    make a dead job pending again
  retry   RUN_ID [--wait D] [--takeover]
                                    run a failed or cancelled run again from
                                    the step that ended it
  signal  RUN_ID NAME [--payload STR | --payload-file F] [--wait D] [--takeover]
                                    send a signal to a run (wakes it if it
                                    waits for NAME, else kept in its mailbox)
  pause   RUN_ID [--wait D] [--takeover]
                                    stop a run from starting its next step
  resume  RUN_ID [--wait D] [--takeover]
                                    let a paused run go on
  schedules delete NAME [--wait D] [--takeover]
                                    delete a schedule: it ticks no more
  limits  set QUEUE [--per-second F] [--burst N] [--max-running N]
                                    limit a queue's claims in every process
                                    (all 0: remove); limits remove QUEUE

Measure (a store or prefix of its own; without --store, a new mem:// store):
  bench   [--scenario S] [--runs N] [--steps K] [flags]
                                    a synthetic workload through a real
                                    Runtime: transitions/s, latency, object
                                    store requests (S: saturate, steady,
                                    recovery, idle)

Web UI:
  ui      [--listen ADDR] [--auth-token T | --basic-auth U:P] [--write]
                                    serve the web UI of the store (runs, their
                                    history, queues, dead letters, the writer;
                                    cancel, retry, signal...); 127.0.0.1:8080
                                    by default; read-only unless a service in
                                    cluster mode runs (it joins it), or --write

  help    [COMMAND]                 this text, or a command's flags

Global flags (before or after the command):
  --store URL   the store: mem://NAME, file:///ABS/DIR,
                s3://BUCKET?prefix=P/&region=R, gs://BUCKET?prefix=P/,
                azblob://CONTAINER?prefix=P/ (default: $STEPWELL_STORE)
  --json        print one JSON document (stable snake_case fields); a
                failure prints {"error": "...", "code": EXIT_CODE} instead

Write commands and the live writer:
  Only one process at a time writes a store. While a service runs with
  the store open in cluster mode (queue.WithCluster), a write command joins
  it as a member: it finds the writer's address in the store, and the
  writer does the write. With no process on the store (or once the store
  says its writer died), the command becomes the writer for a moment. It
  never creates a store: where none is, it exits 4 and writes nothing. A
  service NOT in cluster mode keeps the store to itself: the command exits
  3 (after 4s; about 10s on buckets); run the operation from inside the
  service (e.g. Runtime.Cancel behind an admin endpoint), after it stops,
  or enable cluster mode. --wait (default 20s) bounds the search for a
  writer in cluster mode; one that does not answer in time is exit 3 too.
  A cluster that uses TLS takes the same files from the command:
  --tls-ca CA.pem --tls-cert CERT.pem --tls-key KEY.pem [--tls-mutual].
  On bucket stores, --takeover writes anyway by FENCING such a writer: its
  next write fails with queue.ErrFenced and it must be restarted. Nothing
  it acknowledged is lost. file:// stores cannot be taken over.

Exit codes:
  0  ok
  1  the operation failed (store error, corrupt record, job not dead, ...)
  2  usage error (bad flags, missing argument, no store, invalid store URL)
  3  a live writer holds the store and this command cannot join it (not in
     cluster mode, or not answering within --wait)
  4  not found (run, job or schedule, or no store at the URL)

Examples:
  export STEPWELL_STORE='s3://acme-jobs?prefix=orders/&region=eu-west-1'
  stepwell stats
  stepwell runs --state failed --limit 20
  stepwell run order-1042 --json
  stepwell --store file:///var/lib/app/stepwell dead --queue workflow-steps
  stepwell requeue 01J9Z3Q4X8T6S7R5P2N0M1K3H4   # while the service runs in cluster mode
`

func main() {
	if code, ok := bench.Helper(); ok { // a process of `stepwell bench --cluster N`
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	name     string
	synopsis string // after "stepwell NAME"
	help     string // what it does, for "stepwell help NAME"
	// flags registers the command's own flags; may be nil.
	flags func(fs *flag.FlagSet)
	// nargs is the number of positional arguments required (0, 1 or 2);
	// -1: any, exec checks them.
	nargs int
	// exec runs the command with its positional arguments.
	exec func(ctx context.Context, c *cli, args []string) error
}

// commands lists the subcommands, in usage order. Each exec closure reads
// the flag values its flags function registered.
func commands() []*command {
	return []*command{
		statsCommand(), queuesCommand(), runsCommand(), runCommand(),
		deadCommand(), jobCommand(), cancelCommand(), requeueCommand(), retryCommand(),
		signalCommand(), pauseCommand(), resumeCommand(), schedulesCommand(),
		limitsCommand(),
		benchCommand(), uiCommand(),
	}
}

// cli holds one invocation's environment and global flags.
type cli struct {
	env            func(string) string
	stdout, stderr io.Writer // what they print is made safe (termSafe)
	// progress is stderr as given, for the CLI's own live lines (a bench's
	// progress redraws its line with '\r'): no stored data goes there.
	progress io.Writer

	store  string // --store
	asJSON bool   // --json
}

// exitError carries the exit code of a failed command. Its message is
// printed as is, prefixed with "stepwell: ".
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &exitError{code: exitNotFound, msg: fmt.Sprintf(format, args...)}
}

func failed(format string, args ...any) error {
	return &exitError{code: exitFailed, msg: fmt.Sprintf(format, args...)}
}

// run is the whole CLI: main calls it with the process's arguments (without
// the program name), environment and output streams, and exits with what
// it returns; tests call it in-process.
func run(args []string, env func(string) string, stdout, stderr io.Writer) int {
	// What the CLI prints quotes what services stored: see termSafe.
	c := &cli{env: env, stdout: newTermSafe(stdout), stderr: newTermSafe(stderr), progress: stderr, asJSON: wantsJSON(args)}
	stdout, stderr = c.stdout, c.stderr

	global := flag.NewFlagSet("stepwell", flag.ContinueOnError)
	global.SetOutput(io.Discard) // parse errors are reported by fail
	global.Usage = func() {}
	c.globalFlags(global)
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return exitOK
		}
		return c.fail(exitUsage, "", err.Error(), "Run 'stepwell --help' for usage.")
	}
	if global.NArg() == 0 {
		if c.asJSON {
			return c.fail(exitUsage, "", "no command", "")
		}
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	name, rest := global.Arg(0), global.Args()[1:]
	if name == "help" {
		return c.helpCommand(rest)
	}
	cmd := lookup(name)
	if cmd == nil {
		return c.fail(exitUsage, "stepwell", fmt.Sprintf("unknown command %q", name), "Run 'stepwell --help' for usage.")
	}

	fs := flag.NewFlagSet("stepwell "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.globalFlags(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.commandUsage(stdout, cmd, fs)
			return exitOK
		}
		return c.fail(exitUsage, "", err.Error(), fmt.Sprintf("Run 'stepwell %s --help' for usage.", cmd.name))
	}
	if cmd.nargs >= 0 && len(pos) != cmd.nargs {
		msg := "missing argument"
		if len(pos) > cmd.nargs {
			msg = fmt.Sprintf("unexpected argument %q", pos[cmd.nargs])
		}
		return c.fail(exitUsage, "stepwell "+cmd.name, msg, fmt.Sprintf("usage: stepwell %s %s", cmd.name, cmd.synopsis))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err = cmd.exec(ctx, c, pos)
	if err == nil {
		return exitOK
	}
	return c.fail(exitCode(err), "stepwell "+cmd.name, err.Error(), "")
}

// wantsJSON reports whether args ask for --json, so that an error found
// before the flag is parsed is reported as JSON too.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-json", "--json", "-json=true", "--json=true", "-json=1", "--json=1":
			return true
		}
	}
	return false
}

// errorJSON is what a failed invocation prints with --json.
type errorJSON struct {
	Error string `json:"error"` // the message the text form prints, without its "stepwell CMD: " prefix
	Code  int    `json:"code"`  // the exit code
}

// fail reports a failed invocation and returns its exit code. As text,
// msg goes to stderr prefixed with "who: " (when who is not ""), then hint
// on a line of its own. With --json, stdout gets one errorJSON document
// instead (in place of the command's result) and stderr nothing: a script
// reads one JSON document from stdout whatever happened.
func (c *cli) fail(code int, who, msg, hint string) int {
	if c.asJSON {
		if err := writeJSON(c.stdout, errorJSON{Error: msg, Code: code}); err != nil {
			fmt.Fprintf(c.stderr, "stepwell: %v\n", err)
		}
		return code
	}
	if who != "" {
		msg = who + ": " + msg
	}
	fmt.Fprintln(c.stderr, msg)
	if hint != "" {
		fmt.Fprintln(c.stderr, hint)
	}
	return code
}

// exitCode classifies an error returned by a command.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, queue.ErrStoreLocked):
		return exitLocked
	case errors.Is(err, queue.ErrInvalidURL), errors.Is(err, runtime.ErrInvalidRunID):
		return exitUsage
	case errors.Is(err, queue.ErrJobNotFound), errors.Is(err, runtime.ErrRunNotFound):
		return exitNotFound
	}
	return exitFailed
}

func lookup(name string) *command {
	for _, cmd := range commands() {
		if cmd.name == name {
			return cmd
		}
	}
	return nil
}

// globalFlags registers the flags every command accepts. Registering them
// on each command's flag set too lets them follow the command name; the
// command's set starts from the values parsed before it.
func (c *cli) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.store, "store", c.store, "store `URL` (default: $"+storeEnv+")")
	fs.BoolVar(&c.asJSON, "json", c.asJSON, "print one JSON document instead of text")
}

// helpCommand implements "stepwell help [COMMAND]".
func (c *cli) helpCommand(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, usageText)
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil || len(args) > 1 {
		return c.fail(exitUsage, "stepwell help", fmt.Sprintf("unknown command %q", strings.Join(args, " ")), "")
	}
	fs := flag.NewFlagSet("stepwell "+cmd.name, flag.ContinueOnError)
	c.globalFlags(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	c.commandUsage(c.stdout, cmd, fs)
	return exitOK
}

func (c *cli) commandUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: stepwell %s %s\n\n%s\nFlags:\n", cmd.name, cmd.synopsis, cmd.help)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nExit codes: 0 ok, 1 failed, 2 usage, 3 store held by a writer this cannot join, 4 not found.\n")
}

// parseInterspersed parses fs from args, allowing flags after positional
// arguments ("run ID --json"). A "--" ends the flags: everything after it
// is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// storeURL returns the store URL from --store or the environment.
func (c *cli) storeURL() (string, error) {
	u := c.store
	if u == "" {
		u = c.env(storeEnv)
	}
	if u == "" {
		return "", usageError("no store: pass --store URL or set %s", storeEnv)
	}
	return u, nil
}

// readRetry bounds the retries of a transient failure of one request while
// a read command loads the store (queue.WithWriteRetry; a program's
// default, 60s, suits a service that waits out an outage). A read fails
// soon instead, with the store's error: an endpoint that refuses
// connections, a server that does not answer. Wrong credentials and other
// refused requests are not retried at all.
const readRetry = 5 * time.Second

// openRead opens the store read-only: it never fences or blocks the writer.
// A URL where no store is (a bucket prefix or a directory that holds no
// store's objects: a typo) is exit 4.
func (c *cli) openRead(ctx context.Context) (*queue.Queue, error) {
	q, err := c.open(ctx, false, queue.WithReadOnly(), queue.WithWriteRetry(readRetry))
	if err != nil {
		return nil, err
	}
	if q.StorageStats().Keys == 0 { // empty, or nothing there
		raw, _ := c.storeURL()
		if err := checkStoreExists(ctx, raw); err != nil {
			q.Close(context.Background())
			return nil, err
		}
	}
	return q, nil
}

// checkStoreExists returns a not-found error if the store's own objects
// (see engine.HasStore) are not under raw: no writer ever opened a store there.
// Other objects do not count: a directory of other files, or one that
// holds a store in a subdirectory, is no store. (A mem:// store is new in
// each process: a command finds nothing there unless its own process made
// it.) It writes nothing.
func checkStoreExists(ctx context.Context, raw string) error {
	if err := checkFileStore(raw); err != nil { // the reason, for a directory
		return err
	}
	where, _ := redact(raw)
	b, err := objstore.Open(ctx, raw)
	switch {
	case errors.Is(err, objstore.ErrInvalidURL):
		return usageError("invalid store URL: %v", err)
	case err != nil:
		return fmt.Errorf("opening the store: %w", err)
	}
	defer b.Close()
	ok, err := engine.HasStore(ctx, b)
	switch {
	case err != nil:
		return fmt.Errorf("reading the store: %w", err)
	case ok:
		return nil
	}
	return notFound("no store at %s: it holds no store's objects (check the bucket or directory, and the prefix)", where)
}

// writeFlags are the flags every write command accepts.
type writeFlags struct {
	takeover bool
	listen   string
	wait     time.Duration
	// TLS of a cluster whose calls use it (queue.ClusterConfig.TLS).
	tlsCA, tlsCert, tlsKey string
	tlsMutual              bool
}

// defaultWait is --wait's default: enough to find a writer that answers,
// or, on a bucket store, to see a dead one's heartbeat stop (2.5 heartbeat
// intervals of 2s) and take its place, or to tell a writer that is not in
// cluster mode (about 10s on a bucket store).
const defaultWait = 20 * time.Second

func (w *writeFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&w.takeover, "takeover", false,
		"on bucket stores, FENCE a live writer this command cannot join (not in cluster mode, or not answering\n"+
			"within --wait) instead of exiting 3: its next write fails and it must be restarted")
	fs.StringVar(&w.listen, "listen", "127.0.0.1:0",
		"`ADDR` to serve cluster members on while this command is the writer of a store in cluster mode\n"+
			"(it is when the service's writer died or closed; queue.ClusterConfig.Listen)")
	fs.DurationVar(&w.wait, "wait", defaultWait,
		"how long (duration `D`) to look for the writer of a store in cluster mode, or to take its place if it died")
	fs.StringVar(&w.tlsCA, "tls-ca", "",
		"for a cluster that uses TLS: PEM `FILE` of the CA certificates that issued the writer's certificate\n"+
			"(default: the system's roots), and the members' with --tls-mutual")
	fs.StringVar(&w.tlsCert, "tls-cert", "",
		"for a cluster that uses TLS (required with any --tls flag): this command's certificate, PEM `FILE`,\n"+
			"shown to a writer that requires one, and served to members while this command is the writer")
	fs.StringVar(&w.tlsKey, "tls-key", "", "the private key of --tls-cert, PEM `FILE`")
	fs.BoolVar(&w.tlsMutual, "tls-mutual", false,
		"while this command is the writer, require members' certificates issued by --tls-ca (mutual TLS)")
}

// tlsConfig returns the cluster TLS config the --tls flags describe, or
// nil if none is set. A process serves with it while it is the writer
// and dials with it as a member (see queue.ClusterConfig.TLS).
func (w *writeFlags) tlsConfig() (*tls.Config, error) {
	if w.tlsCA == "" && w.tlsCert == "" && w.tlsKey == "" && !w.tlsMutual {
		return nil, nil
	}
	if w.tlsCert == "" || w.tlsKey == "" {
		// The command becomes the writer if the service's died: it then
		// serves members, with its certificate.
		return nil, usageError("TLS needs --tls-cert and --tls-key: the command serves members if it becomes the writer")
	}
	if w.tlsMutual && w.tlsCA == "" {
		return nil, usageError("--tls-mutual needs --tls-ca")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if w.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(w.tlsCert, w.tlsKey)
		if err != nil {
			return nil, usageError("--tls-cert, --tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if w.tlsCA != "" {
		pem, err := os.ReadFile(w.tlsCA)
		if err != nil {
			return nil, usageError("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageError("--tls-ca: no PEM certificate in %s", w.tlsCA)
		}
		cfg.RootCAs, cfg.ClientCAs = pool, pool
	}
	if w.tlsMutual {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// openWrite opens the store for a write command, in cluster mode
// (queue.WithCluster): while a writer in cluster mode runs, this command
// joins it as a member and every write is that writer's; if no process
// has the store open, or the store says its writer died, this command
// becomes the writer until it closes the store. A writer that is not in
// cluster mode, or that does not answer within w.wait, is exit 3, unless
// w.takeover fences it (bucket stores). A URL where no store is, is exit
// 4 (see checkStoreExists, which has w.wait of its own): the command does
// not create one. So a mem:// store, which is new in each process, is one
// only in-process (the tests), where it is opened directly: it cannot be
// shared.
func (c *cli) openWrite(ctx context.Context, w writeFlags) (*queue.Queue, error) {
	raw, err := c.storeURL()
	if err != nil {
		return nil, err
	}
	if w.wait <= 0 {
		return nil, usageError("--wait must be positive")
	}
	tlsCfg, err := w.tlsConfig()
	if err != nil {
		return nil, err
	}
	// A write command never creates a store: where none is (a typo, or a
	// store not yet opened by its service), it exits 4 as a read command
	// does, before anything is opened for writing.
	cctx, ccancel := context.WithTimeout(ctx, w.wait)
	err = checkStoreExists(cctx, raw)
	ccancel()
	if err != nil {
		return nil, err
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme == "mem" {
		return c.open(ctx, w.takeover)
	}
	wctx, cancel := context.WithTimeout(ctx, w.wait)
	defer cancel()
	q, err := c.open(wctx, w.takeover, queue.WithCluster(queue.ClusterConfig{Listen: w.listen, TLS: tlsCfg}))
	if err == nil || ctx.Err() != nil {
		return q, err
	}
	var ee *exitError
	locked := errors.As(err, &ee) && ee.code == exitLocked // a writer not in cluster mode
	if !locked && wctx.Err() == nil {
		return nil, err
	}
	if w.takeover && fenceable(raw) {
		return c.open(ctx, true, queue.WithTakeover())
	}
	if locked {
		return nil, err
	}
	// Neither a member nor the writer within --wait: the writer the store
	// names does not answer here, and the store does not say it is dead;
	// or it names none (a writer not in cluster mode, and --wait was too
	// short to tell).
	addr := advertised(ctx, raw)
	if addr == "" {
		return nil, lockedError(raw, w.takeover)
	}
	return nil, unreachableError(raw, addr, w.wait, w.takeover)
}

// advertised returns the address the store's owner object advertises for
// its writer in cluster mode, or "" if it names none or cannot be read. It
// only explains a failure: queue.Open decides who writes.
func advertised(ctx context.Context, raw string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := objstore.Open(ctx, raw)
	if err != nil {
		return ""
	}
	defer b.Close()
	own, err := engine.ReadOwner(ctx, b)
	if err != nil || own == nil {
		return ""
	}
	return own.Addr
}

// fenceable reports whether raw names a bucket store, whose writer
// --takeover can fence (file:// locks die with their process only).
func fenceable(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme != "file" && u.Scheme != "mem"
}

func (c *cli) open(ctx context.Context, takeover bool, opts ...queue.Option) (*queue.Queue, error) {
	raw, err := c.storeURL()
	if err != nil {
		return nil, err
	}
	if err := checkFileStore(raw); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q, err := queue.Open(ctx, raw, append(opts, queue.WithLogger(logger))...)
	switch {
	case err == nil:
		return q, nil
	case errors.Is(err, queue.ErrInvalidURL):
		return nil, usageError("invalid store URL: %v", err)
	case errors.Is(err, queue.ErrStoreLocked):
		return nil, lockedError(raw, takeover)
	case errors.Is(err, objstore.ErrNotFound):
		// No such bucket, or nothing there: say so. (Else an object
		// missing from a store: a corrupt store.)
		if nf := checkStoreExists(ctx, raw); exitCode(nf) == exitNotFound {
			return nil, nf
		}
	}
	return nil, fmt.Errorf("opening the store: %w", err)
}

// lockedError explains ErrStoreLocked to an operator: a live writer holds
// the store and, not being in cluster mode, serves no members.
func lockedError(raw string, takeover bool) error {
	where, scheme := redact(raw)
	var b strings.Builder
	fmt.Fprintf(&b, "the store %s is in use by a live writer that is not in cluster mode:\n", where)
	b.WriteString("another process has it open without queue.WithCluster, so this command cannot join it as a\n")
	b.WriteString("member. Run this command from inside that process (for example an admin endpoint calling the\n")
	b.WriteString("same API), after it stops, or open the store there with queue.WithCluster.")
	lastResort(&b, scheme, takeover)
	return &exitError{code: exitLocked, msg: b.String()}
}

// unreachableError explains a writer in cluster mode, advertised at addr,
// that did not answer within wait while the store did not say it is dead.
func unreachableError(raw, addr string, wait time.Duration, takeover bool) error {
	where, scheme := redact(raw)
	var b strings.Builder
	fmt.Fprintf(&b, "the store %s is in use by a live writer in cluster mode at %s\n", where, addr)
	fmt.Fprintf(&b, "that did not answer within %v, and the store does not say it is dead. Check that this host\n", wait)
	b.WriteString("can reach that address (the writer's queue.ClusterConfig Listen and Advertise), that the --tls\n")
	b.WriteString("flags match the cluster's TLS (none: plaintext), or retry with a longer --wait.")
	lastResort(&b, scheme, takeover)
	return &exitError{code: exitLocked, msg: b.String()}
}

// lastResort appends what --takeover can do on this store.
func lastResort(b *strings.Builder, scheme string, takeover bool) {
	switch {
	case scheme == "file":
		b.WriteString("\nfile:// stores cannot be taken over: the lock is released when that process exits.")
	case !takeover && scheme != "mem":
		b.WriteString("\nAs a last resort, --takeover makes this command the writer by FENCING the live\n")
		b.WriteString("process: its next write fails (queue.ErrFenced) and it must be restarted.")
	}
}

// redact returns raw without its password, and its scheme.
func redact(raw string) (where, scheme string) {
	u, err := url.Parse(raw)
	if err != nil {
		return raw, ""
	}
	return u.Redacted(), u.Scheme
}

// checkFileStore refuses a file:// URL whose directory does not exist, or
// is not a directory, saying so: an operator's typo. Other URLs (and
// malformed ones) are left to queue.Open.
func checkFileStore(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "file" || u.Host != "" || !filepath.IsAbs(u.Path) {
		return nil
	}
	fi, err := os.Stat(u.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return notFound("no store at %s: the directory does not exist", raw)
	case err != nil:
		return failed("store directory: %v", err)
	case !fi.IsDir():
		return notFound("no store at %s: not a directory", raw)
	}
	return nil
}

// closeQueue closes q; a close error of a writer fails the command unless
// it already failed.
func closeQueue(q *queue.Queue, err *error) {
	if cerr := q.Close(context.Background()); cerr != nil && *err == nil {
		*err = fmt.Errorf("closing the store: %w", cerr)
	}
}
