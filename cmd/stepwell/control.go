package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/stepwell/stepwell/runtime"
)

// The commands that steer a run in flight: signal, pause and resume. They
// are write commands like cancel and retry: same flags (writeFlags), same
// way to the store (openWrite), same exit codes.

type signalJSON struct {
	RunID  string `json:"run_id"`
	Signal string `json:"signal"`
	// Woke is true when the run was waiting for this signal and its next
	// step starts with it (parked instead while the run is paused); false
	// when the signal went to the run's mailbox, for its next await of
	// that name. Best effort: it comes from the run's status as read just
	// before the signal was sent (Runtime.Signal does not say which it
	// did), so a change that commits in between (the await's timeout, a
	// step that ends) can make it wrong.
	Woke bool `json:"woke"`
	// State is the run's state afterwards.
	State string `json:"state"`
}

func signalCommand() *command {
	var w writeFlags
	var payload, payloadFile string
	return &command{
		name:     "signal",
		synopsis: "RUN_ID NAME [--payload STR | --payload-file F] [--wait D] [--takeover]",
		help: `Sends the signal NAME to a run with runtime.Runtime.Signal, with the payload
given by --payload (text) or --payload-file ("-" for stdin; default: empty).
A run waiting for NAME (steprunner.AwaitSignal; "stepwell run" shows what a
run waits for) starts its next step with the payload; otherwise the signal
waits in the run's mailbox for the run's next await of that name.

While a service runs the store in cluster mode (queue.WithCluster), this joins
it as a member and the service's writer delivers the signal; with no process
on the store, it becomes the writer for a moment (see "Write commands and the
live writer" in 'stepwell --help'). Exits 0 when the signal was delivered or
kept in the mailbox (the output says which), 1 when the run has ended or is
being cancelled (or the payload is over the size limit), 2 for an invalid
signal name, 3 when a writer holds the store that this cannot join, 4 when
there is no such run.

Which of the two the output says (delivered, or kept; "woke" with --json)
is best effort: it comes from the run's status as read just before the
signal was sent, so a change that commits in between (the await's timeout,
the end of a step) can make it wrong. The signal itself is sent either way.
`,
		flags: func(fs *flag.FlagSet) {
			w.register(fs)
			fs.StringVar(&payload, "payload", "", "the signal's payload, text `STR`")
			fs.StringVar(&payloadFile, "payload-file", "", "read the signal's payload from `FILE` (\"-\": stdin)")
		},
		nargs: 2,
		exec: func(ctx context.Context, c *cli, args []string) (err error) {
			id, name := args[0], args[1]
			if err := runtime.ValidateRunID(id); err != nil {
				return usageError("%v", err)
			}
			if err := runtime.ValidateSignalName(name); err != nil {
				return usageError("%v", err)
			}
			if payload != "" && payloadFile != "" {
				return usageError("--payload and --payload-file exclude each other")
			}
			data := []byte(payload)
			if payloadFile != "" {
				if data, err = readPayloadFile(payloadFile, runtime.DefaultMaxSignalPayload); err != nil {
					return usageError("--payload-file: %v", err)
				}
			}
			if len(data) > runtime.DefaultMaxSignalPayload {
				return failed("payload over the limit of %d bytes", runtime.DefaultMaxSignalPayload)
			}
			q, rt, err := c.openClient(ctx, w)
			if err != nil {
				return err
			}
			defer closeQueue(q, &err)
			before, err := runStatus(ctx, rt, id)
			if err != nil {
				return err
			}
			if err := controlError(rt.Signal(ctx, id, name, data)); err != nil {
				return err
			}
			st, err := runStatus(ctx, rt, id)
			if err != nil {
				return err
			}
			out := signalJSON{RunID: id, Signal: name, Woke: before.WaitingFor == name, State: st.State.String()}
			if c.asJSON {
				return writeJSON(c.stdout, out)
			}
			if out.Woke {
				fmt.Fprintf(c.stdout, "run %s: signal %q delivered; the run goes on (%s)\n", id, name, out.State)
			} else {
				fmt.Fprintf(c.stdout, "run %s: signal %q kept in the run's mailbox for its next await of it (%s)\n", id, name, out.State)
			}
			return nil
		},
	}
}

// pauseJSON is "pause --json" and "resume --json".
type pauseJSON struct {
	RunID string `json:"run_id"`
	// Changed is true when this command paused (resumed) the run; false
	// when it was paused (not paused) already. Best effort: it comes from
	// the run's status as read just before the pause (resume), as
	// Runtime.Pause and Resume do not say whether they changed anything,
	// so a pause or resume by another process in between can make it
	// wrong.
	Changed bool `json:"changed"`
	// State is the run's state afterwards: paused (running while a step
	// that was running when the pause committed finishes) after pause;
	// pending, waiting or running after resume.
	State string `json:"state"`
}

