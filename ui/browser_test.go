package ui_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stepwell/stepwell/internal/testenv"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/ui"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write PNGs of the main pages to docs/img/ (TestBrowser)")

// serviceEnv, set to a store URL, makes the test binary a service on that
// store (serveStore): the other process of TestBrowser.
const serviceEnv = "STEPWELL_UI_TEST_SERVICE"

func TestMain(m *testing.M) {
	if url := os.Getenv(serviceEnv); url != "" {
		serveStore(url)
		return
	}
	testenv.Main(m)
}

// serviceRunner is the service's: "slow" runs block until cancelled;
// "await" runs wait for signal "go" and succeed with its payload; "flaky"
// runs fail twice, then go through three steps; "dead" runs fail
// permanently (their step is dead-lettered); others succeed.
func serviceRunner() steprunner.Runner {
	return steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		id := s.RunID
		switch {
		case strings.HasPrefix(id, "slow"):
			<-ctx.Done()
			return steprunner.Outcome{}, context.Cause(ctx)
		case strings.HasPrefix(id, "await"):
			if s.Signal != nil {
				return steprunner.Succeed(s.Payload), nil
			}
			return steprunner.AwaitSignal("go", 0), nil
		case strings.HasPrefix(id, "flaky"):
			time.Sleep(20 * time.Millisecond) // bars with a width in the screenshot
			if s.Number == 0 && s.Attempt < 3 {
				return steprunner.Outcome{}, fmt.Errorf("payment gateway: 503 Service Unavailable (attempt %d)", s.Attempt)
			}
			if s.Number < 2 {
				return steprunner.Continue([]byte(fmt.Sprintf(`{"step":%d,"ok":true}`, s.Number+1))), nil
			}
			return steprunner.Succeed([]byte(`{"order":"A-1042","charged":true,"items":3}`)), nil
		case strings.HasPrefix(id, "dead"):
			return steprunner.Outcome{}, steprunner.Permanent(errors.New("invalid address: <unknown street>"))
		}
		return steprunner.Succeed([]byte("done")), nil
	})
}

// serveStore is the service: the store's writer in cluster mode, running
// serviceRunner, until its stdin closes. It prints "ready" once it runs.
func serveStore(url string) {
	ctx, stop := context.WithCancel(context.Background())
	q, err := queue.Open(ctx, url, queue.WithCluster(queue.ClusterConfig{Listen: "127.0.0.1:0"}),
		queue.WithRetryBackoff(50*time.Millisecond, 100*time.Millisecond))
	if err != nil || q.Role() != queue.RoleWriter {
		fmt.Fprintln(os.Stderr, "service: open:", err)
		os.Exit(1)
	}
	rt, err := runtime.New(q, serviceRunner(), nil, runtime.WithPollInterval(10*time.Millisecond),
		runtime.WithDrainTimeout(time.Second), runtime.WithWorkerName("service-1"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	<-done
	_ = q.Close(context.Background())
	os.Exit(0)
}

// startService starts serveStore in a child process and waits for it.
func startService(t *testing.T, url string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serviceEnv+"="+url)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("service: %v", err)
		}
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the service did not start")
		}
	case <-time.After(testenv.Scale(30 * time.Second)):
		t.Fatal("the service did not start in time")
	}
}

