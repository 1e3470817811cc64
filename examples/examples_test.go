// Package examples_test builds every example program under examples/ and
// runs it the way a reader would, each in a fresh working directory, checking
// that it reaches its documented end state by itself.
package examples_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// runTimeout bounds one invocation of an example.
const runTimeout = 30 * time.Second

// checks holds what each known example must print. An example without an
// entry must still build, run without setup and exit 0.
var checks = map[string]func(t *testing.T, bin string){
	"quickstart": func(t *testing.T, bin string) {
		out := mustRun(t, bin, t.TempDir())
		wantContains(t, out, "status: succeeded")

		// Twice on one store: the second invocation finds the run finished
		// (its hook will not be called again) and reports it at once.
		store := "file://" + t.TempDir()
		mustRun(t, bin, t.TempDir(), "-store", store)
		// "already finished" says it did not wait for a hook that is not
		// called again (no wall-clock bound: a loaded machine is slow).
		out = mustRun(t, bin, t.TempDir(), "-store", store)
		wantContains(t, out, "submitted run greeting-1 (new: false)", "already finished", `status: succeeded, result "HELLO, STEPWELL! (16 bytes)"`)
		if strings.Contains(out, "step 0 of run") {
			t.Errorf("second invocation ran a step\n%s", out)
		}

		// Lean: the quickstart imports no cloud driver, so it links no
		// cloud SDK (nor the otel example's exporters), and an s3://
		// store says which import it needs.
		mods, err := exec.Command(findGo(t), "version", "-m", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go version -m: %v\n%s", err, mods)
		}
		for _, sdk := range []string{"github.com/aws/", "cloud.google.com/", "github.com/Azure/",
			"github.com/prometheus/", "go.opentelemetry.io/otel/exporters/"} {
			if strings.Contains(string(mods), sdk) {
				t.Errorf("quickstart links %s modules\n%s", sdk, mods)
			}
		}
		out, err = run(t, bin, t.TempDir(), "-store", "s3://bucket?region=us-east-1")
		if err == nil {
			t.Errorf("quickstart opened an s3:// store without the s3 driver\n%s", out)
		}
		wantContains(t, out, `import _ "github.com/stepwell/stepwell/queue/s3"`)
	},
	"crash_resume": testCrashResume,
	"wait_http": func(t *testing.T, bin string) {
		out := mustRun(t, bin, t.TempDir())
		wantContains(t, out,
			`POST /orders/o-1 "socks" -> 200 {"run_id":"o-1","state":"succeeded","result":"shipped SOCKS"}`,
			`POST /orders/o-2 "boom" -> 422 {"run_id":"o-2","state":"failed","error":"cannot pack a boom"}`,
			`POST /orders/o-3?wait=50ms "slow" -> 202`,
			`GET /orders/o-3 "" -> 200 {"run_id":"o-3","state":"succeeded","result":"shipped SLOW"}`,
			`GET /orders/o-404 "" -> 404`,
			"done: every answer as expected")
		if n := strings.Count(out, `-> 200 {"run_id":"o-1","state":"succeeded","result":"shipped SOCKS"}`); n != 2 {
			t.Errorf("the retried POST of o-1 did not get the same answer (%d of 2)\n%s", n, out)
		}
	},
	"cluster": func(t *testing.T, bin string) {
		out := mustRun(t, bin, t.TempDir())
		wantContains(t, out, "w1: writer", "w2: member", "w3: member", "killing w1, the writer", "a member took over",
			"12 of 12 runs succeeded")
		if !regexp.MustCompile(`(?m)^w[23]: now the writer$`).MatchString(out) {
			t.Errorf("no member took over\n%s", out)
		}
	},
	"webhook": func(t *testing.T, bin string) {
		out := mustRun(t, bin, t.TempDir())
		verified := regexp.MustCompile(`(?m)^receiver: verified .* run (\S+) (\w+) after`).FindAllStringSubmatch(out, -1)
		got := map[string]string{}
		for _, m := range verified {
			got[m[1]] = m[2]
		}
		want := map[string]string{"webhook-ok": "succeeded", "webhook-failed": "failed", "webhook-cancelled": "cancelled"}
		for run, status := range want {
			if got[run] != status {
				t.Errorf("run %s: verified delivery with status %q, want %q\n%s", run, got[run], status, out)
			}
		}
		wantContains(t, out, "answering 503", "(retry: delivery 2", "all three deliveries verified")
	},
	"otel": testOtel,
	"agent_loop": func(t *testing.T, bin string) {
		out := mustRun(t, bin, t.TempDir())
		wantContains(t, out,
			"[picnic-planner.s1.0] tool weather(",
			"[picnic-planner.s1.1] tool parks(",
			"join: joined 2 tool calls -> \"sunny, 24°C | Parc Monceau open, tables free\"",
			"[picnic-planner] run succeeded",
			"status of picnic-planner: succeeded",
			"ctx cause: steprunner: run cancelled (ErrRunCancelled: true)",
			"[web-summariser] run cancelled",
			"status of web-summariser: cancelled",
			"Why steps rather than one long function?")
	},
	"step_queues": func(t *testing.T, bin string) {
		out := mustRun(t, bin, t.TempDir())
		wantContains(t, out,
			`step 0 ran on workflow-steps: "cat.png"`,
			`status of render-1: pending, step 1 on queue "gpu"`,
			`step 1 ran on gpu: "cat.png"`,
			`step 2 ran on workflow-steps: "cat.png upscaled 4x"`,
			`run render-1 succeeded after step 2 (on workflow-steps): "cat.png upscaled 4x, thumbnail saved"`)
		// Step 1 waits on "gpu" until its Runtime starts.
		if i, j := strings.Index(out, "starting the gpu Runtime"), strings.Index(out, "step 1 ran on"); i < 0 || j < i {
			t.Errorf("step 1 ran before the gpu Runtime started\n%s", out)
		}
	},
	"approval": func(t *testing.T, bin string) {
		out := mustRun(t, bin, t.TempDir())
		wantContains(t, out,
			`status of refund-1042: waiting for "approval"`,
			`POST /runs/refund-1042/signals/approval "approve (alice)" -> 202 Accepted`,
			"[refund-1042] run succeeded",
			"[refund-1043] no approval in time",
			"[refund-1043] run failed",
			"-> 409 Conflict",
			"done: one approval over HTTP, one timeout")
	},
}

