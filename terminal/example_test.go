package terminal_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/stepwell/stepwell/terminal"
)

// A receiver on this machine gets a signed notification. In production the
// receiver is another service, and AllowPrivateNetworks stays false.
func ExampleNewWebhook() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// Verify as the Standard Webhooks spec says (a real receiver would
		// use one of its libraries, check the timestamp is recent, and
		// deduplicate on webhook-id).
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%s.%s", r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), body)
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		fmt.Println("signature valid:", hmac.Equal([]byte(r.Header.Get("webhook-signature")), []byte(want)))
		fmt.Println("webhook-id:", r.Header.Get("webhook-id"))
		fmt.Println(string(body))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	hook, err := terminal.NewWebhook(terminal.WebhookConfig{
		URL:                  receiver.URL + "/hooks/stepwell",
		Secret:               secret,
		Timeout:              5 * time.Second,
		AllowPrivateNetworks: true, // the receiver is on 127.0.0.1
	})
	if err != nil {
		log.Fatal(err)
	}
	// The runtime calls OnTermination; here we call it by hand.
	err = hook.OnTermination(context.Background(), terminal.Outcome{
		RunID:     "order-1042",
		Status:    terminal.Succeeded,
		Result:    []byte(`{"ok":true}`),
		Headers:   map[string]string{"tenant": "acme"},
		FinalStep: 2,
		EndedAt:   time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC),
	})
	fmt.Println("error:", err)
	// Output:
	// signature valid: true
	// webhook-id: msg_ad00678cba09c1f6a800f41491b1ac9e
	// {"type":"run.succeeded","run_id":"order-1042","status":"succeeded","result":"eyJvayI6dHJ1ZX0=","error":"","headers":{"tenant":"acme"},"final_step":2,"ended_at":"2026-01-01T12:00:00Z","retries":0}
	// error: <nil>
}

// Each run names its own endpoint in its "callback_url" header.
func ExampleNewWebhook_callbackURL() {
	hook, err := terminal.NewWebhook(terminal.WebhookConfig{
		Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		// URL "" selects the per-run callback_url header.
	})
	if err != nil {
		log.Fatal(err)
	}
	// A run submitted without a callback_url is not notified.
	err = hook.OnTermination(context.Background(), terminal.Outcome{RunID: "r1", Status: terminal.Failed})
	fmt.Println("no callback_url:", err)

	// One pointing into the private network is refused, for good.
	err = hook.OnTermination(context.Background(), terminal.Outcome{
		RunID: "r2", Status: terminal.Failed,
		Headers: map[string]string{"callback_url": "http://169.254.169.254/latest/meta-data/"},
	})
	fmt.Println("forbidden:", errors.Is(err, terminal.ErrForbiddenDestination), "permanent:", terminal.IsPermanent(err))
	// Output:
	// no callback_url: <nil>
	// forbidden: true permanent: true
}

func ExampleHookFunc() {
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		switch o.Status {
		case terminal.Succeeded:
			fmt.Printf("run %s succeeded at step %d: %s\n", o.RunID, o.FinalStep, o.Result)
		case terminal.Failed:
			fmt.Printf("run %s failed: %s\n", o.RunID, o.Error)
		case terminal.Cancelled:
			fmt.Printf("run %s cancelled\n", o.RunID)
		}
		return nil // a non-nil error would make the runtime retry
	})

	// The runtime calls OnTermination; here we call it by hand.
	ctx := context.Background()
	_ = hook.OnTermination(ctx, terminal.Outcome{RunID: "a", Status: terminal.Succeeded, Result: []byte("42"), FinalStep: 3})
	_ = hook.OnTermination(ctx, terminal.Outcome{RunID: "b", Status: terminal.Failed, Error: "card declined"})
	_ = hook.OnTermination(ctx, terminal.Outcome{RunID: "c", Status: terminal.Cancelled})
	// Output:
	// run a succeeded at step 3: 42
	// run b failed: card declined
	// run c cancelled
}

// How a caller maps a delivery error onto its queue.
func ExampleRetryAfter() {
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer busy.Close()

	hook, err := terminal.NewWebhook(terminal.WebhookConfig{
		URL:                  busy.URL,
		Secret:               "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		AllowPrivateNetworks: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	err = hook.OnTermination(context.Background(), terminal.Outcome{RunID: "r1", Status: terminal.Succeeded})
	switch d, ok := terminal.RetryAfter(err); {
	case err == nil:
		fmt.Println("delivered")
	case terminal.IsPermanent(err):
		fmt.Println("dead-letter:", err)
	case ok:
		fmt.Println("retry after", d)
	default:
		fmt.Println("retry with backoff")
	}
	// Output: retry after 30s
}
