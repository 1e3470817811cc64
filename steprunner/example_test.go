package steprunner_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/stepwell/stepwell/steprunner"
)

// A runner that counts down: each step continues with the counter minus
// one, and the run succeeds when it reaches zero. Bad input fails for good.
func ExampleRunnerFunc() {
	countdown := steprunner.RunnerFunc(func(ctx context.Context, step *steprunner.Step) (steprunner.Outcome, error) {
		n, err := strconv.Atoi(string(step.Payload))
		if err != nil {
			// Retrying cannot fix the input: dead-letter the step.
			return steprunner.Outcome{}, steprunner.Permanent(fmt.Errorf("bad counter: %w", err))
		}
		if n == 0 {
			return steprunner.Succeed([]byte("liftoff")), nil
		}
		return steprunner.ContinueAfter([]byte(strconv.Itoa(n-1)), time.Second), nil
	})

	// What the runtime would do, without the runtime.
	step := &steprunner.Step{RunID: "launch-1", Payload: []byte("2"), Attempt: 1, MaxAttempts: 3}
	for {
		o, err := countdown.RunStep(context.Background(), step)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("step %d: %v\n", step.Number, o)
		if o.Kind() != steprunner.KindContinue {
			fmt.Printf("result: %s\n", o.Result())
			return
		}
		step = &steprunner.Step{RunID: step.RunID, Number: step.Number + 1, Payload: o.Payload(), Attempt: 1, MaxAttempts: 3}
	}
	// Output:
	// step 0: continue(1 bytes, after 1s)
	// step 1: continue(1 bytes, after 1s)
	// step 2: succeed(7 bytes)
	// result: liftoff
}

func ExamplePermanent() {
	err := fmt.Errorf("charge card: %w", steprunner.Permanent(errors.New("card declined")))
	fmt.Println(err)
	fmt.Println("permanent:", steprunner.IsPermanent(err))
	fmt.Println("permanent:", steprunner.IsPermanent(errors.New("connection reset")))
	// Output:
	// charge card: card declined
	// permanent: true
	// permanent: false
}

// A long step watches ctx and tells apart why it was stopped.
func Example_cancellation() {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(steprunner.ErrRunCancelled) // what the runtime does on Runtime.Cancel

	<-ctx.Done()
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, steprunner.ErrRunCancelled):
		fmt.Println("cancelled from outside")
	case errors.Is(cause, steprunner.ErrLeaseLost), errors.Is(cause, steprunner.ErrShutdown):
		fmt.Println("will be redelivered")
	}
	// Output: cancelled from outside
}

func ExampleOutcome_Kind() {
	for _, o := range []steprunner.Outcome{
		steprunner.Continue([]byte("p")),
		steprunner.Succeed(nil),
		steprunner.Fail("out of stock"),
		steprunner.Cancel("customer withdrew"),
		{},
	} {
		fmt.Printf("%-8v %q\n", o.Kind(), o.Reason())
	}
	// Output:
	// continue ""
	// succeed  ""
	// fail     "out of stock"
	// cancel   "customer withdrew"
	// invalid  ""
}

// A step that needs a human's approval parks its run with AwaitSignal; the
// next step learns from Step.Signal whether the approval came (its payload
// is the signal's) or the wait timed out (empty payload).
func ExampleAwaitSignal() {
	approval := steprunner.RunnerFunc(func(ctx context.Context, step *steprunner.Step) (steprunner.Outcome, error) {
		switch {
		case step.Number == 0:
			return steprunner.AwaitSignal("approval", 24*time.Hour), nil
		case step.Signal != nil && step.Signal.TimedOut:
			return steprunner.Fail("nobody approved within a day"), nil
		}
		return steprunner.Succeed(append([]byte("approved by "), step.Payload...)), nil
	})
	// What the runtime would do, without the runtime.
	o, _ := approval.RunStep(context.Background(), &steprunner.Step{RunID: "refund-7"})
	fmt.Println(o, o.SignalName(), o.Timeout())
	signalled := &steprunner.Step{RunID: "refund-7", Number: 1, Payload: []byte("alice"),
		Signal: &steprunner.SignalDelivery{Name: "approval"}}
	o, _ = approval.RunStep(context.Background(), signalled)
	fmt.Printf("%v %s\n", o, o.Result())
	timedOut := &steprunner.Step{RunID: "refund-7", Number: 1,
		Signal: &steprunner.SignalDelivery{Name: "approval", TimedOut: true}}
	o, _ = approval.RunStep(context.Background(), timedOut)
	fmt.Println(o)
	// Output:
	// await("approval", timeout 24h0m0s) approval 24h0m0s
	// succeed(17 bytes) approved by alice
	// fail("nobody approved within a day")
}

// A step whose API call was rate limited returns the error with the
// server's Retry-After: the runtime retries the step no earlier than that.
func ExampleRetryAfter() {
	apiErr, retryAfter := errors.New("429 too many requests"), 30*time.Second // from the response
	err := steprunner.RetryAfter(fmt.Errorf("quote service: %w", apiErr), retryAfter)

	// What the runtime reads back when it settles the attempt.
	d, ok := steprunner.RetryAfterDelay(err)
	fmt.Println(err, d, ok)
	// Output: quote service: 429 too many requests 30s true
}

func ExampleRetryPolicy_Backoff() {
	p := steprunner.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, Multiplier: 3}
	for attempt := uint32(1); attempt < p.MaxAttempts; attempt++ {
		fmt.Printf("after attempt %d: %v\n", attempt, p.Backoff(attempt))
	}
	// Output:
	// after attempt 1: 1s
	// after attempt 2: 3s
	// after attempt 3: 9s
	// after attempt 4: 10s
}
