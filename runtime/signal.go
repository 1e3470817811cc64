package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
)

// Reserved step-job headers of a step that follows an await: the awaited
// signal name, and "1" when the await timed out.
const (
	HeaderSignal         = "workflow.signal"
	HeaderSignalTimedOut = "workflow.signal_timed_out"
)

// MaxSignalNameLen is the longest signal name accepted.
const MaxSignalNameLen = 128

// DefaultMaxSignalPayload is the default bound on a signal's payload
// (WithMaxSignalPayload).
const DefaultMaxSignalPayload = 1 << 20

// timerAttempts bounds the attempts of an await's timeout job: its handler
// fails only when the store does, and a timer that died would leave its
// run waiting for a signal only.
const timerAttempts = 1000

// ValidateSignalName returns ErrInvalidSignalName (wrapped with the reason)
// unless name is a valid signal name: 1 to 128 bytes of printable ASCII
// without '/', not starting or ending with a space.
func ValidateSignalName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("%w: empty", ErrInvalidSignalName)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: %q has leading or trailing whitespace", ErrInvalidSignalName, name)
	case len(name) > MaxSignalNameLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidSignalName, len(name), MaxSignalNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e || c == '/' {
			return fmt.Errorf("%w: byte %#x at %d (printable ASCII without '/')", ErrInvalidSignalName, c, i)
		}
	}
	return nil
}

// Signal delivers a signal named name with payload to a run. It is one
// transaction, durable when Signal returns, and works from any Runtime on
// the store (client Runtimes included):
//
//   - if the run awaits a signal of that name (steprunner.AwaitSignal), the
//     transaction starts its next step with payload (Step.Signal names the
//     signal) and removes the await's timeout job; a paused run's next
//     step is parked instead, and starts on Resume;
//   - otherwise the signal is appended to the run's mailbox, where the
//     run's next AwaitSignal of that name consumes it (one await, one
//     signal, in arrival order). A signal that loses a race with its
//     await's timeout (the timeout committed first) stays in the mailbox
//     the same way. Signals still in the mailbox when the run ends are
//     deleted with its record (after the terminal retention); a retried
//     run keeps them.
//
// Errors, each changing nothing: ErrInvalidRunID, ErrInvalidSignalName,
// a *SignalTooLargeError (payload over WithMaxSignalPayload),
// ErrRunNotFound for an unknown run, ErrRunEnded for a run that has ended
// or is being cancelled.
func (rt *Runtime) Signal(ctx context.Context, runID, name string, payload []byte) error {
	if err := ValidateRunID(runID); err != nil {
		return err
	}
	if err := ValidateSignalName(name); err != nil {
		return err
	}
	if len(payload) > rt.opts.maxSignalPayload {
		return &SignalTooLargeError{Size: len(payload), Max: rt.opts.maxSignalPayload}
	}
	if payload == nil {
		payload = []byte{}
	}
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			return fmt.Errorf("runtime: signal of run %q kept racing other writes", runID)
		}
		rec, old, err := rt.loadRun(ctx, runID)
		if err != nil {
			return err
		}
		if rec.State != kvrecord.StateActive {
			return fmt.Errorf("%w: run %q", ErrRunEnded, runID)
		}
		next := *rec
		next.UpdatedAt = rt.opts.now().UnixNano()
		txn := new(queue.Txn)
		if rec.WaitFor == name {
			if rec.WaitTimer != "" {
				txn.CancelJob(rec.WaitTimer) // the timeout loses: dropped
			}
			clearWait(&next)
			rt.startStep(txn, &next, payload, 0, &steprunner.SignalDelivery{Name: name}, false, rt.tel.traceParent(ctx))
		} else {
			next.MailSeq++
			next.Mailbox++
			txn.Put(runrec.MailboxKey(runID, name, next.MailSeq), payload)
		}
		rt.addHistory(txn, &next, signalHistory(&next, name, payload))
		txn.CompareAndPut(kvrecord.RunKey(runID), old, runrec.EncodeRun(&next))
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue // the run moved on meanwhile: read again
		}
		return err
	}
}

// clearWait marks a run record as no longer waiting.
func clearWait(r *kvrecord.Run) {
	r.WaitFor, r.WaitDeadline, r.WaitTimer = "", 0, ""
}

