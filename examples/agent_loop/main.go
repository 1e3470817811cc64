// Command agent_loop runs an agent-style loop as a Stepwell run: think,
// act, wait, repeat, with every turn of the loop a durable step.
//
//	go run ./examples/agent_loop
//
// It uses a file:// store in a new temporary directory and runs two agents:
//
//   - "picnic-planner" thinks (decides the next action from the state carried
//     in its payload), acts (a fake tool call), then waits 200ms with
//     ContinueAfter for the tool or a human to answer, and loops until it
//     decides it is done (or gives up after maxIterations). Its first act
//     fans out two tool calls at once, each a child run of its own
//     (steprunner.Spawn), and its next step joins them: Step.Children
//     holds their results, in order.
//   - "web-summariser" starts a slow tool call, and main cancels the run from
//     outside with Runtime.Cancel; the step sees its context cancelled with
//     the cause steprunner.ErrRunCancelled and the run ends Cancelled.
//
// The "model" here is a few if statements; a real agent would call an LLM in
// think and real tools in act, keyed on (RunID, Number) so that a repeated
// step does not repeat a side effect.
package main

import (
	"context"
	"encoding/json"
	"errors"
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

const maxIterations = 6

// state is the agent's whole memory. It travels as the step payload, so each
// step boundary is a durable checkpoint of it.
type state struct {
	Goal         string   `json:"goal"`
	Iteration    int      `json:"iteration"`
	Next         *action  `json:"next,omitempty"` // set by think, done by act
	Observations []string `json:"observations"`
}

type action struct {
	Tool string `json:"tool"`
	Arg  string `json:"arg"`
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "stepwell-agent-")
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

	slowToolStarted := make(chan string, 1)
	agent := &agent{slowToolStarted: slowToolStarted}

	ended := make(chan terminal.Outcome, 8)
	hook := terminal.HookFunc(func(ctx context.Context, o terminal.Outcome) error {
		fmt.Printf("[%s] run %s after step %d: result %q, error %q\n", o.RunID, o.Status, o.FinalStep, o.Result, o.Error)
		select {
		case ended <- o:
			return nil
		case <-ctx.Done(): // shutting down: the delivery is retried later
			return ctx.Err()
		}
	})

	rt, err := runtime.New(q, agent, hook)
	if err != nil {
		return err
	}
	runs := []struct{ id, goal string }{
		{"picnic-planner", "plan a picnic in Paris on Saturday"},
		{"web-summariser", "summarise every page of the web"},
	}
	for _, r := range runs {
		input := marshal(state{Goal: r.goal})
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: r.id, Input: input}); err != nil {
			return err
		}
		fmt.Printf("submitted run %s: %q\n", r.id, r.goal)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()

	seen := map[string]bool{}
	for len(seen) < len(runs) {
		select {
		case id := <-slowToolStarted:
			// Give the tool call a moment, look at the run from outside,
			// then cancel it: from here, or from any process on the store.
			time.Sleep(300 * time.Millisecond)
			for _, r := range runs {
				if st, err := rt.Status(ctx, r.id); err == nil {
					fmt.Printf("main: status of %s: %s at step %d (waiting on a delay: %v)\n",
						r.id, st.State, st.CurrentStep, st.Scheduled)
				}
			}
			fmt.Printf("main: cancelling run %s\n", id)
			if _, err := rt.Cancel(ctx, id); err != nil {
				return err
			}
		case o := <-ended:
			if !strings.Contains(o.RunID, ".s") { // not a tool call's child run
				seen[o.RunID] = true // hooks are at-least-once: count runs
			}
		case err := <-errc:
			return fmt.Errorf("runtime stopped: %v", err)
		case <-ctx.Done():
			return errors.New("timed out waiting for the runs")
		}
	}
	stop()
	if err := <-errc; err != nil {
		return err
	}

	for _, r := range runs {
		st, err := rt.Status(ctx, r.id)
		if err != nil {
			return err
		}
		fmt.Printf("status of %s: %s at step %d\n", r.id, st.State, st.CurrentStep)
	}
	fmt.Print(whySteps)
	return nil
}

// agent is the steprunner.Runner: each step is either a think or an act,
// depending on the state it receives.
type agent struct {
	slowToolStarted chan<- string
}

func (a *agent) RunStep(ctx context.Context, s *steprunner.Step) (steprunner.Outcome, error) {
	if s.Headers["role"] == "tool" {
		return toolCall(s) // a child run of a fan-out
	}
	var st state
	if err := json.Unmarshal(s.Payload, &st); err != nil {
		return steprunner.Outcome{}, steprunner.Permanent(err) // retrying cannot help
	}
	if s.Children != nil {
		return a.join(s, st)
	}
	if st.Next == nil {
		return a.think(s, st)
	}
	return a.act(ctx, s, st)
}

// think decides the next action from the state, or ends the run.
func (a *agent) think(s *steprunner.Step, st state) (steprunner.Outcome, error) {
	st.Iteration++
	if st.Iteration > maxIterations {
		fmt.Printf("[%s] step %d think: still not done after %d iterations, giving up\n", s.RunID, s.Number, maxIterations)
		return steprunner.Fail(fmt.Sprintf("no answer after %d iterations", maxIterations)), nil
	}
	last := ""
	if n := len(st.Observations); n > 0 {
		last = st.Observations[n-1]
	}
	switch {
	case strings.HasPrefix(st.Goal, "summarise"):
		st.Next = &action{"crawl", fmt.Sprintf("page %d", st.Iteration)}
	case last == "":
		st.Next = &action{"fan_out", "weather(Paris, Saturday) + parks(Paris)"}
	case strings.HasPrefix(last, "sunny"):
		st.Next = &action{"ask_human", "book a picnic table at Parc Monceau for 4?"}
	case last == "approved":
		st.Next = &action{"book", "Parc Monceau, 4 people, Saturday 12:00"}
	case strings.HasPrefix(last, "confirmed"):
		fmt.Printf("[%s] step %d think (iteration %d): goal reached\n", s.RunID, s.Number, st.Iteration)
		return steprunner.Succeed([]byte("picnic booked: " + last)), nil
	default:
		return steprunner.Fail("cannot make sense of " + last), nil
	}
	fmt.Printf("[%s] step %d think (iteration %d): next action %s(%q)\n", s.RunID, s.Number, st.Iteration, st.Next.Tool, st.Next.Arg)
	return steprunner.Continue(marshal(st)), nil
}

