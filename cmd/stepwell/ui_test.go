package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// TestUILoopbackAnswersLocalhostOnly: without authentication the UI
// serves a loopback address, and answers only requests addressed to this
// machine's names there. A page of another site whose DNS points at
// 127.0.0.1 (DNS rebinding) is same-origin to the browser: it could read
// the pages and their form tokens and post actions. Its requests carry
// its own name as Host, and are refused. (Before, they were served: a
// probe cancelled a run that way.)
func TestUILoopbackAnswersLocalhostOnly(t *testing.T) {
	auth, err := uiAuth("127.0.0.1:8080", "", "", false)
	if err != nil || auth == nil {
		t.Fatalf("uiAuth on loopback without auth = %v, %v; want a Host check", auth != nil, err)
	}
	for host, ok := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "LOCALHOST:8080": true, "[::1]:8080": true,
		"127.0.0.2": true, "localhost": true, "[::1]": true, "localhost.:8080": true,
		"attacker.example:8080": false, "127.0.0.1.nip.io:8080": false, "localhost.attacker.example": false,
		"10.0.0.1:8080": false, "": false,
	} {
		r := httptest.NewRequest(http.MethodGet, "/runs", nil)
		r.Host = host
		w := httptest.NewRecorder()
		if got := auth(w, r); got != ok || !ok && w.Code != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: served %v (code %d), want %v", host, got, w.Code, ok)
		}
	}
	// With authentication the credentials decide, whatever the name.
	if auth, err := uiAuth("127.0.0.1:8080", "0123456789abcdef-token", "", false); err != nil || auth == nil {
		t.Fatalf("uiAuth with a token = %v", err)
	}
}