// findBrowser returns a Chromium to drive; "" when none is installed.
func findBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestBrowser drives headless Chromium through the UI of a live store in
// cluster mode: the service (writer, with the Runner) in another process,
// the UI's Runtime a member in this one. It goes list -> run detail ->
// cancel -> retry -> signal, checking what the page shows after each.
func TestBrowser(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		msg := "no Chromium found (chromium, chromium-browser, google-chrome): install Debian's chromium package to run the browser test"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	url := "file://" + t.TempDir()
	startService(t, url)
	ctx := context.Background()
	q, err := queue.Open(ctx, url, queue.WithCluster(queue.ClusterConfig{Listen: "127.0.0.1:0"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close(context.Background()) })
	if q.Role() != queue.RoleMember {
		t.Fatalf("the UI's store is %v, want a member of the service", q.Role())
	}
	rt, err := runtime.New(q, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(rt, ui.Options{StoreURL: url, Refresh: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	for _, id := range []string{"ok-order-1041", "flaky-order-1042", "dead-order-1043", "ok-order-1044", "slow-1", "await-1"} {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: id, Input: []byte(`{"order":"` + id + `"}`),
			Headers: map[string]string{"tenant": "acme", "callback_url": "https://example.com/hooks"}}); err != nil {
			t.Fatal(err)
		}
	}
	waitState := func(id string, want runtime.State) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, id+" "+want.String(), func() bool {
			st, err := rt.Status(ctx, id)
			return err == nil && st.State == want
		})
	}
	waitState("slow-1", runtime.StateRunning)
	waitState("await-1", runtime.StateWaiting)
	waitState("flaky-order-1042", runtime.StateSucceeded)
	waitState("dead-order-1043", runtime.StateFailed)

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(browser), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, testenv.Scale(3*time.Minute))
	defer cancelTimeout()

	// Every console message: a CSP violation (an inline script or style
	// the policy blocked) or an uncaught exception fails the test.
	var consoleMu sync.Mutex
	var console []string
	msgs := chromedp.Console(bctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			consoleMu.Lock()
			console = append(console, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
			consoleMu.Unlock()
		}
	}()
	defer func() {
		consoleMu.Lock()
		defer consoleMu.Unlock()
		for _, m := range console {
			if strings.Contains(m, "Content Security Policy") || strings.HasPrefix(m, string(chromedp.ConsoleException)) {
				t.Errorf("browser console: %s", m)
			}
		}
	}()
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	// waitJS waits until the page makes js true (the pages refresh
	// themselves: this sees what the live updates draw).
	// A poll that a navigation (a form's POST and its redirect)
	// interrupts is polled again in the new page.
	waitJS := func(what, js string) {
		t.Helper()
		deadline := time.Now().Add(testenv.Scale(60 * time.Second))
		for {
			_, err := chromedp.Run(bctx, chromedp.Poll[bool](js,
				chromedp.WithPollingTimeout(time.Until(deadline)),
				chromedp.WithPollingInterval(50*time.Millisecond)))
			if err == nil {
				return
			}
			if time.Now().After(deadline) || bctx.Err() != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
		}
	}
	flash := func(want string) {
		t.Helper()
		waitJS("the flash "+want, `(function(){var e=document.getElementById("flash");return !!e && e.textContent.indexOf("`+want+`")>=0})()`)
	}
	stateIs := func(want string) {
		t.Helper()
		waitJS("the page to show state "+want,
			`(function(){var e=document.getElementById("run-state");return !!e && e.textContent==="`+want+`"})()`)
	}
	shot := func(name string) {
		t.Helper()
		if !*updateScreenshots {
			return
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join("..", "docs", "img", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(png))
	}

	// The list, then a run's page from it.
	do("open the runs list", chromedp.Navigate(srv.URL+"/runs"),
		chromedp.WaitVisible(chromedp.CSS(`a.run-link[href$="id=slow-1"]`)))
	if got := text("#counts"); !strings.Contains(got, "running 1") || !strings.Contains(got, "waiting 1") {
		t.Errorf("counts: %q", got)
	}
	shot("ui-runs.png")
	do("open slow-1", chromedp.Click(chromedp.CSS(`a.run-link[href$="id=slow-1"]`)),
		chromedp.WaitVisible(chromedp.CSS("#run-id")))
	if got := text("#run-id"); got != "slow-1" {
		t.Fatalf("run page of %q", got)
	}
	stateIs("running")

	// Cancel: the service's step is told to stop; the run ends cancelled.
	do("cancel", chromedp.Click(chromedp.CSS("#cancel")))
	flash("Cancel requested")
	stateIs("cancelled")
	waitState("slow-1", runtime.StateCancelled)

	// Retry: the service runs it again.
	do("retry", chromedp.WaitVisible(chromedp.CSS("#retry")), chromedp.Click(chromedp.CSS("#retry")))
	flash("Retried")
	stateIs("running")
	waitJS("the retry in the record", `document.body.textContent.indexOf("retried 1×")>=0`)
	waitJS("the cancel and the retry in the history (a live update)",
		`(function(){var h=document.getElementById("history").textContent;return h.indexOf("cancel")>=0 && h.indexOf("retry")>=0})()`)
	if st, err := rt.Status(ctx, "slow-1"); err != nil || st.Retries != 1 || st.State != runtime.StateRunning {
		t.Fatalf("slow-1 after retry: %+v %v", st, err)
	}

	// Signal: the waiting run wakes and succeeds with the payload.
	do("open await-1", chromedp.Navigate(srv.URL+"/runs"),
		chromedp.WaitVisible(chromedp.CSS(`a.run-link[href$="id=await-1"]`)),
		chromedp.Click(chromedp.CSS(`a.run-link[href$="id=await-1"]`)), chromedp.WaitVisible(chromedp.CSS("#signal-name")))
	stateIs("waiting")
	if got := text("#waiting-for"); got != "go" {
		t.Errorf("waiting for %q", got)
	}
	do("send the signal", chromedp.SendKeys(chromedp.CSS("#signal-name"), "go"),
		chromedp.SendKeys(chromedp.CSS("#signal-payload"), "hello <from> the browser"),
		chromedp.Click(chromedp.CSS("#signal")))
	flash("Signal sent")
	stateIs("succeeded")
	waitJS("the result", `document.body.textContent.indexOf("hello <from> the browser")>=0`)
	if st, err := rt.Status(ctx, "await-1"); err != nil || string(st.Result) != "hello <from> the browser" {
		t.Fatalf("await-1: %+v %v", st, err)
	}

	// A hostile run ID is text on the page, not markup.
	hostile := `x"><img src=x onerror=alert(1)><b>bold<`
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: hostile, Headers: map[string]string{"<i>h</i>": "<script>alert(2)</script>"}}); err != nil {
		t.Fatal(err)
	}
	do("a hostile run", chromedp.Navigate(srv.URL+"/runs?prefix=x"), chromedp.WaitVisible(chromedp.CSS("a.run-link")),
		chromedp.Click(chromedp.CSS("a.run-link")), chromedp.WaitVisible(chromedp.CSS("#run-id")))
	if got := text("#run-id"); got != hostile {
		t.Errorf("hostile run ID shown as %q", got)
	}
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("main img, main b, main i, main script").length`)); err != nil || n != 0 {
		t.Errorf("hostile markup became elements: %d %v", n, err)
	}

	// The other pages draw, and their scripts run under the CSP.
	do("a run with history", chromedp.Navigate(srv.URL+"/run?id=flaky-order-1042"),
		chromedp.WaitVisible(chromedp.CSS("svg.timeline rect.k-succeed")))
	if got := text("#history"); !strings.Contains(got, "503 Service Unavailable") {
		t.Errorf("history of flaky-order-1042: %q", got)
	}
	shot("ui-run.png")
	do("queues", chromedp.Navigate(srv.URL+"/queues"), chromedp.WaitVisible(chromedp.CSS("#queue-table")))
	waitJS("a first sample", `+(document.getElementById("chart-list").getAttribute("data-samples")||0)>=2`)
	for i := range 6 { // the chart shows them start
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: fmt.Sprintf("slow-batch-%d", i), StartAt: time.Now().Add(time.Duration(i) * 300 * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	waitJS("the charts (drawn by the script from its samples)", `document.querySelectorAll("#chart-list canvas").length>0 && +document.getElementById("chart-list").getAttribute("data-samples")>=8`)
	if got := text("#dead"); !strings.Contains(got, "invalid address: <unknown street>") {
		t.Errorf("dead letters: %q", got)
	}
	shot("ui-queues.png")
	do("store", chromedp.Navigate(srv.URL+"/store"), chromedp.WaitVisible(chromedp.CSS("#writer")))
	if got := text("#store"); !strings.Contains(got, "member") || !strings.Contains(got, "127.0.0.1:") {
		t.Errorf("store page: %q", got)
	}
	shot("ui-store.png")
}
