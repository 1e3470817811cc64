package ui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/ui"
)

const waitTimeout = 15 * time.Second

// hostile strings: markup, quotes, a URL scheme, invalid UTF-8.
const (
	hostileID     = `"><img src=x onerror=alert(1)><script>alert('id')<`
	hostileHeader = "<script>alert(\"h\")</script>\xff\xfe'\""
	hostileError  = "</pre><script>alert('err')</script>\xc3\x28 javascript:alert(1)"
)

// testRunner: runs whose ID starts with "wait" await signal "go" and then
// succeed with its payload; "fail" fail at once with a permanent hostile
// error (their step is dead-lettered); "retry" fail transiently (a hostile
// error) until attempt 3; "block" run until cancelled; the others succeed
// with their input.
func testRunner() steprunner.Runner {
	return steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case strings.HasPrefix(s.RunID, "wait"):
			if s.Signal != nil {
				return steprunner.Succeed(s.Payload), nil
			}
			return steprunner.AwaitSignal("go", 0), nil
		case strings.HasPrefix(s.RunID, "fail"):
			return steprunner.Outcome{}, steprunner.Permanent(errors.New(hostileError + strings.Repeat("x", 1<<20)))
		case strings.HasPrefix(s.RunID, "retry") && s.Attempt < 3:
			return steprunner.Outcome{}, errors.New(hostileError)
		case strings.HasPrefix(s.RunID, "block"):
			<-ctx.Done()
			return steprunner.Outcome{}, context.Cause(ctx)
		}
		return steprunner.Succeed(s.Payload), nil
	})
}

type env struct {
	t   *testing.T
	q   *queue.Queue
	rt  *runtime.Runtime
	h   http.Handler
	url string
}

// newEnv opens a fresh mem:// store with a Runtime that runs testRunner
// (none when runner is nil: a client Runtime, so that nothing in the
// background writes the store) and the UI over it with opts.
func newEnv(t *testing.T, runner steprunner.Runner, opts ui.Options) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	url := testenv.MemURL("ui-test")
	q, err := queue.Open(ctx, url, queue.WithRetryBackoff(time.Millisecond, 5*time.Millisecond),
		queue.WithPollInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(q, runner, nil, runtime.WithPollInterval(5*time.Millisecond),
		runtime.WithDrainTimeout(50*time.Millisecond)) // "block" steps stop at once at the end
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	if runner != nil {
		go func() { defer close(done); _ = rt.Run(ctx) }()
	} else {
		close(done)
	}
	t.Cleanup(func() {
		cancel()
		<-done
		_ = q.Close(context.Background())
	})
	h, err := ui.New(rt, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, q: q, rt: rt, h: h, url: url}
}

// resp is a served response.
type resp struct {
	code   int
	header http.Header
	body   string
}

func (e *env) do(req *http.Request) resp {
	e.t.Helper()
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return resp{code: w.Code, header: w.Result().Header, body: string(b)}
}

func (e *env) get(path string) resp {
	e.t.Helper()
	return e.do(httptest.NewRequest("GET", path, nil))
}

// browser is a client with the UI's cookies: it GETs pages and posts
// their forms with their tokens.
type browser struct {
	e       *env
	cookies map[string]*http.Cookie
}

func (e *env) browser() *browser { return &browser{e: e, cookies: map[string]*http.Cookie{}} }

func (b *browser) req(method, path string, form url.Values) *http.Request {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, path, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range b.cookies {
		r.AddCookie(c)
	}
	return r
}

func (b *browser) do(r *http.Request) resp {
	w := httptest.NewRecorder()
	b.e.h.ServeHTTP(w, r)
	for _, c := range w.Result().Cookies() {
		b.cookies[c.Name] = c
	}
	body, _ := io.ReadAll(w.Result().Body)
	return resp{code: w.Code, header: w.Result().Header, body: string(body)}
}

func (b *browser) get(path string) resp { return b.do(b.req("GET", path, nil)) }

var tokenRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token GETs path and returns its forms' token.
func (b *browser) token(path string) string {
	b.e.t.Helper()
	r := b.get(path)
	m := tokenRE.FindStringSubmatch(r.body)
	if r.code != 200 || m == nil {
		b.e.t.Fatalf("GET %s: %d, no form token in:\n%s", path, r.code, r.body)
	}
	return m[1]
}

// post posts form to path as a browser on the same origin would.
func (b *browser) post(path string, form url.Values) resp {
	r := b.req("POST", path, form)
	r.Header.Set("Origin", "http://example.com") // httptest's Host
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(r)
}

func (e *env) submit(spec runtime.RunSpec) {
	e.t.Helper()
	if _, err := e.rt.Submit(context.Background(), spec); err != nil {
		e.t.Fatalf("submit %q: %v", spec.RunID, err)
	}
}

func (e *env) waitState(id string, want runtime.State) {
	e.t.Helper()
	testenv.Eventually(e.t, waitTimeout, fmt.Sprintf("run %q %s", id, want), func() bool {
		st, err := e.rt.Status(context.Background(), id)
		return err == nil && st.State == want
	})
}

func (e *env) state(id string) runtime.State {
	e.t.Helper()
	st, err := e.rt.Status(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return st.State
}

func runPath(id string) string { return "/run?id=" + url.QueryEscape(id) }

// checkSafe fails unless body is valid UTF-8, holds none of the raw
// hostile markup, and is not huge.
func checkSafe(t *testing.T, what string, r resp) {
	t.Helper()
	if !utf8.ValidString(r.body) {
		t.Errorf("%s: body is not valid UTF-8", what)
	}
	for _, bad := range []string{"<script>alert", "<img src=x", "onerror=alert(1)>", "</pre><script>"} {
		if strings.Contains(r.body, bad) {
			t.Errorf("%s: body holds raw %q", what, bad)
		}
	}
	if len(r.body) > 256<<10 {
		t.Errorf("%s: body is %d bytes: megabyte values must be cut", what, len(r.body))
	}
	if strings.Contains(r.body, "<script>") && !strings.Contains(r.body, "ui.js") {
		t.Errorf("%s: an inline script", what)
	}
}

func TestPagesEscapeHostileData(t *testing.T) {
	e := newEnv(t, testRunner(), ui.Options{})
	big := strings.Repeat("<script>alert('big')</script>", 40000) // ~1.1 MB of markup
	bin := append([]byte{0, 1, 2, 0xff, 0xfe}, []byte("<script>alert('bin')</script>")...)
	e.submit(runtime.RunSpec{RunID: "ok" + hostileID, Input: []byte(big),
		Headers: map[string]string{hostileHeader: hostileHeader + strings.Repeat("y", 60<<10)}})
	e.submit(runtime.RunSpec{RunID: "okbin", Input: bin})
	e.submit(runtime.RunSpec{RunID: "okjson", Input: []byte(`{"a":"<script>alert('json')</script>","b":[1,2]}`)})
	e.submit(runtime.RunSpec{RunID: "fail" + hostileID, Input: []byte("\xff\xfe\xfd")})
	e.submit(runtime.RunSpec{RunID: "wait" + hostileID})
	e.waitState("ok"+hostileID, runtime.StateSucceeded)
	e.waitState("okbin", runtime.StateSucceeded)
	e.waitState("okjson", runtime.StateSucceeded)
	e.waitState("fail"+hostileID, runtime.StateFailed)
	e.waitState("wait"+hostileID, runtime.StateWaiting)

	pages := map[string]string{
		"runs":        "/runs",
		"runs prefix": "/runs?prefix=" + url.QueryEscape(`"><img`),
		"runs bad":    "/runs?state=" + url.QueryEscape(hostileHeader),
		"run ok":      runPath("ok" + hostileID),
		"run bin":     runPath("okbin"),
		"run json":    runPath("okjson"),
		"run fail":    runPath("fail" + hostileID),
		"run wait":    runPath("wait" + hostileID),
		"run missing": runPath("missing" + hostileID),
		"run invalid": "/run?id=" + url.QueryEscape(hostileHeader),
		"queues":      "/queues",
		"store":       "/store",
		"not found":   "/nope/" + url.PathEscape(hostileHeader),
	}
	for name, path := range pages {
		r := e.get(path)
		checkSafe(t, name, r)
		if r.header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s: no CSP", name)
		}
	}
	// What the pages show, escaped.
	if r := e.get(runPath("ok" + hostileID)); r.code != 200 ||
		!strings.Contains(r.body, "&lt;script&gt;alert(&#39;big&#39;)") ||
		!strings.Contains(r.body, "truncated") || !strings.Contains(r.body, fmt.Sprint(len(big))) ||
		!strings.Contains(r.body, "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("run page of a hostile ID and result: %d\n%.3000s", r.code, r.body)
	}
	if r := e.get(runPath("okbin")); !strings.Contains(r.body, "binary") ||
		!strings.Contains(r.body, "00 01 02 ff fe 3c 73 63") {
		t.Errorf("binary result not shown as hex:\n%.3000s", r.body)
	}
	if r := e.get(runPath("okjson")); !strings.Contains(r.body, "json ·") ||
		!strings.Contains(r.body, "&#34;a&#34;: &#34;\\u003cscript") && !strings.Contains(r.body, "&#34;a&#34;: &#34;&lt;script") {
		t.Errorf("JSON result not shown as JSON:\n%.3000s", r.body)
	}
	r := e.get(runPath("fail" + hostileID))
	if r.code != 200 || !strings.Contains(r.body, "&lt;/pre&gt;&lt;script&gt;alert(&#39;err&#39;)") || !strings.Contains(r.body, "failed") {
		t.Errorf("failed run's error not shown escaped: %d\n%.3000s", r.code, r.body)
	}
	if r := e.get("/queues"); !strings.Contains(r.body, "Dead letters") || !strings.Contains(r.body, "&lt;/pre&gt;&lt;script&gt;") {
		t.Errorf("queues page does not show the dead job's error, escaped:\n%.4000s", r.body)
	}
	// The store's WAL writes so far (the runs above committed some).
	if r := e.get("/store"); !regexp.MustCompile(`WAL write p50 / p99</th><td class="num">[0-9.]+(µs|ms|s) / [0-9.]+(µs|ms|s)<`).MatchString(r.body) {
		t.Errorf("store page does not show the WAL writes' quantiles:\n%.4000s", r.body)
	}
	if r := e.get(runPath("missing")); r.code != 404 {
		t.Errorf("unknown run: %d, want 404", r.code)
	}
	if r := e.get("/run?id=" + url.QueryEscape("a/b")); r.code != 400 {
		t.Errorf("invalid run ID: %d, want 400", r.code)
	}
}

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, nil, ui.Options{})
	for _, path := range []string{"/runs", "/queues", "/store", "/static/ui.css", "/static/ui.js", "/nope", "/run?id=x"} {
		r := e.get(path)
		csp := r.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "script-src 'self'", "style-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q allows inline code", path, csp)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, r.header)
		}
	}
	// No inline script or style attribute in any page.
	for _, path := range []string{"/runs", "/queues", "/store"} {
		body := e.get(path).body
		for _, bad := range []string{" style=", " onclick=", " onload=", "<style"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s holds %q", path, bad)
			}
		}
		if n := strings.Count(body, "<script"); n != 1 || !strings.Contains(body, `<script src="/static/ui.js" defer></script>`) {
			t.Errorf("%s: %d script tags; want only ui.js", path, n)
		}
	}
	if r := e.get("/runs"); !strings.Contains(r.header.Get("Set-Cookie"), "SameSite=Strict") ||
		!strings.Contains(r.header.Get("Set-Cookie"), "HttpOnly") {
		t.Errorf("form token cookie: %q", r.header.Get("Set-Cookie"))
	}
}