// startStep adds to txn what starts step next.CurrentStep with payload,
// due after delay, on the step queue next names: the step's enqueue
// (claimed by this process if claim, it is due now and the queue is this
// Runtime's, else dispatched), or, when the run is paused, its
// parked record. It sets next.CurrentJob (or next.Parked); the caller
// writes next. traceParent is the run's trace context (HeaderTraceParent;
// "" for none); a parked step does not keep it.
func (rt *Runtime) startStep(txn *queue.Txn, next *kvrecord.Run, payload []byte, delay time.Duration, sig *steprunner.SignalDelivery, claim bool, traceParent string) {
	if next.Paused {
		p := &runrec.Parked{RunID: next.RunID, Step: next.CurrentStep, Payload: payload,
			DueAt: addNanos(rt.opts.now().UnixNano(), delay)}
		if sig != nil {
			p.Signal, p.TimedOut = sig.Name, sig.TimedOut
		}
		if p.Payload == nil {
			p.Payload = []byte{}
		}
		next.CurrentJob, next.Parked = "", true
		txn.Put(runrec.ParkedKey(next.RunID), runrec.EncodeParked(p))
		return
	}
	next.CurrentJob = newJobID()
	opts := rt.stepOptions(next, next.CurrentStep, next.CurrentJob, traceParent)
	if sig != nil {
		opts.Headers[HeaderSignal] = sig.Name
		if sig.TimedOut {
			opts.Headers[HeaderSignalTimedOut] = "1"
		}
	}
	stepQueue := rt.stepQueue(next)
	switch {
	case delay > 0:
		opts.Delay = delay
	case claim && stepQueue == rt.opts.queueName:
		opts = qx.WithClaim(opts, !rt.opts.noChain)
	default:
		// Another step queue's step starts in an idle slot of a Runtime
		// of this process that serves it, if any.
		opts = qx.WithDispatch(opts, true)
	}
	txn.Enqueue(stepQueue, payload, opts)
}

// signalOf returns the SignalDelivery a step job's headers carry (nil for
// a step that did not follow an await).
func signalOf(h map[string]string) *steprunner.SignalDelivery {
	name, ok := h[HeaderSignal]
	if !ok {
		return nil
	}
	return &steprunner.SignalDelivery{Name: name, TimedOut: h[HeaderSignalTimedOut] == "1"}
}

// addNanos returns ns + d, saturating at math.MaxInt64.
func addNanos(ns int64, d time.Duration) int64 {
	if d > 0 && ns > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return ns + int64(d)
}

// timersQueue carries the timeout jobs of awaits (see handleTimer).
func (rt *Runtime) timersQueue() string { return runrec.TimersQueue(rt.opts.queueName) }

// await adds to txn (which acks step n) the rest of an AwaitSignal
// settlement into next: consume mail (the oldest signal of that name in
// the mailbox, if any) and start step n+1 with it; else mark the run
// waiting and, with a timeout, schedule the timeout job.
func (rt *Runtime) await(txn *queue.Txn, next *kvrecord.Run, out steprunner.Outcome, mail *queue.KV, traceParent string) {
	name := out.SignalName()
	if mail != nil {
		txn.Delete(mail.Key)
		next.Mailbox--
		rt.startStep(txn, next, mail.Value, 0, &steprunner.SignalDelivery{Name: name}, true, traceParent)
		return
	}
	next.WaitFor, next.CurrentJob = name, ""
	if t := out.Timeout(); t > 0 {
		next.WaitDeadline = addNanos(next.UpdatedAt, t)
		next.WaitTimer = newJobID()
		h := map[string]string{HeaderRunID: next.RunID, HeaderStep: strconv.FormatUint(uint64(next.CurrentStep), 10)}
		if traceParent != "" {
			h[HeaderTraceParent] = traceParent
		}
		// On the timers queue of the step queue the timeout starts a step
		// on: the Runtimes that serve it fire it.
		txn.Enqueue(runrec.TimersQueue(rt.stepQueue(next)), nil, queue.EnqueueOptions{
			JobID: next.WaitTimer, Delay: t, MaxAttempts: timerAttempts, Headers: h,
		})
	}
}

