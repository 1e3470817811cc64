package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/terminal"
)

// notification is the payload of a terminal-notification job.
type notification struct {
	RunID     string
	Status    uint8
	Result    []byte
	Error     string
	Headers   map[string]string
	FinalStep uint32
	EndedAt   int64
}

// notificationFields is the number of fields of notification.
const notificationFields = 7

// encode returns the bytes of format.Marshal(n), written without
// reflection.
func (n *notification) encode() []byte {
	size := 64 + len(n.RunID) + len(n.Result) + len(n.Error)
	size += format.StringMapSize(n.Headers)
	b := format.AppendArrayLen(make([]byte, 0, size), notificationFields)
	b = format.AppendString(b, n.RunID)
	b = format.AppendUint8(b, n.Status)
	b = format.AppendBytes(b, n.Result)
	b = format.AppendString(b, n.Error)
	b = format.AppendStringMap(b, n.Headers)
	b = format.AppendUint32(b, n.FinalStep)
	return format.AppendInt64(b, n.EndedAt)
}

func readNotification(rd *format.Reader, n *notification) {
	rd.Fields(notificationFields)
	n.RunID = rd.String()
	n.Status = rd.Uint8()
	n.Result = rd.Bytes()
	n.Error = rd.String()
	n.Headers = rd.StringMap()
	n.FinalStep = rd.Uint32()
	n.EndedAt = rd.Int64()
}

func decodeNotification(b []byte) (*notification, error) {
	var n notification
	rd := format.NewReader(b)
	readNotification(&rd, &n)
	if err := format.Exact(&rd, b, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

func (n *notification) outcome() terminal.Outcome {
	return terminal.Outcome{
		RunID: n.RunID, Status: terminal.Status(n.Status), Result: n.Result, Error: n.Error,
		Headers: n.Headers, FinalStep: n.FinalStep, EndedAt: time.Unix(0, n.EndedAt).UTC(),
	}
}

// handleNotification calls the hook for one notification job and settles
// it: acknowledged on success, retried with backoff (or after the hook's
// Retry-After) on error, dead-lettered when the error is permanent or the
// attempts are used up.
func (rt *Runtime) handleNotification(ctx context.Context, job *queue.Job) error {
	settle := context.WithoutCancel(ctx)
	n, err := decodeNotification(job.Payload)
	if err != nil {
		return rt.q.DeadLetter(settle, job, fmt.Sprintf("undecodable notification: %v", err))
	}
	err = callHook(ctx, rt.hook, n.outcome())
	if errors.Is(context.Cause(ctx), queue.ErrClaimLost) {
		return nil
	}
	switch {
	case err == nil:
		return rt.q.Ack(settle, job)
	case terminal.IsPermanent(err):
		return rt.q.DeadLetter(settle, job, err.Error())
	}
	after, _ := terminal.RetryAfter(err)
	return rt.q.Nack(settle, job, err, after)
}

func callHook(ctx context.Context, h terminal.Hook, o terminal.Outcome) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("runtime: terminal hook panicked: %v", r)
		}
	}()
	return h.OnTermination(ctx, o)
}