func pauseCommand() *command {
	return pauseResumeCommand(true)
}

func resumeCommand() *command {
	return pauseResumeCommand(false)
}

func pauseResumeCommand(pause bool) *command {
	var w writeFlags
	cmd := &command{
		name:     "resume",
		synopsis: "RUN_ID [--wait D] [--takeover]",
		help: `Resumes a paused run with runtime.Runtime.Resume: its parked step is queued
for its due time (now if that has passed); a run paused while waiting for a
signal waits on.
`,
		flags: w.register,
		nargs: 1,
	}
	if pause {
		cmd.name = "pause"
		cmd.help = `Pauses a run with runtime.Runtime.Pause: its next step does not start until
'stepwell resume'. A queued or scheduled step is parked; a running step
finishes and the step it continues to is parked; a run waiting for a signal
keeps waiting (what wakes it is parked).
`
	}
	cmd.help += `
While a service runs the store in cluster mode (queue.WithCluster), this joins
it as a member and the service's writer does it; with no process on the
store, it becomes the writer for a moment (see "Write commands and the live
writer" in 'stepwell --help'). Exits 0 when done or when there was nothing
to do (the output says which), 1 when the run has ended or is being
cancelled, 3 when a writer holds the store that this cannot join, 4 when
there is no such run.

Whether there was something to do ("changed" with --json) is best effort:
it comes from the run's status as read just before the write, so a pause or
resume by another process in between can make it wrong. The run is paused
(resumed) when this exits 0 either way.
`
	cmd.exec = func(ctx context.Context, c *cli, args []string) (err error) {
		id := args[0]
		if err := runtime.ValidateRunID(id); err != nil {
			return usageError("%v", err)
		}
		q, rt, err := c.openClient(ctx, w)
		if err != nil {
			return err
		}
		defer closeQueue(q, &err)
		before, err := runStatus(ctx, rt, id)
		if err != nil {
			return err
		}
		op := rt.Resume
		if pause {
			op = rt.Pause
		}
		if err := controlError(op(ctx, id)); err != nil {
			return err
		}
		st, err := runStatus(ctx, rt, id)
		if err != nil {
			return err
		}
		out := pauseJSON{RunID: id, Changed: before.Paused != pause, State: st.State.String()}
		if c.asJSON {
			return writeJSON(c.stdout, out)
		}
		switch {
		case pause && !out.Changed:
			fmt.Fprintf(c.stdout, "run %s was paused already (%s)\n", id, out.State)
		case pause:
			fmt.Fprintf(c.stdout, "run %s paused (%s)\n", id, out.State)
		case !out.Changed:
			fmt.Fprintf(c.stdout, "run %s is not paused: nothing to resume (%s)\n", id, out.State)
		default:
			fmt.Fprintf(c.stdout, "run %s resumed (%s)\n", id, out.State)
		}
		return nil
	}
	return cmd
}

// runStatus is rt.Status with the CLI's not-found error.
func runStatus(ctx context.Context, rt *runtime.Runtime, id string) (runtime.RunStatus, error) {
	st, err := rt.Status(ctx, id)
	if errors.Is(err, runtime.ErrRunNotFound) {
		return st, notFound("run %q not found (never submitted, or finished longer ago than the terminal retention)", id)
	}
	return st, err
}

// controlError maps the errors of Signal, Pause and Resume to exit codes.
func controlError(err error) error {
	var tooLarge *runtime.SignalTooLargeError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, runtime.ErrRunNotFound):
		return notFound("%v", err)
	case errors.Is(err, runtime.ErrRunEnded):
		return failed("%v: nothing to do (a failed or cancelled run can be retried first: stepwell retry)", err)
	case errors.As(err, &tooLarge):
		return failed("%v", err)
	case errors.Is(err, runtime.ErrInvalidSignalName):
		return usageError("%v", err)
	}
	return err
}

// readPayloadFile reads the payload file name ("-": stdin), reading at
// most one byte past max: a larger payload is refused by its length, and
// an endless one (/dev/zero, a pipe that never ends) is not read whole.
func readPayloadFile(name string, max int) ([]byte, error) {
	r := io.Reader(os.Stdin)
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	return io.ReadAll(io.LimitReader(r, int64(max)+1))
}
