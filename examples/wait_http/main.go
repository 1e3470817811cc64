// Command wait_http serves workflows over HTTP synchronously: a POST
// submits a run and answers with its result once it ended (rt.Wait), and
// a client that gives up early gets 202 Accepted and asks again with GET.
//
//	go run ./examples/wait_http [-store file:///abs/dir]
//
// It starts its server on 127.0.0.1, makes a few requests to it as a
// client would, prints each exchange, and exits.
//
//	POST /orders/{id}            body: the order; waits up to ?wait= (default 10s)
//	GET  /orders/{id}            waits for the run's end the same way
//
// The run ID is the order ID: a POST repeated after a lost reply submits
// nothing new (Submit is idempotent) and answers with the same result.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
)

// reply is the body of every answer.
type reply struct {
	RunID  string `json:"run_id"`
	State  string `json:"state"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// handler serves the orders API on rt.
func handler(rt *runtime.Runtime) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, err = rt.Submit(r.Context(), runtime.RunSpec{RunID: r.PathValue("id"), Input: body})
		switch {
		case errors.Is(err, runtime.ErrInputMismatch):
			http.Error(w, "another order has this ID", http.StatusConflict)
			return
		case errors.Is(err, runtime.ErrInvalidRunID):
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		answer(w, r, rt)
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) { answer(w, r, rt) })
	return mux
}

// answer waits for the run's end, up to the request's ?wait=, and
// answers with its outcome: 200 succeeded, 422 failed or cancelled, 202
// still running (ask again with GET), 404 unknown.
func answer(w http.ResponseWriter, r *http.Request, rt *runtime.Runtime) {
	id := r.PathValue("id")
	wait := 10 * time.Second
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			http.Error(w, "bad wait: "+err.Error(), http.StatusBadRequest)
			return
		}
		wait = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait) // also ends if the client goes away
	defer cancel()
	st, err := rt.Wait(ctx, id)
	code := http.StatusOK
	switch {
	case errors.Is(err, runtime.ErrRunNotFound):
		http.Error(w, "no such order", http.StatusNotFound)
		return
	case errors.Is(err, context.DeadlineExceeded):
		// Still running: the client asks again (GET) to keep waiting.
		if st, err = rt.Status(r.Context(), id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Location", "/orders/"+id)
		code = http.StatusAccepted
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case st.State != runtime.StateSucceeded:
		code = http.StatusUnprocessableEntity
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(reply{RunID: st.RunID, State: st.State.String(), Result: string(st.Result), Error: st.Error})
}

// runner ships an order in two steps. "boom" fails; "slow" takes 500ms.
func runner(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	order := string(s.Payload)
	switch s.Number {
	case 0:
		if order == "boom" {
			return steprunner.Fail("cannot pack a boom"), nil
		}
		return steprunner.Continue([]byte(strings.ToUpper(order))), nil
	default:
		if order == "SLOW" {
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
				return steprunner.Outcome{}, ctx.Err()
			}
		}
		return steprunner.Succeed([]byte("shipped " + order)), nil
	}
}

func main() {
	store := flag.String("store", "", "store URL (default: a new temporary file:// store)")
	flag.Parse()
	if *store == "" {
		dir, err := os.MkdirTemp("", "stepwell-wait-http-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		*store = "file://" + dir
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	q, err := queue.Open(ctx, *store)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(context.Background())
	rt, err := runtime.New(q, steprunner.RunnerFunc(runner), nil)
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: handler(rt), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	base := "http://" + lis.Addr().String()
	fmt.Println("serving on", base)

	ok := true
	call := func(method, path, body string, want int) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s %s %q -> %d %s (%v)\n", method, path, body, resp.StatusCode, strings.TrimSpace(string(b)),
			time.Since(start).Round(time.Millisecond))
		if resp.StatusCode != want {
			fmt.Printf("  want %d\n", want)
			ok = false
		}
	}
	call("POST", "/orders/o-1", "socks", http.StatusOK)
	call("POST", "/orders/o-1", "socks", http.StatusOK) // a retried POST: the same answer, at once
	call("POST", "/orders/o-2", "boom", http.StatusUnprocessableEntity)
	call("POST", "/orders/o-3?wait=50ms", "slow", http.StatusAccepted)
	call("GET", "/orders/o-3", "", http.StatusOK)
	call("GET", "/orders/o-404", "", http.StatusNotFound)

	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	if !ok {
		fmt.Println("FAILED: an answer was not the expected one")
		os.Exit(1)
	}
	fmt.Println("done: every answer as expected")
}
