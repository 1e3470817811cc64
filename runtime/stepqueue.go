package runtime

import (
	"fmt"
	"strings"

	"github.com/stepwell/stepwell/internal/stepmemo"
	"github.com/stepwell/stepwell/kvrecord"
)

// MaxQueueNameLen is the longest step queue name (ValidateQueueName).
const MaxQueueNameLen = 128

// ValidateQueueName returns ErrInvalidQueueName (wrapped with the reason)
// unless name can name a step queue: 1 to MaxQueueNameLen bytes of
// printable ASCII without leading or trailing spaces, not ending in
// ".dead" or ".timers" (the suffixes of the queues each step queue keeps
// beside it: see internal/runrec). A step queue must also not be a notify
// queue (WithNotifyQueueName): a step job there would be taken for an
// undecodable notification and dead-lettered, its run left active. The
// Runtime that checks a step queue (RunSpec.Queue, Outcome.OnQueue)
// refuses its own notify queue's name with ErrInvalidQueueName.
func ValidateQueueName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("%w: empty", ErrInvalidQueueName)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: %q has leading or trailing whitespace", ErrInvalidQueueName, name)
	case len(name) > MaxQueueNameLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidQueueName, len(name), MaxQueueNameLen)
	case strings.HasSuffix(name, ".dead"), strings.HasSuffix(name, ".timers"):
		return fmt.Errorf("%w: %q ends in a reserved suffix (.dead, .timers)", ErrInvalidQueueName, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: byte %#x at %d (printable ASCII only)", ErrInvalidQueueName, c, i)
		}
	}
	return nil
}

// stepQueue returns the step queue of a run's current step: the one its
// record names, or, in a record written before records named it, this
// Runtime's (every step then ran on the queue of the Runtime handling it).
func (rt *Runtime) stepQueue(rec *kvrecord.Run) string {
	if rec.Queue != "" {
		return rec.Queue
	}
	return rt.opts.queueName
}

// nextQueue returns the step queue of the step that an Outcome starts:
// the one OnQueue named, else this Runtime's (the queue of the step that
// returned it). An invalid name is an error wrapping ErrInvalidQueueName.
// out is a steprunner.Outcome, boxed by the caller once for every read
// of stepmemo (a box per call would allocate each time).
func (rt *Runtime) nextQueue(out any) (string, error) {
	name, ok := stepmemo.NextQueue(out)
	if !ok {
		return rt.opts.queueName, nil
	}
	if err := rt.validateStepQueue(name); err != nil {
		return "", fmt.Errorf("OnQueue: %w", err)
	}
	return name, nil
}

// validateStepQueue is ValidateQueueName, and refuses this Runtime's
// notify queue too: its worker would dead-letter a step job as an
// undecodable notification, into a queue that nothing works, and leave
// the step's run active for good.
func (rt *Runtime) validateStepQueue(name string) error {
	if err := ValidateQueueName(name); err != nil {
		return err
	}
	if name == rt.opts.notifyQueueName {
		return fmt.Errorf("%w: %q is the notify queue", ErrInvalidQueueName, name)
	}
	return nil
}
