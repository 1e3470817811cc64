// Command approval runs an agent that waits for a human's approval before
// it acts, as a Stepwell run: the wait is steprunner.AwaitSignal with a
// timeout, and the approval arrives over HTTP.
//
//	go run ./examples/approval
//
// It uses a file:// store in a new temporary directory and serves a tiny
// HTTP API on 127.0.0.1 (a random port):
//
//	POST /runs/{run}/signals/{name}   body: the signal's payload
//
// which calls Runtime.Signal (202 Accepted; 404 for an unknown run, 409 for
// one that has ended, 400 for a bad name or an oversized payload). Two
// agents run:
//
//   - "refund-1042" drafts a refund and waits up to a minute for the
//     signal "approval". After a moment, main plays the human and POSTs
//     "approve" to the API: the run wakes, issues the refund and succeeds.
//     A second POST, after the run ended, gets 409 Conflict.
//   - "refund-1043" waits for an approval that never comes: its timeout
//     (1s) passes, the next step sees Step.Signal.TimedOut and the run
//     fails, escalated.
//
// While a run waits it holds no worker slot and no lease: the wait is a
// record in the store, so it survives restarts, and any process on the
// store can deliver the signal.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
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

// timeouts of the two agents' waits for approval.
var timeouts = map[string]time.Duration{"refund-1042": time.Minute, "refund-1043": time.Second}

// agent drafts an action at step 0 and waits for approval; step 1 acts on
// what woke it.
func agent(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	switch s.Number {
	case 0:
		fmt.Printf("[%s] drafted: %s; waiting for approval (timeout %v)\n", s.RunID, s.Payload, timeouts[s.RunID])
		return steprunner.AwaitSignal("approval", timeouts[s.RunID]), nil
	case 1:
		switch {
		case s.Signal == nil:
			return steprunner.Fail("step 1 without a signal"), nil
		case s.Signal.TimedOut:
			fmt.Printf("[%s] no approval in time: escalating to a supervisor\n", s.RunID)
			return steprunner.Fail("approval timed out; escalated"), nil
		case strings.HasPrefix(string(s.Payload), "approve"):
			fmt.Printf("[%s] approved (%q): issuing the refund\n", s.RunID, s.Payload)
			return steprunner.Succeed([]byte("refund issued")), nil
		default:
			fmt.Printf("[%s] rejected (%q)\n", s.RunID, s.Payload)
			return steprunner.Cancel("rejected: " + string(s.Payload)), nil
		}
	}
	return steprunner.Fail(fmt.Sprintf("unexpected step %d", s.Number)), nil
}

// signalHandler serves POST /runs/{run}/signals/{name}.
func signalHandler(rt *runtime.Runtime) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /runs/{run}/signals/{name}", func(w http.ResponseWriter, r *http.Request) {
		payload, err := io.ReadAll(io.LimitReader(r.Body, runtime.DefaultMaxSignalPayload+1))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err = rt.Signal(r.Context(), r.PathValue("run"), r.PathValue("name"), payload)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusAccepted)
		case errors.Is(err, runtime.ErrRunNotFound):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, runtime.ErrRunEnded):
			http.Error(w, err.Error(), http.StatusConflict)
		case errors.Is(err, runtime.ErrInvalidRunID), errors.Is(err, runtime.ErrInvalidSignalName),
			errors.Is(err, runtime.ErrSignalTooLarge):
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	return mux
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "stepwell-approval-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(ctx, "file://"+dir)
	if err != nil {
		return err
	}
	defer q.Close(context.Background())

	ended := make(chan terminal.Outcome, 2)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		fmt.Printf("[%s] run %s: result %q, error %q\n", o.RunID, o.Status, o.Result, o.Error)
		ended <- o
		return nil
	})
	rt, err := runtime.New(q, steprunner.RunnerFunc(agent), hook, runtime.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runDone := make(chan error, 1)
	go func() { runDone <- rt.Run(runCtx) }()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: signalHandler(rt), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	fmt.Println("signal API: POST " + base + "/runs/{run}/signals/{name}")

	for _, r := range []struct{ id, draft string }{
		{"refund-1042", "refund $120 for order 1042"},
		{"refund-1043", "refund $75 for order 1043"},
	} {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: r.id, Input: []byte(r.draft)}); err != nil {
			return err
		}
	}
	// Wait until the first agent waits, and show it.
	for {
		st, err := rt.Status(ctx, "refund-1042")
		if err != nil {
			return err
		}
		if st.State == runtime.StateWaiting {
			fmt.Printf("status of refund-1042: %s for %q until %s\n", st.State, st.WaitingFor, st.WaitDeadline.Format(time.TimeOnly))
			break
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}

	// The human approves, a moment later, over HTTP.
	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return err
	}
	post := func(run, body string) (int, error) {
		resp, err := http.Post(base+"/runs/"+run+"/signals/approval", "text/plain", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		fmt.Printf("human: POST /runs/%s/signals/approval %q -> %s\n", run, body, resp.Status)
		return resp.StatusCode, nil
	}
	if code, err := post("refund-1042", "approve (alice)"); err != nil || code != http.StatusAccepted {
		return fmt.Errorf("approval not accepted: %d %v", code, err)
	}

	statuses := map[string]terminal.Status{}
	for len(statuses) < 2 {
		select {
		case o := <-ended:
			statuses[o.RunID] = o.Status
		case <-ctx.Done():
			return fmt.Errorf("runs did not end: %w", ctx.Err())
		}
	}
	// Too late: the run has ended.
	if code, err := post("refund-1042", "approve (bob)"); err != nil || code != http.StatusConflict {
		return fmt.Errorf("a late approval got %d %v, want 409", code, err)
	}
	stopRun()
	if err := <-runDone; err != nil {
		return err
	}
	for _, id := range []string{"refund-1042", "refund-1043"} {
		st, err := rt.Status(context.Background(), id)
		if err != nil {
			return err
		}
		fmt.Printf("status of %s: %s %s\n", id, st.State, st.Error)
	}
	if statuses["refund-1042"] != terminal.Succeeded || statuses["refund-1043"] != terminal.Failed {
		return fmt.Errorf("unexpected outcomes %v", statuses)
	}
	fmt.Println("done: one approval over HTTP, one timeout")
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
