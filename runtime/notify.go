package runtime

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/runrec"
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
	// Retries is the run's retry count (Runtime.Retry) when it ended.
	// Appended in November 2026: notifications enqueued before have 7
	// fields, and decode with Retries 0.
	Retries uint32
}

// notificationFields is the number of fields of notification;
// notificationFieldsV1 of those enqueued before Retries.
const (
	notificationFields   = 8
	notificationFieldsV1 = 7
)

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
	b = format.AppendInt64(b, n.EndedAt)
	return format.AppendUint32(b, n.Retries)
}

// readNotification is the fast reader of encode's output, and of the
// shorter notifications enqueued before Retries.
func readNotification(rd *format.Reader, n *notification) {
	fields := rd.FieldsIn(notificationFieldsV1, notificationFields)
	n.RunID = rd.String()
	n.Status = rd.Uint8()
	n.Result = rd.Bytes()
	n.Error = rd.String()
	n.Headers = rd.StringMap()
	n.FinalStep = rd.Uint32()
	n.EndedAt = rd.Int64()
	if fields == notificationFields {
		n.Retries = rd.Uint32()
	}
}

// notificationV1 is a notification enqueued before Retries.
type notificationV1 struct {
	RunID     string
	Status    uint8
	Result    []byte
	Error     string
	Headers   map[string]string
	FinalStep uint32
	EndedAt   int64
}

// unmarshalNotification is the reflective decoder of notifications of
// either shape: what the fast reader must agree with.
func unmarshalNotification(b []byte, n *notification) error {
	*n = notification{}
	err := format.UnmarshalExact(b, n)
	if err == nil {
		return nil
	}
	var v1 notificationV1
	if format.UnmarshalExact(b, &v1) != nil {
		*n = notification{}
		return err
	}
	*n = notification{RunID: v1.RunID, Status: v1.Status, Result: v1.Result, Error: v1.Error,
		Headers: v1.Headers, FinalStep: v1.FinalStep, EndedAt: v1.EndedAt}
	return nil
}

func decodeNotification(b []byte) (*notification, error) {
	var n notification
	rd := format.NewReader(b)
	readNotification(&rd, &n)
	if rd.Finish() != nil {
		if err := unmarshalNotification(b, &n); err != nil {
			return nil, err
		}
	}
	return &n, nil
}

func (n *notification) outcome() terminal.Outcome {
	return terminal.Outcome{
		RunID: n.RunID, Status: terminal.Status(n.Status), Result: n.Result, Error: n.Error,
		Headers: n.Headers, FinalStep: n.FinalStep, EndedAt: time.Unix(0, n.EndedAt).UTC(),
		Retries: n.Retries,
	}
}

// handleNotification calls the hook for one notification job and settles
// it: acknowledged on success, retried with backoff (or after the hook's
// Retry-After) on error, dead-lettered when the error is permanent or the
// attempts are used up.
//
// A delivery whose claim was lost (its lease ran out) is logged, whether
// the loss was seen before settling or the settlement was refused: the
// hook is called again.
func (rt *Runtime) handleNotification(ctx context.Context, job *queue.Job) (err error) {
	settle := context.WithoutCancel(ctx)
	defer func() {
		if queue.IsClaimLost(err) {
			rt.logNotificationLost(job, err)
			err = nil
		}
	}()
	n, err := decodeNotification(job.Payload)
	if err != nil {
		return rt.q.DeadLetter(settle, job, fmt.Sprintf("undecodable notification: %v", err))
	}
	o := n.outcome()
	began := time.Now()
	hookCtx, span := rt.tel.startHook(ctx, job, &o)
	err = callHook(hookCtx, rt.hook, o)
	endSpan(span, err)
	if cause := context.Cause(ctx); errors.Is(cause, queue.ErrClaimLost) {
		return cause
	}
	h := &runrec.History{Kind: string(HistoryHookDelivered), Step: n.FinalStep, Attempt: job.Attempt,
		Queue: job.Queue, Job: job.ID, Start: began.UnixNano()}
	switch {
	case err == nil:
		return rt.settleNotification(settle, qx.TakeTxn().Ack(job), job, n.RunID, h)
	case terminal.IsPermanent(err) || job.Attempt >= job.MaxAttempts:
		logHookError(rt.opts.logger, n.RunID, job.Attempt, true, err)
		h.Kind, h.Error = string(HistoryHookFailed), runrec.HistoryError(err.Error())
		if terminal.IsPermanent(err) {
			return rt.settleNotification(settle, qx.TakeTxn().DeadLetter(job, err.Error()), job, n.RunID, h)
		}
		after, _ := terminal.RetryAfter(err)
		return rt.settleNotification(settle, qx.TakeTxn().Nack(job, err, after), job, n.RunID, h)
	default:
		logHookError(rt.opts.logger, n.RunID, job.Attempt, false, err)
	}
	after, _ := terminal.RetryAfter(err)
	return rt.q.Nack(settle, job, err, after)
}

// settleNotification commits txn, the settlement of a notification job,
// with the run's history entry h, in one transaction: under the seq that
// the run's end reserved for it (the job's headerHookSeq; none: no
// entry), so that it needs no read of the run record.
func (rt *Runtime) settleNotification(ctx context.Context, txn *queue.Txn, job *queue.Job, runID string, h *runrec.History) error {
	if seq, err := strconv.ParseUint(job.Headers[headerHookSeq], 10, 64); err == nil && seq > 0 {
		h.Worker, h.End = rt.opts.workerName, rt.opts.now().UnixNano()
		txn.Put(runrec.HistoryKV(runID, seq, h))
		dropHistory(txn, runID, seq)
	}
	_, err := rt.commitPooled(ctx, txn)
	return err
}

// headerHookSeq carries, on a notification job, the seq of the run's
// history entry reserved for the hook's delivery.
const headerHookSeq = ReservedPrefix + "history_seq"

// withHookSeq returns o with the header of seq (0: none).
func withHookSeq(o queue.EnqueueOptions, seq uint64) queue.EnqueueOptions {
	if seq > 0 {
		o.Headers[headerHookSeq] = strconv.FormatUint(seq, 10)
	}
	return o
}

func callHook(ctx context.Context, h terminal.Hook, o terminal.Outcome) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("runtime: terminal hook panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return h.OnTermination(ctx, o)
}
