package runtime_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// The code between the README markers below is the README's "A run in
// code" block, byte for byte: TestREADMEExample keeps them identical, and
// compiling this file keeps the README's code compiling.

// README: begin
// serve submits an order's run and works on the store at url
// ("file:///var/lib/myapp/stepwell", "s3://BUCKET?prefix=app/&region=eu-west-1",
// "gs://...", "mem://NAME") until ctx is done. (s3:// needs
// import _ "github.com/stepwell/stepwell/queue/s3", gs:// queue/gcs.)
func serve(ctx context.Context, url string, body []byte) error {
	q, err := queue.Open(ctx, url)
	if err != nil {
		return err
	}
	defer q.Close(context.Background())

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		switch s.Number {
		case 0:
			order, err := reserve(ctx, s.RunID, s.Payload) // idempotent on (RunID, Number)
			if err != nil {
				return steprunner.Outcome{}, err // transient: retried with backoff
			}
			return steprunner.Continue(order), nil
		case 1:
			return steprunner.ContinueAfter(s.Payload, 10*time.Minute), nil // wait, durably
		default:
			return steprunner.Succeed([]byte("shipped")), nil
		}
	})
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		log.Printf("run %s %s: %s", o.RunID, o.Status, o.Result)
		return nil
	})

	rt, err := runtime.New(q, runner, hook)
	if err != nil {
		return err
	}
	out, err := rt.Submit(ctx, runtime.RunSpec{RunID: "order-1042", Input: body})
	if err != nil {
		return err
	}
	log.Printf("run %s submitted (new: %v)", out.RunID, out.NewlySubmitted)
	return rt.Run(ctx) // works until ctx is done, then drains running steps
}

// README: end

// readmeDone ends Example_readme's serve once step 0 has run.
var readmeDone context.CancelFunc = func() {}

// reserve stands for the service's own idempotent side effect.
func reserve(_ context.Context, runID string, order []byte) ([]byte, error) {
	fmt.Printf("reserved %s: %s\n", runID, order)
	readmeDone() // the example has shown what it shows: stop serving
	return append([]byte("reserved "), order...), nil
}

// The README's code, run on an in-memory store: step 0 reserves the order,
// step 1 waits ten minutes (longer than this example lets it run). serve
// stops when step 0 has run, however long that takes on a loaded machine
// (the timeout is only a backstop).
func Example_readme() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	readmeDone = cancel
	defer func() { readmeDone = func() {} }()
	log.SetOutput(os.Stdout)
	log.SetFlags(0)
	defer log.SetOutput(os.Stderr)
	defer log.SetFlags(log.LstdFlags)
	if err := serve(ctx, "mem://readme-example", []byte(`{"sku":"A-1"}`)); err != nil {
		fmt.Println(err)
	}
	// Output:
	// run order-1042 submitted (new: true)
	// reserved order-1042: {"sku":"A-1"}
}

// TestREADMEExample checks that the README's "A run in code" block is the
// code between this file's README markers.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## A run in code\n")
	if !ok {
		t.Fatal(`README.md has no "## A run in code" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal(`README.md "A run in code" has no go block`)
	}
	block, _, ok = strings.Cut(block, "```\n")
	if !ok {
		t.Fatal(`README.md "A run in code": unterminated go block`)
	}

	src, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, ok := bytes.Cut(src, []byte("// README: begin\n"))
	if ok {
		code, _, ok = bytes.Cut(code, []byte("\n// README: end\n"))
	}
	if !ok {
		t.Fatal("example_readme_test.go lacks its README markers")
	}
	if block != string(code) {
		t.Errorf("README.md's \"A run in code\" block differs from runtime/example_readme_test.go (between its README markers): copy one to the other.\nREADME:\n%s\nexample:\n%s", block, code)
	}
}

// TestREADMELinks checks README.md's links: each "#anchor" names one of
// its headings (by GitHub's slug of the heading), each relative path
// exists, and the operations section is "Operating Stepwell", covering
// retry, list, logs, traces and metrics, as issue 15 asks.
func TestREADMELinks(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	anchors := map[string]bool{}
	inCode := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		anchors[githubSlug(strings.TrimLeft(strings.TrimSpace(line), "# "))] = true
	}
	links := regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(text, -1)
	if len(links) == 0 {
		t.Fatal("README.md has no links")
	}
	for _, m := range links {
		target := m[1]
		switch {
		case strings.HasPrefix(target, "#"):
			if !anchors[target[1:]] {
				t.Errorf("README.md links to %s, which is no heading's anchor", target)
			}
		case strings.Contains(target, "://"):
		default:
			path, _, _ := strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join("..", path)); err != nil {
				t.Errorf("README.md links to %s: %v", target, err)
			}
		}
	}

	_, section, ok := strings.Cut(text, "\n## Operating Stepwell\n")
	if !ok {
		t.Fatal(`README.md has no "## Operating Stepwell" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, want := range []string{"Runtime.Retry", "Runtime.ListRuns", "stepwell retry", "runtime.WithLogger",
		"stepwell.step` span", "stepwell.step.duration", "/metrics"} {
		if !strings.Contains(section, want) {
			t.Errorf(`README.md's "Operating Stepwell" section does not mention %q`, want)
		}
	}
	if !strings.Contains(text, "](#operating-stepwell)") {
		t.Error(`README.md does not link to its "Operating Stepwell" section`)
	}
}

// githubSlug is the anchor GitHub gives a Markdown heading: lower case,
// punctuation other than '-' and '_' dropped, spaces as '-'.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