func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds and runs every example program (slow); run without -short")
	}
	goTool := findGo(t)
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(e.Name(), "main.go")); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no example directories (with a main.go) found")
	}
	for name := range checks {
		if !slices.Contains(names, name) {
			t.Errorf("example %s has a check but no directory", name)
		}
	}

	binDir := t.TempDir()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bin := filepath.Join(binDir, name)
			if runtime.GOOS == "windows" {
				bin += ".exe"
			}
			build := exec.Command(goTool, "build", "-o", bin, "./"+name)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
			}
			if check, ok := checks[name]; ok {
				check(t, bin)
				return
			}
			t.Logf("no specific check for %s: requiring a clean exit", name)
			mustRun(t, bin, t.TempDir())
		})
	}
}

// testOtel runs the otel example as a reader would: it prints the run's
// trace (stdout exporter) and serves /metrics (Prometheus exporter) until
// scraped once. The test scrapes it while it waits, checks the stepwell
// metrics in the Prometheus text format, and then that it exits by itself.
func testOtel(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = t.TempDir()
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "TMP="+tmp, "TEMP="+tmp)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	urlLine := regexp.MustCompile(`(?m)^metrics: (http://127\.0\.0\.1:\d+/metrics) `)
	var url string
	testenv.Eventually(t, runTimeout, "otel to print its /metrics URL", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("otel exited (%v) before serving /metrics\n%s", err, out)
		default:
		}
		if m := urlLine.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, out)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v\n%s", url, resp.Status, err, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics Content-Type %q, want the Prometheus text format", ct)
	}
	// The run's three step attempts (two continue, one succeed), the
	// queue depth by state and a store counter, as Prometheus reads them.
	for _, re := range []string{
		`(?m)^# TYPE stepwell_step_duration_seconds histogram$`,
		`(?m)^stepwell_step_duration_seconds_count\{[^}]*outcome="continue"[^}]*\} 2$`,
		`(?m)^stepwell_step_outcomes_total\{[^}]*outcome="succeed"[^}]*\} 1$`,
		`(?m)^stepwell_queue_depth\{[^}]*state="pending"[^}]*\} 0$`,
		`(?m)^stepwell_store_transactions_total\{[^}]*\} [1-9]`,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("/metrics lacks %s\n%s", re, body)
		}
	}

	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("otel: %v\n%s", err, out)
		}
	case <-ctx.Done():
		t.Fatalf("otel still running %v after being scraped\n%s", runTimeout, out)
	}
	t.Logf("$ otel\n%s", out)
	wantContains(t, out.String(),
		`"Name": "submit"`, `"Name": "stepwell.step"`, `"Name": "stepwell.hook"`, `"Key": "stepwell.attempt"`,
		`run traced-1 succeeded with result "HELLO!!"`,
		"served /metrics 1 time(s)",
		"spans: 1 submit, 3 stepwell.step, 1 stepwell.hook in 1 trace(s)")
}

