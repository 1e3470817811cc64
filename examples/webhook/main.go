// Command webhook reports the end of runs to an HTTP endpoint with signed
// webhooks (terminal.NewWebhook), and shows a receiver that verifies them.
//
//	go run ./examples/webhook
//
// It starts a receiver on 127.0.0.1 (a random port), then three short runs
// on a file:// store in a new temporary directory: one succeeds, one fails
// (steprunner.Fail) and one is cancelled from outside (Runtime.Cancel) while
// its step waits. Each run's end is POSTed to the receiver, signed per
// Standard Webhooks (https://www.standardwebhooks.com). The receiver answers
// the first delivery of the failed run with 503, so the runtime retries it
// (after the Retry-After the receiver asked for); the retry carries the same
// webhook-id. The program exits once all three deliveries are verified.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A Standard Webhooks secret: "whsec_" + base64 of random bytes. Sender
	// and receiver share it; in production it comes from your secret store.
	key := make([]byte, 32)
	rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)

	// The receiver. It prints each verified delivery and tells main when
	// the three runs have been delivered.
	recv := newReceiver(secret, "webhook-failed", 3)
	srv := httptest.NewServer(recv) // listens on 127.0.0.1:<random>
	defer srv.Close()
	fmt.Println("receiver listening on", srv.URL)

	dir, err := os.MkdirTemp("", "stepwell-webhook-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(ctx, "file://"+dir)
	if err != nil {
		return err
	}
	defer q.Close(context.Background())
	fmt.Println("store: file://" + dir)

	// The hook: a signed POST of every run's end to the receiver. The SSRF
	// guard refuses loopback addresses unless AllowPrivateNetworks is set.
	hook, err := terminal.NewWebhook(terminal.WebhookConfig{
		URL:                  srv.URL + "/stepwell",
		Secret:               secret,
		Timeout:              5 * time.Second,
		AllowPrivateNetworks: true,
	})
	if err != nil {
		return err
	}

	// The runner: what a run does is decided by its input.
	waiting := make(chan string, 1) // the waiting step says it has started
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		fmt.Printf("step %d of run %s: %s\n", s.Number, s.RunID, s.Payload)
		switch string(s.Payload) {
		case "succeed":
			return steprunner.Succeed([]byte("all good")), nil
		case "fail":
			// Fail ends the run at once: a business outcome, not retried.
			return steprunner.Fail("card declined"), nil
		default: // "wait": wait for something that never comes
			waiting <- s.RunID
			<-ctx.Done()
			fmt.Printf("step %d of run %s: stopped waiting: %v\n", s.Number, s.RunID, context.Cause(ctx))
			return steprunner.Outcome{}, context.Cause(ctx)
		}
	})

	rt, err := runtime.New(q, runner, hook)
	if err != nil {
		return err
	}
	for _, spec := range []runtime.RunSpec{
		{RunID: "webhook-ok", Input: []byte("succeed")},
		{RunID: "webhook-failed", Input: []byte("fail")},
		{RunID: "webhook-cancelled", Input: []byte("wait"), Headers: map[string]string{"tenant": "acme"}},
	} {
		if _, err := rt.Submit(ctx, spec); err != nil {
			return err
		}
		fmt.Println("submitted run", spec.RunID)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()

	for {
		select {
		case id := <-waiting:
			// Cancel from outside while the step runs: its ctx is cancelled
			// and the run ends Cancelled when the step returns.
			ok, err := rt.Cancel(ctx, id)
			if err != nil {
				return err
			}
			fmt.Printf("cancelled run %s (was active: %v)\n", id, ok)
		case <-recv.done:
			stop()
			if err := <-errc; err != nil {
				return err
			}
			fmt.Println("all three deliveries verified")
			return nil
		case err := <-errc:
			return fmt.Errorf("runtime stopped: %v", err)
		case <-ctx.Done():
			return errors.New("timed out waiting for the deliveries")
		}
	}
}

// receiver is an http.Handler that verifies Standard Webhooks signatures.
type receiver struct {
	key      []byte // the decoded secret
	flaky    string // run ID whose first delivery gets a 503
	want     int    // runs to receive before done is closed
	done     chan struct{}
	mu       sync.Mutex
	attempts map[string]int // webhook-id -> deliveries seen
	runs     map[string]bool
}

func newReceiver(secret, flaky string, want int) *receiver {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return &receiver{key: key, flaky: flaky, want: want, done: make(chan struct{}),
		attempts: map[string]int{}, runs: map[string]bool{}}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("webhook-id")
	if err := rc.verify(id, r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body); err != nil {
		fmt.Println("receiver: rejected delivery:", err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev struct {
		Type      string `json:"type"`
		RunID     string `json:"run_id"`
		Status    string `json:"status"`
		Result    []byte `json:"result"` // base64 in JSON
		Error     string `json:"error"`
		FinalStep uint32 `json:"final_step"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "bad JSON", http.StatusBadRequest)
		return
	}

	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.attempts[id]++
	if ev.RunID == rc.flaky && rc.attempts[id] == 1 {
		// Pretend to be briefly unavailable: 5xx is retryable, and the
		// runtime honours Retry-After.
		fmt.Printf("receiver: signature ok for %s (run %s), answering 503 to force a retry\n", id, ev.RunID)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	retry := ""
	if n := rc.attempts[id]; n > 1 {
		retry = fmt.Sprintf(" (retry: delivery %d of this webhook-id)", n)
	}
	fmt.Printf("receiver: verified %s %s: run %s %s after step %d, result %q, error %q%s\n",
		id, ev.Type, ev.RunID, ev.Status, ev.FinalStep, ev.Result, ev.Error, retry)
	w.WriteHeader(http.StatusNoContent)

	// Deliveries are at least once: count runs, not requests.
	if !rc.runs[ev.RunID] {
		rc.runs[ev.RunID] = true
		if len(rc.runs) == rc.want {
			close(rc.done)
		}
	}
}

// verify checks a Standard Webhooks signature: base64(HMAC-SHA256(key,
// id + "." + timestamp + "." + body)), in one of the space-separated
// "v1,<sig>" entries of the header, and a timestamp within 5 minutes.
func (rc *receiver) verify(id, ts, sigs string, body []byte) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return errors.New("missing webhook-id or webhook-timestamp")
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp too far from now")
	}
	mac := hmac.New(sha256.New, rc.key)
	fmt.Fprintf(mac, "%s.%s.", id, ts)
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) { // constant time
			return nil
		}
	}
	return errors.New("no valid signature")
}