// mailHead returns the oldest signal named name in a run's mailbox, or nil.
func (rt *Runtime) mailHead(ctx context.Context, rec *kvrecord.Run, name string) (*queue.KV, error) {
	if rec.Mailbox == 0 {
		return nil, nil
	}
	page, err := rt.q.Scan(ctx, runrec.MailboxNamePrefix(rec.RunID, name), queue.ScanOptions{Limit: 1})
	if err != nil || len(page.Items) == 0 {
		return nil, err
	}
	return &page.Items[0], nil
}

// handleTimer fires an await's timeout: if the run still waits for that
// await (the job is its WaitTimer), one transaction acks the timer and
// starts the run's next step with an empty payload and
// SignalDelivery.TimedOut (parked if the run is paused). A timer that lost
// to a signal, a cancel or the run's end is acknowledged and dropped.
func (rt *Runtime) handleTimer(claimCtx context.Context, job *queue.Job) error {
	ctx := context.WithoutCancel(claimCtx)
	runID := job.Headers[HeaderRunID]
	for {
		rec, old, err := rt.loadRun(ctx, runID)
		if errors.Is(err, ErrRunNotFound) || err == nil && (rec.State != kvrecord.StateActive || rec.WaitTimer != job.ID) {
			err = rt.q.Ack(ctx, job)
			if queue.IsClaimLost(err) {
				return nil
			}
			return err
		}
		if err != nil {
			return err // the lease expires and the timer fires again
		}
		next := *rec
		next.UpdatedAt = rt.opts.now().UnixNano()
		sig := &steprunner.SignalDelivery{Name: rec.WaitFor, TimedOut: true}
		clearWait(&next)
		txn := new(queue.Txn).Ack(job)
		rt.startStep(txn, &next, []byte{}, 0, sig, false, job.Headers[HeaderTraceParent])
		rt.addHistory(txn, &next, &runrec.History{Kind: string(HistoryAwaitTimeout), Step: next.CurrentStep,
			Queue: rt.stepQueue(&next), Job: next.CurrentJob, Signal: sig.Name, End: next.UpdatedAt})
		txn.CompareAndPut(kvrecord.RunKey(runID), old, runrec.EncodeRun(&next))
		_, err = rt.q.Commit(ctx, txn)
		if errors.Is(err, queue.ErrConditionFailed) {
			continue
		}
		if queue.IsClaimLost(err) {
			return nil // cancelled by a signal that won
		}
		return err
	}
}

// deleteRunKeys adds to txn the deletion of a run's mailbox, memory,
// history and parked step, for the transaction that deletes its record (old: its
// bytes). A mailbox or memory too large for one transaction is emptied
// first by transactions of their own, each conditional on the record
// being old. A run that never had mail nor memory costs no read.
func (rt *Runtime) deleteRunKeys(ctx context.Context, txn *queue.Txn, rec *kvrecord.Run, old []byte) error {
	if rec.Parked {
		txn.Delete(runrec.ParkedKey(rec.RunID))
	}
	if rec.MailSeq != 0 {
		if err := rt.deletePrefix(ctx, txn, rec, old, runrec.MailboxRunPrefix(rec.RunID)); err != nil {
			return err
		}
	}
	if rec.MemoKeys != 0 {
		if err := rt.deletePrefix(ctx, txn, rec, old, runrec.MemoRunPrefix(rec.RunID)); err != nil {
			return err
		}
	}
	if rec.HistorySeq != 0 {
		if err := rt.deletePrefix(ctx, txn, rec, old, runrec.HistoryRunPrefix(rec.RunID)); err != nil {
			return err
		}
	}
	return rt.deleteChildKeys(ctx, txn, rec, old)
}

// deletePrefix is deleteRunKeys for the keys under one prefix of the run.
func (rt *Runtime) deletePrefix(ctx context.Context, txn *queue.Txn, rec *kvrecord.Run, old, prefix []byte) error {
	const batch = 500
	for {
		page, err := rt.q.Scan(ctx, prefix, queue.ScanOptions{Limit: batch})
		if err != nil {
			return err
		}
		if page.Next == nil {
			for _, kv := range page.Items {
				txn.Delete(kv.Key)
			}
			return nil
		}
		del := new(queue.Txn).CompareAndPut(kvrecord.RunKey(rec.RunID), old, old)
		for _, kv := range page.Items {
			del.Delete(kv.Key)
		}
		if _, err := rt.q.Commit(ctx, del); err != nil {
			return err
		}
	}
}