func TestActionsRefusedWithoutToken(t *testing.T) {
	e := newEnv(t, testRunner(), ui.Options{})
	e.submit(runtime.RunSpec{RunID: "block-1"})
	e.waitState("block-1", runtime.StateRunning)
	b := e.browser()
	good := b.token(runPath("block-1"))
	other := e.browser()
	otherToken := other.token(runPath("block-1")) // a valid token of another browser

	cases := map[string]func() resp{
		"no token": func() resp { return b.post("/run/cancel", url.Values{"id": {"block-1"}}) },
		"wrong token": func() resp {
			return b.post("/run/cancel", url.Values{"id": {"block-1"}, "csrf": {good[:len(good)-2] + "AA"}})
		},
		"another browser's token": func() resp {
			return b.post("/run/cancel", url.Values{"id": {"block-1"}, "csrf": {otherToken}})
		},
		"no cookie": func() resp {
			r := httptest.NewRequest("POST", "/run/cancel", strings.NewReader(url.Values{"id": {"block-1"}, "csrf": {good}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return e.do(r)
		},
		"cross-site": func() resp {
			r := b.req("POST", "/run/cancel", url.Values{"id": {"block-1"}, "csrf": {good}})
			r.Header.Set("Sec-Fetch-Site", "cross-site")
			r.Header.Set("Origin", "https://evil.example")
			return b.do(r)
		},
		"cross-origin, no fetch metadata": func() resp {
			r := b.req("POST", "/run/cancel", url.Values{"id": {"block-1"}, "csrf": {good}})
			r.Header.Set("Origin", "https://evil.example")
			return b.do(r)
		},
		"GET": func() resp { return b.get("/run/cancel?id=block-1&csrf=" + url.QueryEscape(good)) },
	}
	for name, f := range cases {
		r := f()
		if r.code == http.StatusSeeOther || r.code == 200 {
			t.Errorf("%s: %d, want a refusal", name, r.code)
		}
		if st := e.state("block-1"); st != runtime.StateRunning {
			t.Fatalf("%s: run is %s after a refused POST", name, st)
		}
	}
	// The browser's own token works.
	r := b.post("/run/cancel", url.Values{"id": {"block-1"}, "csrf": {good}})
	if r.code != http.StatusSeeOther || !strings.Contains(r.header.Get("Location"), "done=cancel") {
		t.Fatalf("cancel with the token: %d %v\n%s", r.code, r.header, r.body)
	}
	e.waitState("block-1", runtime.StateCancelled)
}

func TestGetDoesNotMutate(t *testing.T) {
	// A client Runtime: nothing writes the store in the background.
	e := newEnv(t, nil, ui.Options{})
	e.submit(runtime.RunSpec{RunID: "r1", Input: []byte("x")})
	e.submit(runtime.RunSpec{RunID: "wait-2"})
	before := e.q.StorageStats().Mutations
	b := e.browser()
	paths := []string{"/", "/runs", "/runs?state=pending", "/run?id=r1", "/run?id=wait-2", "/queues", "/store",
		"/run/cancel?id=r1", "/run/retry?id=r1", "/run/pause?id=r1", "/run/signal?id=r1&name=go",
		"/job/requeue?id=x", "/static/ui.js"}
	for _, p := range paths {
		b.get(p)
		tok := tokenRE.FindStringSubmatch(b.get("/run?id=r1").body)
		if tok != nil {
			// Even with a valid token in the URL, a GET acts on nothing.
			b.get(p + "&csrf=" + url.QueryEscape(tok[1]))
		}
		r := b.do(b.req("HEAD", p, nil))
		_ = r
	}
	// An action's path does not even reach its handler by GET.
	for _, p := range []string{"/run/cancel?id=r1", "/run/retry?id=r1", "/run/pause?id=r1", "/run/resume?id=r1",
		"/run/signal?id=r1&name=go", "/job/requeue?id=x"} {
		if r := b.get(p); r.code != http.StatusNotFound && r.code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d, want 404 or 405", p, r.code)
		}
	}
	if after := e.q.StorageStats().Mutations; after != before {
		t.Fatalf("GETs changed the store: mutations %d -> %d", before, after)
	}
	if st := e.state("r1"); st != runtime.StatePending {
		t.Fatalf("r1 is %s", st)
	}
}

func TestActions(t *testing.T) {
	e := newEnv(t, testRunner(), ui.Options{})
	b := e.browser()
	tok := ""
	act := func(path, id string, extra url.Values) resp {
		t.Helper()
		if tok == "" {
			tok = b.token(runPath("wait-a")) // the browser's token: the same on every page
		}
		form := url.Values{"id": {id}, "csrf": {tok}}
		for k, v := range extra {
			form[k] = v
		}
		return b.post(path, form)
	}
	wantDone := func(r resp, done string) {
		t.Helper()
		if r.code != http.StatusSeeOther || !strings.HasSuffix(r.header.Get("Location"), "done="+done) {
			t.Fatalf("want a redirect with done=%s, got %d %q\n%s", done, r.code, r.header.Get("Location"), r.body)
		}
		if page := b.get(r.header.Get("Location")); page.code != 200 || !strings.Contains(page.body, `id="flash"`) {
			t.Fatalf("the page after the action: %d\n%.2000s", page.code, page.body)
		}
	}

	// Pause, resume and signal a waiting run.
	e.submit(runtime.RunSpec{RunID: "wait-a"})
	e.waitState("wait-a", runtime.StateWaiting)
	wantDone(act("/run/pause", "wait-a", nil), "pause")
	e.waitState("wait-a", runtime.StatePaused)
	if r := act("/run/pause", "missing", nil); r.code != 404 {
		t.Errorf("pause of an unknown run: %d", r.code)
	}
	wantDone(act("/run/resume", "wait-a", nil), "resume")
	e.waitState("wait-a", runtime.StateWaiting)
	if r := act("/run/signal", "wait-a", url.Values{"name": {"bad/name"}}); r.code != 400 {
		t.Errorf("signal with an invalid name: %d", r.code)
	}
	wantDone(act("/run/signal", "wait-a", url.Values{"name": {"go"}, "payload": {"<b>hi</b>"}}), "signal")
	e.waitState("wait-a", runtime.StateSucceeded)
	if st, _ := e.rt.Status(context.Background(), "wait-a"); string(st.Result) != "<b>hi</b>" {
		t.Errorf("result %q, want the signal's payload", st.Result)
	}
	if r := act("/run/signal", "wait-a", url.Values{"name": {"go"}}); r.code != http.StatusConflict {
		t.Errorf("signal of an ended run: %d, want 409", r.code)
	}

	// Cancel a running run, then retry it.
	e.submit(runtime.RunSpec{RunID: "block-b"})
	e.waitState("block-b", runtime.StateRunning)
	wantDone(act("/run/cancel", "block-b", nil), "cancel")
	e.waitState("block-b", runtime.StateCancelled)
	wantDone(act("/run/cancel", "block-b", nil), "cancel-ended")
	wantDone(act("/run/retry", "block-b", nil), "retry")
	e.waitState("block-b", runtime.StateRunning)
	if r := act("/run/retry", "block-b", nil); r.code != http.StatusConflict {
		t.Errorf("retry of a running run: %d, want 409", r.code)
	}

	// Requeue the dead step of a failed run: the run is retried.
	e.submit(runtime.RunSpec{RunID: "fail-c"})
	e.waitState("fail-c", runtime.StateFailed)
	page, err := e.q.DeadJobs(context.Background(), e.rt.QueueName(), "", 10)
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("dead jobs: %v %v", page.Jobs, err)
	}
	if r := act("/job/requeue", "no-such-job", nil); r.code != 404 && r.code != 400 {
		t.Errorf("requeue of an unknown job: %d", r.code)
	}
	wantDone(act("/job/requeue", page.Jobs[0].ID, nil), "requeue-run")
	testenv.Eventually(t, waitTimeout, "the run retried", func() bool {
		st, err := e.rt.Status(context.Background(), "fail-c")
		return err == nil && st.Retries == 1 && st.State == runtime.StateFailed
	})

	// A plain dead job is requeued.
	res, err := e.q.Enqueue(context.Background(), "plain", []byte("p"), queue.EnqueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := e.q.Claim(context.Background(), "plain", queue.ClaimOptions{Max: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	if err := e.q.DeadLetter(context.Background(), jobs[0], "<script>alert('dl')</script>"); err != nil {
		t.Fatal(err)
	}
	if r := e.get("/queues"); !strings.Contains(r.body, res.JobID) || strings.Contains(r.body, "<script>alert('dl')") {
		t.Errorf("queues page: dead job missing or unescaped")
	}
	wantDone(act("/job/requeue", res.JobID, nil), "requeue")
	if j, err := e.q.GetJob(context.Background(), res.JobID); err != nil || j.State != queue.JobPending {
		t.Fatalf("job after requeue: %v %v", j, err)
	}
	if r := act("/job/requeue", res.JobID, nil); r.code != http.StatusConflict {
		t.Errorf("requeue of a job that is not dead: %d", r.code)
	}
}

func TestReadOnly(t *testing.T) {
	t.Run("option", func(t *testing.T) {
		e := newEnv(t, testRunner(), ui.Options{ReadOnly: true, ReadOnlyReason: "<b>ops</b> said so"})
		e.submit(runtime.RunSpec{RunID: "block-r"})
		e.waitState("block-r", runtime.StateRunning)
		r := e.get(runPath("block-r"))
		if !strings.Contains(r.body, "Read-only: &lt;b&gt;ops&lt;/b&gt; said so") || strings.Contains(r.body, "<form method=\"post\"") {
			t.Fatalf("read-only run page:\n%.3000s", r.body)
		}
		b := e.browser()
		b.get("/runs")
		p := b.post("/run/cancel", url.Values{"id": {"block-r"}})
		if p.code != http.StatusForbidden || !strings.Contains(p.body, "read-only") {
			t.Fatalf("POST on a read-only UI: %d\n%s", p.code, p.body)
		}
		if st := e.state("block-r"); st != runtime.StateRunning {
			t.Fatalf("run is %s", st)
		}
	})
	t.Run("store", func(t *testing.T) {
		dir := "file://" + t.TempDir()
		ctx := context.Background()
		w, err := queue.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		wrt, _ := runtime.New(w, nil, nil)
		if _, err := wrt.Submit(ctx, runtime.RunSpec{RunID: "r"}); err != nil {
			t.Fatal(err)
		}
		// The writer keeps the store; the UI reads it read-only.
		defer w.Close(ctx)
		q, err := queue.Open(ctx, dir, queue.WithReadOnly())
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close(ctx)
		rt, _ := runtime.New(q, nil, nil)
		h, err := ui.New(rt, ui.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e := &env{t: t, q: q, rt: rt, h: h}
		r := e.get(runPath("r"))
		if r.code != 200 || !strings.Contains(r.body, "Read-only: the store is open read-only") || strings.Contains(r.body, `id="cancel"`) {
			t.Fatalf("run page on a read-only store: %d\n%.3000s", r.code, r.body)
		}
	})
}

func TestAuth(t *testing.T) {
	t.Run("basic", func(t *testing.T) {
		e := newEnv(t, nil, ui.Options{Authorize: ui.BasicAuth("admin", "s3cret")})
		r := e.get("/runs")
		if r.code != 401 || !strings.Contains(r.header.Get("WWW-Authenticate"), "Basic") {
			t.Fatalf("no credentials: %d %v", r.code, r.header)
		}
		for _, pw := range []string{"wrong", "s3cre", "s3cret "} {
			req := httptest.NewRequest("GET", "/runs", nil)
			req.SetBasicAuth("admin", pw)
			if r := e.do(req); r.code != 401 {
				t.Errorf("password %q: %d", pw, r.code)
			}
		}
		req := httptest.NewRequest("POST", "/run/cancel", strings.NewReader("id=x"))
		if r := e.do(req); r.code != 401 {
			t.Errorf("POST without credentials: %d", r.code)
		}
		req = httptest.NewRequest("GET", "/runs", nil)
		req.SetBasicAuth("admin", "s3cret")
		if r := e.do(req); r.code != 200 {
			t.Errorf("right credentials: %d", r.code)
		}
	})
	t.Run("token", func(t *testing.T) {
		e := newEnv(t, nil, ui.Options{Authorize: ui.TokenAuth("tok-123")})
		if r := e.get("/runs"); r.code != 401 {
			t.Fatalf("no token: %d", r.code)
		}
		if r := e.get("/runs?token=tok-12"); r.code != 401 {
			t.Fatalf("wrong token: %d", r.code)
		}
		b := e.browser()
		r := b.get("/queues?token=tok-123")
		if r.code != http.StatusSeeOther || r.header.Get("Location") != "/queues" || b.cookies["stepwell_auth"] == nil {
			t.Fatalf("token login: %d %v", r.code, r.header)
		}
		if strings.Contains(b.cookies["stepwell_auth"].Value, "tok-123") {
			t.Errorf("the cookie holds the token itself")
		}
		if r := b.get("/queues"); r.code != 200 {
			t.Fatalf("with the cookie: %d", r.code)
		}
		req := httptest.NewRequest("GET", "/store", nil)
		req.Header.Set("Authorization", "Bearer tok-123")
		if r := e.do(req); r.code != 200 {
			t.Fatalf("bearer: %d", r.code)
		}
		req.Header.Set("Authorization", "Bearer tok-1234")
		if r := e.do(req); r.code != 401 {
			t.Fatalf("wrong bearer: %d", r.code)
		}
	})
}

func TestBasePath(t *testing.T) {
	e := newEnv(t, testRunner(), ui.Options{BasePath: "/admin/sw", Title: "Ops <UI>"})
	e.submit(runtime.RunSpec{RunID: "ok-1"})
	e.waitState("ok-1", runtime.StateSucceeded)
	mux := http.NewServeMux()
	mux.Handle("/admin/sw/", e.h)
	e.h = mux
	r := e.get("/admin/sw/runs")
	if r.code != 200 || !strings.Contains(r.body, `href="/admin/sw/run?id=ok-1"`) ||
		!strings.Contains(r.body, `href="/admin/sw/static/ui.css"`) || !strings.Contains(r.body, "Ops &lt;UI&gt;") {
		t.Fatalf("runs under a base path: %d\n%.3000s", r.code, r.body)
	}
	if !strings.Contains(r.header.Get("Set-Cookie"), "Path=/admin/sw") {
		t.Errorf("cookie path: %q", r.header.Get("Set-Cookie"))
	}
	for _, p := range []string{"/admin/sw/run?id=ok-1", "/admin/sw/queues", "/admin/sw/store", "/admin/sw/static/ui.js"} {
		if r := e.get(p); r.code != 200 {
			t.Errorf("%s: %d", p, r.code)
		}
	}
	if r := e.get("/admin/sw/"); r.code != http.StatusSeeOther || r.header.Get("Location") != "/admin/sw/runs" {
		t.Errorf("base: %d %v", r.code, r.header)
	}
	if r := e.get("/runs"); r.code != 404 {
		t.Errorf("outside the base path: %d", r.code)
	}
	for _, bad := range []string{"admin", "/admin/", "/a b", "/a?b", `/a"b`} {
		if _, err := ui.New(e.rt, ui.Options{BasePath: bad}); !errors.Is(err, ui.ErrInvalidOptions) {
			t.Errorf("BasePath %q: %v", bad, err)
		}
	}
	if _, err := ui.New(e.rt, ui.Options{CSRFKey: []byte("short")}); !errors.Is(err, ui.ErrInvalidOptions) {
		t.Errorf("short CSRFKey: %v", err)
	}
	if _, err := ui.New(nil, ui.Options{}); !errors.Is(err, ui.ErrInvalidOptions) {
		t.Errorf("nil Runtime: %v", err)
	}
}

func TestRunsFilters(t *testing.T) {
	e := newEnv(t, nil, ui.Options{})
	for i := range 7 {
		e.submit(runtime.RunSpec{RunID: fmt.Sprintf("alpha-%d", i)})
		e.submit(runtime.RunSpec{RunID: fmt.Sprintf("beta-%d", i)})
	}
	r := e.get("/runs?prefix=alpha-&limit=3")
	if n := strings.Count(r.body, `class="run-link"`); n != 3 || strings.Contains(r.body, ">beta-") {
		t.Fatalf("prefix page 1: %d runs\n%.3000s", n, r.body)
	}
	if !strings.Contains(r.body, ">alpha-6<") {
		t.Errorf("newest first: alpha-6 should be on page 1")
	}
	seen := map[string]bool{}
	next := "/runs?prefix=alpha-&limit=3"
	for pages := 0; next != "" && pages < 10; pages++ {
		r := e.get(next)
		for _, m := range regexp.MustCompile(`class="run-link">([^<]+)<`).FindAllStringSubmatch(r.body, -1) {
			if seen[m[1]] {
				t.Errorf("%s on two pages", m[1])
			}
			seen[m[1]] = true
		}
		next = ""
		if m := regexp.MustCompile(`href="([^"]+)" id="next-page"`).FindStringSubmatch(r.body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(seen) != 7 {
		t.Errorf("paged through %d alpha runs, want 7: %v", len(seen), seen)
	}
	if r := e.get("/runs?state=succeeded"); strings.Contains(r.body, `class="run-link"`) {
		t.Errorf("state filter: pending runs listed as succeeded")
	}
	if r := e.get("/runs?state=pending&limit=100"); strings.Count(r.body, `class="run-link"`) != 14 {
		t.Errorf("state filter pending: %d", strings.Count(r.body, `class="run-link"`))
	}
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	if r := e.get("/runs?after=" + future); strings.Contains(r.body, `class="run-link"`) {
		t.Errorf("submitted-after filter lists runs")
	}
	if r := e.get("/runs?before=" + future); strings.Count(r.body, `class="run-link"`) != 14 {
		t.Errorf("submitted-before filter")
	}
	if r := e.get("/runs?after=yesterday"); r.code != 400 {
		t.Errorf("bad time: %d", r.code)
	}
	if r := e.get("/runs"); !strings.Contains(r.body, `<strong>14</strong>`) {
		t.Errorf("counts: want 14 pending\n%.2000s", r.body)
	}
}

func TestRunHistoryTimeline(t *testing.T) {
	e := newEnv(t, testRunner(), ui.Options{})
	e.submit(runtime.RunSpec{RunID: "retry" + hostileID, Input: []byte("in")})
	e.waitState("retry"+hostileID, runtime.StateSucceeded)
	e.submit(runtime.RunSpec{RunID: "wait-h"})
	e.waitState("wait-h", runtime.StateWaiting)
	if err := e.rt.Signal(context.Background(), "wait-h", "go", []byte("<i>sig</i>")); err != nil {
		t.Fatal(err)
	}
	e.waitState("wait-h", runtime.StateSucceeded)

	r := e.get(runPath("retry" + hostileID))
	checkSafe(t, "history of a retried run", r)
	// Two failed attempts and the one that succeeded: a bar each, the
	// error on hover (an SVG title) and in the table.
	if n := strings.Count(r.body, `class="bar k-error"`); n != 2 {
		t.Errorf("%d error bars, want 2\n%.5000s", n, r.body)
	}
	if n := strings.Count(r.body, `class="bar k-succeed"`); n != 1 {
		t.Errorf("%d succeed bars, want 1", n)
	}
	if !strings.Contains(r.body, "<title>step 0, attempt 1: error in") ||
		!strings.Contains(r.body, "&lt;/pre&gt;&lt;script&gt;alert(&#39;err&#39;)") {
		t.Errorf("bar titles do not carry the escaped error\n%.5000s", r.body)
	}
	if !regexp.MustCompile(`<a href="#h\d+"><rect`).MatchString(r.body) || !regexp.MustCompile(`<tr id="h\d+">`).MatchString(r.body) {
		t.Errorf("bars do not link to their table rows")
	}
	r = e.get(runPath("wait-h"))
	for _, want := range []string{`class="bar k-await"`, `class="bar k-signal"`, `class="bar k-succeed"`, "signal go", "&lt;i&gt;sig&lt;/i&gt;"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("history of a signalled run lacks %q\n%.6000s", want, r.body)
		}
	}
	// An ended run's page stops following it; an active one's follows.
	if !strings.Contains(r.body, `data-follow="false"`) {
		t.Errorf("ended run's page still follows it")
	}
	e.submit(runtime.RunSpec{RunID: "block-h"})
	e.waitState("block-h", runtime.StateRunning)
	if r := e.get(runPath("block-h")); !strings.Contains(r.body, `data-follow="true"`) {
		t.Errorf("active run's page does not follow it")
	}
}
