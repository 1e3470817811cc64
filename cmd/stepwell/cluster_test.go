package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// The test binary, re-executed, plays the other processes of these tests:
// with serveEnv set to a store URL it is a service that runs the store in
// cluster mode (see serveStore); with cliEnv set it is the stepwell
// command itself, run with the process's arguments.
const (
	serveEnv     = "STEPWELL_CLI_TEST_SERVE"
	advertiseEnv = "STEPWELL_CLI_TEST_ADVERTISE" // the service's ClusterConfig.Advertise
	tlsEnv       = "STEPWELL_CLI_TEST_TLS"       // "CA,CERT,KEY" files: the service uses mutual TLS
	cliEnv       = "STEPWELL_CLI_TEST_MAIN"
)

// serveStore is a service on the store at url, in cluster mode: it
// runs steps until its stdin closes, then closes the store and exits 0.
// Runs whose ID starts with "slow-" block in their step until it is
// cancelled; every other step succeeds with "done by the service". It
// prints "ready" once it is the writer and its Runtime runs, and a line
// when a slow step starts ("running ID") and stops ("stopped ID: CAUSE").
func serveStore(url string) {
	ctx, stop := context.WithCancel(context.Background())
	cfg := queue.ClusterConfig{Listen: "127.0.0.1:0", Advertise: os.Getenv(advertiseEnv)}
	if files := strings.Split(os.Getenv(tlsEnv), ","); len(files) == 3 {
		cert, err := tls.LoadX509KeyPair(files[1], files[2])
		ca, _ := os.ReadFile(files[0])
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(ca) {
			fmt.Fprintln(os.Stderr, "serve: TLS files:", err)
			os.Exit(1)
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert}
	}
	q, err := queue.Open(ctx, url, queue.WithCluster(cfg))
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve: open:", err)
		os.Exit(1)
	}
	if r := q.Role(); r != queue.RoleWriter {
		fmt.Fprintln(os.Stderr, "serve: role", r, "want writer")
		os.Exit(1)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		if strings.HasPrefix(s.RunID, "slow-") {
			say("running %s", s.RunID)
			<-ctx.Done()
			say("stopped %s: %v", s.RunID, context.Cause(ctx))
			return steprunner.Outcome{}, context.Cause(ctx)
		}
		return steprunner.Succeed([]byte("done by the service")), nil
	})
	rt, err := runtime.New(q, runner, terminal.Noop, runtime.WithPollInterval(5*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve: runtime:", err)
		os.Exit(1)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	say("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes our stdin
	stop()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "serve: run:", err)
		os.Exit(1)
	}
	if err := q.Close(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "serve: close:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// service is a serveStore child process.
type service struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, line by line; closed at EOF
	seen  []string    // lines read from lines that expect did not return yet
}

// startService starts a service on the store at url and waits until it
// is ready. advertise, if set, is the address it advertises to members.
func startService(t *testing.T, url, advertise string, env ...string) *service {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), serveEnv+"="+url, advertiseEnv+"="+advertise), env...)
	cmd.Stderr = os.Stderr
	s := &service{cmd: cmd, lines: make(chan string, 64)}
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	s.expect(t, "ready")
	return s
}

// expect waits for the service to print a line starting with prefix (in
// any order with the other lines), and returns it.
func (s *service) expect(t *testing.T, prefix string) string {
	t.Helper()
	for i, line := range s.seen {
		if strings.HasPrefix(line, prefix) {
			s.seen = append(s.seen[:i], s.seen[i+1:]...)
			return line
		}
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("the service exited before printing %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
			s.seen = append(s.seen, line)
		case <-timeout:
			t.Fatalf("the service did not print %q within 30s", prefix)
		}
	}
}

// stop closes the service's stdin and checks that it closed the store
// and exited 0.
func (s *service) stop(t *testing.T) {
	t.Helper()
	s.stdin.Close()
	for range s.lines {
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("service: %v", err)
	}
}

// kill kills the service as a crash would.
func (s *service) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for range s.lines {
	}
	_ = s.cmd.Wait()
}