// testCrashResume kills a run after step 2, resumes it, and finds it done.
func testCrashResume(t *testing.T, bin string) {
	wd := t.TempDir() // shared by the three invocations: the store is ./.stepwell/crash_resume

	out, err := run(t, bin, wd, "-kill-after-step", "2")
	if err == nil {
		t.Fatalf("first invocation exited 0, want it killed\n%s", out)
	}
	stepLine := regexp.MustCompile(`(?m)^step (\d+) of run \S+ \(attempt \d+\)`)
	steps := stepLine.FindAllStringSubmatch(out, -1)
	if len(steps) == 0 || steps[len(steps)-1][1] != "2" {
		t.Fatalf("first invocation: last step printed is not step 2\n%s", out)
	}
	if strings.Contains(out, "succeeded") {
		t.Fatalf("first invocation: the run finished despite the kill\n%s", out)
	}

	out = mustRun(t, bin, wd)
	wantContains(t, out, "resuming run order-7 at step 3", "status: succeeded")
	steps = stepLine.FindAllStringSubmatch(out, -1)
	if len(steps) == 0 || steps[0][1] != "3" {
		t.Errorf("second invocation: first step run is not step 3\n%s", out)
	}

	out = mustRun(t, bin, wd)
	wantContains(t, out, "already submitted (new: false) and has already succeeded")
	if stepLine.MatchString(out) {
		t.Errorf("third invocation ran a step\n%s", out)
	}

	out = mustRun(t, bin, wd, "-reset")
	if _, err := os.Stat(filepath.Join(wd, ".stepwell")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-reset left the store directory (stat: %v)\n%s", err, out)
	}
}

// run runs bin in the working directory wd with a timeout, with its
// temporary files in a directory of the test's, and returns its combined
// output.
func run(t *testing.T, bin, wd string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = wd
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "TMP="+tmp, "TEMP="+tmp)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after %v\n%s", filepath.Base(bin), strings.Join(args, " "), runTimeout, buf.String())
	}
	t.Logf("$ %s %s (exit: %v)\n%s", filepath.Base(bin), strings.Join(args, " "), err, buf.String())
	return buf.String(), err
}

// mustRun is run, failing the test unless bin exits 0.
func mustRun(t *testing.T, bin, wd string, args ...string) string {
	t.Helper()
	out, err := run(t, bin, wd, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return out
}

func wantContains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q\n%s", w, out)
		}
	}
}

// findGo locates the go command. go test puts $GOROOT/bin first in the
// test's PATH, so this is the go command that runs the test.
func findGo(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	exe := "go"
	if runtime.GOOS == "windows" {
		exe = "go.exe"
	}
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", exe); fileExists(p) {
			return p
		}
	}
	t.Skip("skipping: no go command in PATH or $GOROOT/bin")
	return ""
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
