// Command quickstart runs one three-step workflow on a local file store and
// prints each step and the run's outcome as they happen.
//
//	go run ./examples/quickstart [-store file:///abs/dir]
//
// Without -store it uses a fresh temporary directory. Run again with the
// same -store, it finds the run already finished and reports its durable
// record (rt.Status) instead of running it again.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

func main() {
	store := flag.String("store", "", "store URL (default: a new temporary file:// store)")
	flag.Parse()
	if *store == "" {
		dir, err := os.MkdirTemp("", "stepwell-quickstart-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		*store = "file://" + dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	q, err := queue.Open(ctx, *store)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(context.Background())
	fmt.Println("store:", *store)

	// The runner: three steps, each a durable checkpoint.
	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		fmt.Printf("step %d of run %s: got %q\n", s.Number, s.RunID, s.Payload)
		switch s.Number {
		case 0:
			return steprunner.Continue([]byte(strings.ToUpper(string(s.Payload)))), nil
		case 1:
			return steprunner.Continue(append(s.Payload, "!"...)), nil
		default:
			return steprunner.Succeed([]byte(fmt.Sprintf("%s (%d bytes)", s.Payload, len(s.Payload)))), nil
		}
	})

	done := make(chan terminal.Outcome, 1)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		fmt.Printf("run %s %s after step %d: %s\n", o.RunID, o.Status, o.FinalStep, o.Result)
		select { // delivery is at least once: a repeat must not block
		case done <- o:
		default:
		}
		return nil
	})

	rt, err := runtime.New(q, runner, hook)
	if err != nil {
		log.Fatal(err)
	}
	sub, err := rt.Submit(ctx, runtime.RunSpec{RunID: "greeting-1", Input: []byte("hello, stepwell")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("submitted run %s (new: %v)\n", sub.RunID, sub.NewlySubmitted)
	if !sub.NewlySubmitted {
		// The store already knew the run (a second invocation with the same
		// -store): if it has finished, its hook has been called already and
		// will not be called again, so report the durable record instead of
		// waiting for the hook.
		st, err := rt.Status(ctx, sub.RunID)
		if err != nil {
			log.Fatal(err)
		}
		if st.State.Terminal() {
			fmt.Printf("run %s already finished\n", sub.RunID)
			fmt.Printf("status: %s, result %q\n", st.State, st.Result)
			return
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()
	select {
	case o := <-done:
		stop()
		if err := <-errc; err != nil {
			log.Fatal(err)
		}
		st, err := rt.Status(ctx, o.RunID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("status: %s, result %q\n", st.State, st.Result)
	case <-ctx.Done():
		log.Fatal("timed out waiting for the run")
	}
}