// cliProcess runs the stepwell command as a process of its own (this test
// binary, re-executed) on f's store.
func (f *fixture) cliProcess(t *testing.T, args ...string) result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"--store", f.url}, args...)...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// cliProcessJSON runs the command with --json as a process, requires exit
// code 0, and decodes its output into v.
func (f *fixture) cliProcessJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	r := f.cliProcess(t, append(args, "--json")...)
	if r.code != exitOK {
		t.Fatalf("stepwell %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stepwell %s --json: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
}

// waitRun polls the run (a read command) until its state is want.
func (f *fixture) waitRun(t *testing.T, id, want string) runJSON {
	t.Helper()
	var r runJSON
	defer func() {
		if t.Failed() {
			t.Logf("run %s: last %+v", id, r)
		}
	}()
	testenv.Eventually(t, 30*time.Second, "run "+id+" to be "+want, func() bool {
		r = runJSON{}
		f.okJSON(t, &r, "run", id)
		return r.State == want
	})
	return r
}

// newClusterFixture makes the store at url (new and empty) a closed store
// holding:
//
//	fail-1   failed: its step failed permanently; its job is dead
//	slow-1   pending at step 0
//	slow-2   pending at step 0
//	email-1  a dead job of the plain queue "emails"
func newClusterFixture(t *testing.T, url string) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	f := &fixture{url: url}
	q, err := queue.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	fail := steprunner.RunnerFunc(func(context.Context, *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Outcome{}, steprunner.Permanent(errors.New("card declined"))
	})
	rt, err := runtime.New(q, fail, terminal.Noop, runtime.WithPollInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "fail-1", Input: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	testenv.Eventually(t, 60*time.Second, "fail-1 to fail", func() bool {
		st, err := rt.Status(ctx, "fail-1")
		if err != nil {
			t.Fatal(err)
		}
		return st.State == runtime.StateFailed
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"slow-1", "slow-2"} {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: id, Input: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	deadEmail(ctx, t, q, nil)
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestWriteCommandsJoinCluster: while a service runs the store in cluster
// mode (another process), cancel, requeue and retry, each run as a process
// of its own, join it as members and exit 0, and the service's writer
// does what they asked: the cancel reaches the step running in the
// service, the requeued job is pending, the retried run runs in the
// service. Once the service is killed, a write command becomes the writer
// (on file:// at once, on a bucket once the heartbeat has stopped for 2.5
// intervals); a writer in cluster mode that does not answer is exit 3
// after --wait, and the command changes nothing.
func TestWriteCommandsJoinCluster(t *testing.T) {
	for name, store := range map[string]func(t *testing.T) string{
		"file": func(t *testing.T) string { return "file://" + t.TempDir() },
		"s3":   func(t *testing.T) string { return testenv.S3(t) },
	} {
		t.Run(name, func(t *testing.T) { testWriteCommandsJoinCluster(t, store(t)) })
	}
}

func testWriteCommandsJoinCluster(t *testing.T, url string) {
	f := newClusterFixture(t, url)
	svc := startService(t, f.url, "")
	svc.expect(t, "running slow-1")
	svc.expect(t, "running slow-2")

	// cancel: the service's step is told to stop.
	var c cancelJSON
	f.cliProcessJSON(t, &c, "cancel", "slow-1")
	if !c.Cancelled || (c.State != "cancelling" && c.State != "cancelled") {
		t.Errorf("cancel slow-1 = %+v, want cancelled, state cancelling or cancelled", c)
	}
	if line := svc.expect(t, "stopped slow-1"); !strings.Contains(line, steprunner.ErrRunCancelled.Error()) {
		t.Errorf("the service's step stopped with %q, want the run's cancel", line)
	}
	f.waitRun(t, "slow-1", "cancelled")

	// requeue: the dead job is pending again.
	var rq requeueJSON
	f.cliProcessJSON(t, &rq, "requeue", "email-1")
	if rq != (requeueJSON{JobID: "email-1", Queue: "emails"}) {
		t.Errorf("requeue email-1 = %+v", rq)
	}
	var job jobJSON
	f.okJSON(t, &job, "job", "email-1")
	if job.State != "pending" || job.Attempt != 0 {
		t.Errorf("email-1 after requeue = %+v", job)
	}

	// retry: the failed run goes on, run by the service.
	var rt retryJSON
	f.cliProcessJSON(t, &rt, "retry", "fail-1")
	if rt.RunID != "fail-1" || rt.Retries != 1 || rt.Step != 0 {
		t.Errorf("retry fail-1 = %+v", rt)
	}
	if r := f.waitRun(t, "fail-1", "succeeded"); r.ResultText == nil || *r.ResultText != "done by the service" {
		t.Errorf("fail-1 after retry = %+v, want the service's result", r)
	}

	// pause, resume and signal, through the service's writer: slow-2's
	// step runs on meanwhile.
	var p pauseJSON
	f.cliProcessJSON(t, &p, "pause", "slow-2")
	if p != (pauseJSON{RunID: "slow-2", Changed: true, State: "running"}) {
		t.Errorf("pause slow-2 = %+v", p)
	}
	var r2 runJSON
	if f.okJSON(t, &r2, "run", "slow-2"); !r2.Paused {
		t.Errorf("slow-2 after pause = %+v", r2)
	}
	f.cliProcessJSON(t, &p, "resume", "slow-2")
	if p != (pauseJSON{RunID: "slow-2", Changed: true, State: "running"}) {
		t.Errorf("resume slow-2 = %+v", p)
	}
	var sig signalJSON
	f.cliProcessJSON(t, &sig, "signal", "slow-2", "nudge", "--payload", "hi")
	if sig != (signalJSON{RunID: "slow-2", Signal: "nudge", State: "running"}) {
		t.Errorf("signal slow-2 = %+v", sig)
	}

	// The service is killed while its slow-2 step runs: the store still
	// names its address, and the command becomes the writer in its place.
	svc.kill(t)
	began := time.Now()
	f.cliProcessJSON(t, &c, "cancel", "slow-2")
	if !c.Cancelled {
		t.Errorf("cancel slow-2 after the service died = %+v", c)
	}
	t.Logf("cancel after the service was killed took %v", time.Since(began))

	// A service whose advertised address does not answer: exit 3 after
	// --wait, with the address in the message, and nothing changed.
	svc = startService(t, f.url, "127.0.0.1:1")
	// stats names the writer, as the store's owner object does.
	var st statsJSON
	f.okJSON(t, &st, "stats")
	if w := st.Writer; w == nil || w.ClusterAddr != "127.0.0.1:1" || w.Closed || w.Epoch == 0 || w.ID == "" {
		t.Errorf("stats: writer %+v, want the service's, at 127.0.0.1:1", w)
	} else if strings.HasPrefix(f.url, "s3:") && (w.HeartbeatAgeSeconds == nil || *w.HeartbeatAgeSeconds > 10) {
		t.Errorf("stats: the live writer's heartbeat age is %v, want a few seconds at most (%+v)", w.HeartbeatAgeSeconds, w)
	}
	if out := f.ok(t, "stats"); !strings.Contains(out, "(cluster mode, serving members at 127.0.0.1:1)") ||
		strings.HasPrefix(f.url, "s3:") && !strings.Contains(out, "ago (#") {
		t.Errorf("stats does not name the writer:\n%s", out)
	}
	r := f.cliProcess(t, "retry", "slow-1", "--wait", "1s")
	if r.code != exitLocked || r.stdout != "" || !strings.Contains(r.stderr, "127.0.0.1:1") ||
		!strings.Contains(r.stderr, "did not answer within 1s") {
		t.Errorf("retry with the writer unreachable: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	svc.stop(t)
	var r1 runJSON
	f.okJSON(t, &r1, "run", "slow-1")
	if r1.State != "cancelled" {
		t.Errorf("slow-1 after the refused retry = %+v", r1)
	}
}

// TestWriteCommandsJoinTLSCluster: a write command joins a service whose
// cluster uses mutual TLS when given the cluster's --tls files; without
// them, or with a certificate another CA issued, it cannot join, exits 3
// after --wait and changes nothing. Bad --tls flags (and TLS without a
// certificate to serve with) are usage errors.
func TestWriteCommandsJoinTLSCluster(t *testing.T) {
	f := newClusterFixture(t, "file://"+t.TempDir())
	dir := t.TempDir()
	ca, cert, key := testenv.NewCA(t).WriteFiles(t, dir, "127.0.0.1")
	svc := startService(t, f.url, "", tlsEnv+"="+ca+","+cert+","+key)
	svc.expect(t, "running slow-1")

	other := t.TempDir()
	_, otherCert, otherKey := testenv.NewCA(t).WriteFiles(t, other, "127.0.0.1")
	for name, args := range map[string][]string{
		"plaintext": nil,
		"untrusted": {"--tls-ca", ca, "--tls-cert", otherCert, "--tls-key", otherKey},
	} {
		r := f.cliProcess(t, append([]string{"cancel", "slow-1", "--wait", "2s"}, args...)...)
		if r.code != exitLocked || r.stdout != "" || !strings.Contains(r.stderr, "--tls") {
			t.Errorf("%s: cancel exit %d, stdout %q, stderr %q; want exit 3 naming the --tls flags", name, r.code, r.stdout, r.stderr)
		}
	}
	var run runJSON
	f.okJSON(t, &run, "run", "slow-1")
	if run.State != "running" {
		t.Fatalf("slow-1 after the refused cancels = %+v", run)
	}

	var c cancelJSON
	f.cliProcessJSON(t, &c, "cancel", "slow-1", "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "--tls-mutual")
	if !c.Cancelled {
		t.Errorf("cancel with the cluster's TLS files = %+v", c)
	}
	if line := svc.expect(t, "stopped slow-1"); !strings.Contains(line, steprunner.ErrRunCancelled.Error()) {
		t.Errorf("the service's step stopped with %q, want the run's cancel", line)
	}

	for _, args := range [][]string{
		{"--tls-cert", cert},
		{"--tls-ca", ca}, // no certificate to serve members with
		{"--tls-mutual", "--tls-ca", ca},
		{"--tls-ca", filepath.Join(dir, "missing.pem")},
		{"--tls-ca", key},
	} {
		r := f.cliProcess(t, append([]string{"cancel", "slow-2"}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--tls") {
			t.Errorf("cancel %v: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
	svc.stop(t)
}
