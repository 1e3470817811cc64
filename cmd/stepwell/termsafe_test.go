package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// termSafe shows what could drive a terminal as text, whatever writes it
// is cut into, and leaves text and JSON as they are.
func TestTermSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, tabs\tand\nnewlines\n": "plain text, tabs\tand\nnewlines\n",
		"café ünïcode 😀":                    "café ünïcode 😀",
		"\x1b[31mred\x1b[0m":                `\u001b[31mred\u001b[0m`,
		"\x1b]52;c;cHduZWQ=\x07":            `\u001b]52;c;cHduZWQ=\u0007`,
		"ok\rFAKE":                          `ok\rFAKE`,
		"abc\b\b\bxyz":                      `abc\u0008\u0008\u0008xyz`,
		"a\x00b\x7fc":                       `a\u0000b\u007fc`,
		"left \u202eright":                  `left \u202eright`,
		"c1 \u0085 \u009b":                  `c1 \u0085 \u009b`,
		"bad \xff\xfe utf8":                 `bad \xff\xfe utf8`,
	} {
		for cut := range len(in) + 1 { // every split into two writes
			var b bytes.Buffer
			w := newTermSafe(&b)
			if n, err := w.Write([]byte(in[:cut])); n != cut || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			w.Write([]byte(in[cut:]))
			if got := b.String(); got != want {
				t.Errorf("%q cut at %d: got %q, want %q", in, cut, got, want)
			}
		}
	}
	// JSON: encoding/json escapes control characters and invalid UTF-8;
	// a bidirectional character becomes a \u escape, which is the same
	// JSON string.
	doc := map[string]string{"error": "\x1b[31m\r\u202e\xff\x7f\u0085"}
	raw, _ := json.Marshal(doc)
	var b bytes.Buffer
	newTermSafe(&b).Write(raw)
	var back map[string]string
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("JSON through termSafe: %v: %s", err, b.Bytes())
	}
	var direct map[string]string
	json.Unmarshal(raw, &direct)
	if back["error"] != direct["error"] {
		t.Errorf("JSON through termSafe reads %q, want %q", back["error"], direct["error"])
	}
}

// What a service stored reaches the operator's terminal as text: a run
// that failed with a reason carrying an OSC 52 clipboard write, a color
// sequence and a carriage return, and headers with escape sequences. The
// probe that found it counted raw ESC bytes in run, runs and dead.
func TestCLIPrintsStoredControlsAsText(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := "file://" + t.TempDir()
	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	evil := "\x1b]52;c;cHduZWQ=\x07\x1b[31mred\rFAKE"
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Outcome{}, steprunner.Permanent(errors.New(evil))
	})
	rt, err := runtime.New(q, runner, terminal.Noop, runtime.WithPollInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "inj", Headers: map[string]string{"k\x1b[41m": "v"}}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(rctx) }()
	st, err := rt.Wait(ctx, "inj")
	stop()
	<-done
	if err != nil || st.State != runtime.StateFailed {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run", "inj"}, {"runs"}, {"dead", "--queue", "workflow-steps"}} {
		r := runCLI(t, nil, append([]string{"--store", url}, args...)...)
		if r.code != exitOK || strings.ContainsAny(r.stdout+r.stderr, "\x1b\x07\r") {
			t.Errorf("stepwell %v: exit %d, raw control bytes in %q", args, r.code, r.stdout+r.stderr)
		}
		if args[0] != "runs" && !strings.Contains(r.stdout, `\u001b]52;c;`) {
			t.Errorf("stepwell %v does not show the reason's escape as text:\n%s", args, r.stdout)
		}
	}
}

// Loggers write to the CLI's stderr from several goroutines: each write
// comes out whole (go test -race sees the sharing).
func TestTermSafeConcurrentWrites(t *testing.T) {
	var b syncBuffer
	w := newTermSafe(&b)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				fmt.Fprintf(w, "goroutine %d: \x1b[31m a line\n", g)
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, `: \u001b[31m a line`) {
			t.Fatalf("a garbled line: %q", l)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes, as a file is.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