// act performs the chosen action with a fake tool, records what it saw, and
// waits durably for the answer before the next think.
func (a *agent) act(ctx context.Context, s *steprunner.Step, st state) (steprunner.Outcome, error) {
	var obs string
	switch st.Next.Tool {
	case "fan_out":
		// Two tool calls at once, each a durable child run; the run
		// parks until both ended, and join gets their results.
		fmt.Printf("[%s] step %d act: fan out %s\n", s.RunID, s.Number, st.Next.Arg)
		tool := map[string]string{"role": "tool"}
		return steprunner.Spawn([]steprunner.Child{
			{Input: marshalAction(action{"weather", "Paris, Saturday"}), Headers: tool},
			{Input: marshalAction(action{"parks", "Paris"}), Headers: tool},
		}), nil
	case "ask_human":
		obs = "approved" // the human's answer, delivered while we wait
	case "book":
		obs = "confirmed PM-1234"
	case "crawl":
		// A slow tool call. It honours ctx: a cancelled run stops it.
		fmt.Printf("[%s] step %d act: crawl(%q), this may take a while...\n", s.RunID, s.Number, st.Next.Arg)
		select {
		case a.slowToolStarted <- s.RunID:
		default:
		}
		select {
		case <-time.After(10 * time.Second):
			obs = "crawled " + st.Next.Arg
		case <-ctx.Done():
			cause := context.Cause(ctx)
			fmt.Printf("[%s] step %d act: tool call interrupted, ctx cause: %v (ErrRunCancelled: %v)\n",
				s.RunID, s.Number, cause, errors.Is(cause, steprunner.ErrRunCancelled))
			// Whatever we return now, the run ends Cancelled.
			return steprunner.Outcome{}, cause
		}
	default:
		return steprunner.Fail("unknown tool " + st.Next.Tool), nil
	}
	fmt.Printf("[%s] step %d act: %s(%q) -> %q; waiting 200ms for the tool/human\n", s.RunID, s.Number, st.Next.Tool, st.Next.Arg, obs)
	st.Observations = append(st.Observations, obs)
	st.Next = nil
	// The wait is a scheduled step in the store, not a sleeping goroutine:
	// it survives restarts and costs nothing while it waits.
	return steprunner.ContinueAfter(marshal(st), 200*time.Millisecond), nil
}

// join gathers the results of a fan-out's tool calls (Step.Children, in
// the order spawned) into one observation; the payload is the fanning
// step's own, so the state carries over.
func (a *agent) join(s *steprunner.Step, st state) (steprunner.Outcome, error) {
	var parts []string
	for _, c := range s.Children {
		if c.Status != terminal.Succeeded {
			parts = append(parts, fmt.Sprintf("%s failed: %s", c.RunID, c.Error))
			continue
		}
		parts = append(parts, string(c.Result))
	}
	obs := strings.Join(parts, " | ")
	fmt.Printf("[%s] step %d join: joined %d tool calls -> %q\n", s.RunID, s.Number, len(s.Children), obs)
	st.Observations = append(st.Observations, obs)
	st.Next = nil
	return steprunner.Continue(marshal(st)), nil
}

// toolCall runs one tool call of a fan-out, as a child run of its own.
func toolCall(s *steprunner.Step) (steprunner.Outcome, error) {
	var act action
	if err := json.Unmarshal(s.Payload, &act); err != nil {
		return steprunner.Outcome{}, steprunner.Permanent(err)
	}
	var obs string
	switch act.Tool {
	case "weather":
		obs = "sunny, 24°C"
	case "parks":
		obs = "Parc Monceau open, tables free"
	default:
		return steprunner.Fail("unknown tool " + act.Tool), nil
	}
	fmt.Printf("[%s] tool %s(%q) -> %q\n", s.RunID, act.Tool, act.Arg, obs)
	return steprunner.Succeed([]byte(obs)), nil
}

func marshalAction(a action) []byte {
	b, err := json.Marshal(a)
	if err != nil {
		panic(err)
	}
	return b
}

func marshal(st state) []byte {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err)
	}
	return b
}

const whySteps = `
Why steps rather than one long function?
  - Durable checkpoints: the agent's state is committed at every step
    boundary, atomically with the enqueue of the next step, so no finished
    think or act is lost.
  - Resumable after crashes: kill the process at any moment and the next one
    continues from the last committed step (see examples/crash_resume); a
    long function would start over, repeating tool calls and LLM spend.
  - Waiting is free: ContinueAfter parks the run in the store, not in a
    goroutine, so an agent can wait minutes or days for a human.
  - Parallel tool calls: Spawn runs each as a durable child run and parks
    the agent until all have ended; the next step gets every result.
  - Cancellable: Runtime.Cancel, from any process on the store, removes a
    waiting step or cancels a running step's ctx (steprunner.ErrRunCancelled).
  - Observable: Runtime.Status reports each run's state and current step at
    any time, and the terminal hook reports how it ended.
`
