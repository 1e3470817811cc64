// Command cluster runs three processes of one service on one store in
// cluster mode, kills the writer in the middle of their work, and shows a
// member take over and every run finish.
//
//	go run ./examples/cluster
//
// The program starts itself three times as workers (separate processes,
// as replicas would be) on a file:// store in a temporary directory. Each
// opens the store with queue.WithCluster: the first becomes the writer,
// the others members that forward to it. Each submits runs of three steps
// and runs steps (its own and the others'). Once all runs are submitted
// and under way, the writer is killed with SIGKILL: a member takes over as
// soon as the store's lock is free, the steps the members were running
// settle with the new writer, and the steps the dead writer was running
// run again when their lease (2 s here) runs out. The program reads each
// run's status from a process of its own that joins as a member, then
// stops the workers by closing their stdin, which they take as the signal
// to stop (the writer among them hands the store over as it closes).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/steprunner"
)

const (
	workers       = 3
	runsPerWorker = 4
	steps         = 3
)

func main() {
	worker := flag.String("worker", "", "run as worker `NAME` (started by the program itself)")
	store := flag.String("store", "", "store URL (default: a temporary directory)")
	flag.Parse()
	if *worker != "" {
		if err := runWorker(*worker, *store); err != nil {
			log.Fatalf("%s: %v", *worker, err)
		}
		return
	}
	if err := demo(*store); err != nil {
		log.Fatal(err)
	}
}

// open opens the store in cluster mode: every process, the same way.
func open(ctx context.Context, store string) (*queue.Queue, error) {
	return queue.Open(ctx, store,
		queue.WithCluster(queue.ClusterConfig{Listen: "127.0.0.1:0"}), // one host; across hosts ":7420" and Advertise
		queue.WithLease(2*time.Second))
}

// runWorker is one process of the service: it submits its runs, runs
// steps until its stdin closes, and prints what it does.
func runWorker(name, store string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := open(ctx, store)
	if err != nil {
		return err
	}
	defer q.Close(context.Background()) // hands the store over if this is the writer
	say := func(format string, args ...any) { fmt.Printf(name+": "+format+"\n", args...) }
	say("%s", q.Role())
	go func() { // report role changes: a member becomes the writer when it takes over
		role := q.Role()
		for ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			if r := q.Role(); r != role {
				say("now the %s", r)
				role = r
			}
		}
	}()

	runner := steprunner.RunnerFunc(func(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
		select { // the step's work
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return steprunner.Outcome{}, context.Cause(ctx)
		}
		say("ran step %d of %s (attempt %d)", s.Number, s.RunID, s.Attempt)
		out := append(s.Payload, " "+name...)
		if s.Number == steps-1 {
			return steprunner.Succeed(out), nil
		}
		return steprunner.Continue(out), nil
	})
	rt, err := runtime.New(q, runner, nil)
	if err != nil {
		return err
	}
	for i := range runsPerWorker {
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: fmt.Sprintf("%s-run-%d", name, i), Input: []byte("ran by")}); err != nil {
			return err
		}
	}
	say("submitted %d runs", runsPerWorker)

	runCtx, stop := context.WithCancel(ctx)
	go func() { // stdin closed: stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	return rt.Run(runCtx)
}

// proc is a worker process and the lines it printed.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when its output ends
}

func demo(store string) error {
	if store == "" {
		dir, err := os.MkdirTemp("", "stepwell-cluster-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		store = "file://" + dir
	}
	fmt.Println("store:", store)
	self, err := os.Executable()
	if err != nil {
		return err
	}

	var mu sync.Mutex
	var lines []string
	wait := func(what string, ok func(line string) bool) error {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			for _, l := range lines {
				if ok(l) {
					mu.Unlock()
					return nil
				}
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
		return fmt.Errorf("timed out waiting for %s", what)
	}
	start := func(name string) (*proc, error) {
		cmd := exec.Command(self, "-worker", name, "-store", store)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p := &proc{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				fmt.Println(sc.Text())
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
			}
		}()
		return p, nil
	}

	// The first worker finds the store free and becomes the writer; the
	// others join it as members.
	var procs []*proc
	for i := range workers {
		p, err := start(fmt.Sprintf("w%d", i+1))
		if err != nil {
			return err
		}
		procs = append(procs, p)
		if err := wait(p.name+"'s runs", func(l string) bool { return l == p.name+": submitted 4 runs" }); err != nil {
			return err
		}
	}

	// Kill the writer while the runs are under way (whichever process
	// runs their steps: the writer's own Work loop is the quickest to
	// claim them).
	if err := wait("the runs' first steps", func(l string) bool { return strings.Contains(l, ": ran step 0 of") }); err != nil {
		return err
	}
	fmt.Println("killing w1, the writer")
	killed := time.Now()
	if err := procs[0].cmd.Process.Kill(); err != nil {
		return err
	}
	_ = procs[0].cmd.Wait()
	if err := wait("a new writer", func(l string) bool { return strings.HasSuffix(l, ": now the writer") }); err != nil {
		return err
	}
	fmt.Printf("a member took over %v after the kill\n", time.Since(killed).Round(time.Millisecond))

	// Read every run's status from a process of our own: it joins the
	// cluster as a member (it runs no steps).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := open(ctx, store)
	if err != nil {
		return err
	}
	defer q.Close(context.Background())
	rt, err := runtime.New(q, steprunner.RunnerFunc(func(context.Context, *steprunner.Step) (steprunner.Outcome, error) {
		return steprunner.Outcome{}, nil // never called: this Runtime does not Run
	}), nil)
	if err != nil {
		return err
	}
	succeeded := 0
	for w := range workers {
		for i := range runsPerWorker {
			id := fmt.Sprintf("w%d-run-%d", w+1, i)
			for {
				st, err := rt.Status(ctx, id)
				if err != nil {
					return fmt.Errorf("status of %s: %w", id, err)
				}
				if st.State.Terminal() {
					fmt.Printf("%s %s: %s\n", id, st.State, st.Result)
					if st.State == runtime.StateSucceeded {
						succeeded++
					}
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("run %s did not finish", id)
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
	fmt.Printf("%d of %d runs succeeded\n", succeeded, workers*runsPerWorker)

	// A clean stop of the others: the writer among them hands the store
	// over as it closes.
	for _, p := range procs[1:] {
		p.stdin.Close()
		if err := p.cmd.Wait(); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		<-p.done
	}
	if succeeded != workers*runsPerWorker {
		return fmt.Errorf("%d runs did not succeed", workers*runsPerWorker-succeeded)
	}
	return nil
}