func TestUIRefusesOpenListenWithoutAuth(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "not a loopback address"},
		{[]string{"--listen", ":0"}, "not a loopback address"},
		{[]string{"--listen", "[::]:0"}, "not a loopback address"},
		{[]string{"--listen", "0.0.0.0:0", "--auth-token", "short"}, "at least 16"},
		{[]string{"--listen", "0.0.0.0:0", "--basic-auth", "nopass"}, "USER:PASS"},
		{[]string{"--auth-token", "0123456789abcdef", "--insecure-no-auth"}, "exclusive"},
		{[]string{"--listen", "nohost"}, "--listen"},
	} {
		r := runCLI(t, nil, append([]string{"--store", f.url, "ui"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("ui %v: exit %d, stderr %q; want exit 2 saying %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// uiProcess is `stepwell ui` running as a process of its own.
type uiProcess struct {
	cmd    *exec.Cmd
	url    string // what it printed
	stderr *testenv.Buffer
}

func startUI(t *testing.T, args ...string) *uiProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &uiProcess{cmd: exec.Command(exe, append([]string{"ui", "--listen", "127.0.0.1:0"}, args...)...),
		stderr: &testenv.Buffer{}}
	p.cmd.Env = append(os.Environ(), cliEnv+"=1")
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		_ = p.cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Scan()
		line <- sc.Text()
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		m := regexp.MustCompile(`serving (\S+)`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("stepwell ui printed %q; stderr:\n%s", l, p.stderr)
		}
		p.url = m[1]
	case <-time.After(testenv.Scale(60 * time.Second)):
		t.Fatalf("stepwell ui did not start; stderr:\n%s", p.stderr)
	}
	return p
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUIServes runs `stepwell ui --write` with a token on a store no
// process has open: it becomes the writer, asks for the token, and shows
// the runs. Interrupted, it exits 0 and closes the store.
func TestUIServes(t *testing.T) {
	f := newFixture(t)
	p := startUI(t, "--store", f.url, "--auth-token", "0123456789abcdef-token", "--write")
	if !strings.Contains(p.url, "?token=0123456789abcdef-token") || !strings.Contains(p.url, "127.0.0.1:") {
		t.Fatalf("printed URL %q", p.url)
	}
	base := p.url[:strings.Index(p.url, "runs?")]
	if code, _ := get(t, http.DefaultClient, base+"runs"); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d", code)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	code, body := get(t, c, p.url)
	if code != 200 || !strings.Contains(body, "order-1") || strings.Contains(body, "Read-only") {
		t.Fatalf("with the token: %d\n%.2000s", code, body)
	}
	if code, body := get(t, c, base+"store"); code != 200 || !strings.Contains(body, "writer") {
		t.Errorf("store page: %d\n%.2000s", code, body)
	}
	if code, body := get(t, c, base+"run?id=order-3"); code != 200 || !strings.Contains(body, `id="cancel"`) {
		t.Errorf("run page of the writer: %d, no cancel button\n%.3000s", code, body)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("stepwell ui after an interrupt: %v; stderr:\n%s", err, p.stderr)
	}
}

// TestUIReadOnlyWhileLocked: a writer that is not in cluster mode holds
// the store; the UI, even with --write, opens it read-only and says why.
func TestUIReadOnlyWhileLocked(t *testing.T) {
	f := newFixture(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hold := exec.Command(exe)
	hold.Env = append(os.Environ(), holdEnv+"="+f.dir)
	hold.Stderr = os.Stderr
	stdin, err := hold.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = hold.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	p := startUI(t, "--store", f.url, "--wait", "5s", "--write")
	code, body := get(t, http.DefaultClient, p.url+"run?id=order-3")
	if code != 200 || !strings.Contains(body, "Read-only: another process writes the store") || strings.Contains(body, `id="cancel"`) {
		t.Fatalf("UI on a locked store: %d\n%.3000s", code, body)
	}
	if !strings.Contains(p.stderr.String(), "read-only") {
		t.Errorf("stderr does not say read-only: %s", p.stderr)
	}
}

// TestUIJoinsCluster: with a service running the store in cluster mode,
// `stepwell ui` joins it as a member, and a cancel posted from the UI's
// page (with the page's form token) stops the step the service runs.
func TestUIJoinsCluster(t *testing.T) {
	f := newClusterFixture(t, "file://"+t.TempDir()) // slow-1 and slow-2 pending
	s := startService(t, f.url, "")
	defer s.stop(t)
	s.expect(t, "running slow-1")
	p := startUI(t, "--store", f.url)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if code, body := get(t, c, p.url+"store"); code != 200 || !strings.Contains(body, "member") {
		t.Fatalf("store page: %d\n%.2000s", code, body)
	}
	code, body := get(t, c, p.url+"run?id=slow-1")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if code != 200 || m == nil || !strings.Contains(body, `id="cancel"`) {
		t.Fatalf("run page: %d\n%.3000s", code, body)
	}
	form := "id=slow-1&csrf=" + m[1]
	resp, err := c.Post(p.url+"run/cancel", "application/x-www-form-urlencoded", strings.NewReader("id=slow-1"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cancel without the token: %d", resp.StatusCode)
	}
	resp, err = c.Post(p.url+"run/cancel", "application/x-www-form-urlencoded", strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %d", resp.StatusCode)
	}
	s.expect(t, "stopped slow-1")
	testenv.Eventually(t, 30*time.Second, "slow-1 cancelled on the UI's page", func() bool {
		_, body := get(t, c, p.url+"run?id=slow-1")
		return strings.Contains(body, `id="run-state">cancelled<`)
	})
	// slow-2 too, so that the service stops at once.
	resp, err = c.Post(p.url+"run/cancel", "application/x-www-form-urlencoded", strings.NewReader("id=slow-2&csrf="+m[1]))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s.expect(t, "stopped slow-2")
}

// TestUIJoinsClusterStartedLater: a UI that opened the store read-only
// because no writer ran joins a service in cluster mode started after it,
// as pages load: the next pages are a member's, with their actions, and
// its cancel reaches the service's writer.
func TestUIJoinsClusterStartedLater(t *testing.T) {
	f := newClusterFixture(t, "file://"+t.TempDir()) // slow-1 and slow-2 pending
	p := startUI(t, "--store", f.url)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if code, body := get(t, c, p.url+"run?id=slow-1"); code != 200 ||
		!strings.Contains(body, "Read-only: no writer in cluster mode runs on this store") || strings.Contains(body, `id="cancel"`) {
		t.Fatalf("run page before any writer: %d\n%.3000s", code, body)
	}
	s := startService(t, f.url, "")
	defer s.stop(t)
	s.expect(t, "running slow-1")
	var csrf string
	testenv.Eventually(t, 60*time.Second, "the UI to join the service's writer", func() bool {
		_, body := get(t, c, p.url+"run?id=slow-1")
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
		if m == nil || !strings.Contains(body, `id="cancel"`) || strings.Contains(body, "Read-only:") {
			return false
		}
		csrf = m[1]
		return true
	})
	if code, body := get(t, c, p.url+"store"); code != 200 || !strings.Contains(body, `<span class="badge">member</span>`) {
		t.Fatalf("store page after joining: %d\n%.2000s", code, body)
	}
	if !strings.Contains(p.stderr.String(), "joined the store's writer in cluster mode as a member") {
		t.Errorf("stderr does not say the UI joined: %s", p.stderr)
	}
	for _, id := range []string{"slow-1", "slow-2"} {
		resp, err := c.Post(p.url+"run/cancel", "application/x-www-form-urlencoded", strings.NewReader("id="+id+"&csrf="+csrf))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("cancel %s: %d", id, resp.StatusCode)
		}
	}
	s.expect(t, "stopped slow-1")
	testenv.Eventually(t, 30*time.Second, "slow-1 cancelled on the UI's page", func() bool {
		_, body := get(t, c, p.url+"run?id=slow-1")
		return strings.Contains(body, `id="run-state">cancelled<`)
	})
}

// TestUIReadOnlyByDefault: on a store that no process writes, `stepwell
// ui` opens it read-only (it does not become the writer), says on every
// page why and how to enable actions (--write), and a service that opens
// the store NOT in cluster mode, while the UI runs, opens it and submits
// a run, which the UI shows (it brings the store up to date).
func TestUIReadOnlyByDefault(t *testing.T) {
	f := newFixture(t)
	p := startUI(t, "--store", f.url)
	for _, page := range []string{"runs", "run?id=order-3", "queues", "store"} {
		code, body := get(t, http.DefaultClient, p.url+page)
		if code != 200 || !strings.Contains(body, "Read-only: no writer in cluster mode runs on this store") ||
			!strings.Contains(body, "--write") || strings.Contains(body, `id="cancel"`) {
			t.Fatalf("%s: %d\n%.3000s", page, code, body)
		}
	}
	if !strings.Contains(p.stderr.String(), "read-only") {
		t.Errorf("stderr does not say read-only: %s", p.stderr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, f.url) // a service, not in cluster mode
	if err != nil {
		t.Fatalf("a service opening the store while the UI runs: %v", err)
	}
	rt, err := runtime.New(q, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "order-9", Input: []byte("order nine")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the UI to show order-9", func() bool {
		_, body := get(t, http.DefaultClient, p.url+"run?id=order-9")
		return strings.Contains(body, `id="run-state">pending<`)
	})
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUIAfterClusterWriterKilled: the store names a writer in cluster
// mode, SIGKILLed while it ran a step. `stepwell ui` tries to join it,
// takes its place as a write command would, gives it up at once and
// opens the store read-only: a service NOT in cluster mode opens the
// store while the UI runs.
func TestUIAfterClusterWriterKilled(t *testing.T) {
	f := newClusterFixture(t, "file://"+t.TempDir())
	s := startService(t, f.url, "")
	s.expect(t, "running slow-1")
	s.kill(t)
	p := startUI(t, "--store", f.url, "--wait", "10s")
	code, body := get(t, http.DefaultClient, p.url+"run?id=slow-1")
	if code != 200 || !strings.Contains(body, "Read-only: no writer in cluster mode runs on this store") ||
		strings.Contains(body, `id="cancel"`) {
		t.Fatalf("UI after the cluster writer was killed: %d\n%.3000s", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, f.url)
	if err != nil {
		t.Fatalf("a service opening the store while the UI runs: %v", err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
