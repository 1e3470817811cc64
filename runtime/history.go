package runtime

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/stepwell/stepwell/internal/queuex"
	"github.com/stepwell/stepwell/internal/runrec"
	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/steprunner"
	"github.com/stepwell/stepwell/terminal"
)

// HistoryKind says what a run's history entry records: how a step's
// attempt settled (the attempt kinds), or what happened to the run
// between attempts (the control kinds). Its values are short snake_case
// strings, stable in the store and in JSON.
type HistoryKind string

// The attempt kinds: how a step's attempt settled. An attempt whose
// settlement did not commit (its lease lost, its process killed) has no
// entry of its own; the next committed attempt of the step records it
// as HistoryLeaseLost (see HistoryEntry).
const (
	// HistoryContinue: the step returned Continue; the next step is
	// enqueued now.
	HistoryContinue HistoryKind = "continue"
	// HistoryDelay: the step returned Continue with a delay; the next
	// step is due at Due.
	HistoryDelay HistoryKind = "delay"
	// HistoryAwait: the step returned AwaitSignal(Signal); the run waits
	// (until Due, if it has a timeout).
	HistoryAwait HistoryKind = "await"
	// HistorySpawn: the step returned Spawn; ResultSize is the number of
	// children.
	HistorySpawn HistoryKind = "spawn"
	// HistorySucceed: the step returned Succeed; the run ended.
	HistorySucceed HistoryKind = "succeed"
	// HistoryFail: the step returned Fail; the run ended.
	HistoryFail HistoryKind = "fail"
	// HistoryCancel: the step returned Cancel, or the run's cancel ended
	// it when the step returned; the run ended.
	HistoryCancel HistoryKind = "cancel"
	// HistoryError: the step returned an error. It is retried at Due, or,
	// when permanent or on the last attempt, the run failed (Due zero).
	HistoryError HistoryKind = "error"
	// HistoryPanic: the step panicked; retried or failed as an error.
	HistoryPanic HistoryKind = "panic"
	// HistoryTimeout: the attempt ran out of its step timeout; retried or
	// failed as an error.
	HistoryTimeout HistoryKind = "timeout"
	// HistoryLeaseLost: an earlier attempt of the step did not settle
	// (its worker died or lost its lease); written by the step's next
	// committed settlement, with the error the queue recorded for it.
	HistoryLeaseLost HistoryKind = "lease_lost"
	// HistoryDead: the queue dead-lettered the step's job without the
	// runtime (its last attempt did not settle); the run failed, or ended
	// cancelled.
	HistoryDead HistoryKind = "dead"
)

// The control kinds: what happened to the run between attempts.
const (
	// HistorySubmitted: the run was submitted (step 0 due at Due), or
	// spawned by its parent. Its entry (Seq 1) is read from the run
	// record, which Submit writes anyway: it costs nothing to keep, and
	// has no worker, sizes nor preview.
	HistorySubmitted HistoryKind = "submitted"
	// HistorySignal: a signal named Signal was delivered (Signal), or
	// woke the awaiting run.
	HistorySignal HistoryKind = "signal"
	// HistoryAwaitTimeout: the run's await of Signal timed out.
	HistoryAwaitTimeout HistoryKind = "await_timeout"
	// HistoryJoin: the children of the run's Spawn all ended; the next
	// step is enqueued.
	HistoryJoin HistoryKind = "join"
	// HistoryPause and HistoryResume: Pause and Resume took effect.
	HistoryPause  HistoryKind = "pause"
	HistoryResume HistoryKind = "resume"
	// HistoryCancelRequested: Cancel flagged a running step; the run ends
	// when the step returns (a HistoryCancel entry). A Cancel that ends
	// the run at once writes HistoryCancel.
	HistoryCancelRequested HistoryKind = "cancel_requested"
	// HistoryDeadline: the run's deadline (RunSpec.Deadline) ended it
	// (Error says so).
	HistoryDeadline HistoryKind = "deadline"
	// HistoryRetry: Retry started the ended run again at Step.
	HistoryRetry HistoryKind = "retry"
	// HistoryHookDelivered and HistoryHookFailed: the terminal hook took
	// the run's notification, or gave up on it (Error).
	HistoryHookDelivered HistoryKind = "hook_delivered"
	HistoryHookFailed    HistoryKind = "hook_failed"
)

// HistoryEntry is one entry of a run's history (Runtime.History): a
// step's attempt, as its settlement committed it, or a control entry.
type HistoryEntry struct {
	// Seq numbers the run's entries from 1, in commit order. The newest
	// 1,000 are kept: the first entry History returns has Seq-1 older
	// entries before it, counted but no longer kept. The end of a run
	// whose Runtimes have a terminal hook reserves the next Seq for the
	// hook's delivery (hook_delivered or hook_failed), written when the
	// hook settles: until then that Seq is missing.
	Seq  uint64      `json:"seq"`
	Kind HistoryKind `json:"kind"`
	// Step is the step number; Attempt its attempt (from 1), 0 in control
	// entries. In hook_delivered and hook_failed, Step is the run's final
	// step and Attempt the delivery's attempt (from 1).
	Step    uint32 `json:"step"`
	Attempt uint32 `json:"attempt,omitempty"`
	// Queue is the step queue of the attempt's job (control entries: the
	// run's current step queue, "" if unknown; hook entries: the notify
	// queue).
	Queue string `json:"queue,omitempty"`
	// Worker names the process that committed the entry (WithWorkerName;
	// host:pid by default). For HistoryLeaseLost, it is the process that
	// recorded it, not the one that lost the attempt.
	Worker string `json:"worker,omitempty"`
	// Job is the queue job of the attempt ("" in control entries).
	Job string `json:"job,omitempty"`
	// Start is when the attempt started running, End when its settlement
	// committed (about: the settling process's clock just before the
	// commit). Control entries have Start equal to End.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Error is the error or reason text (a step's error, a Fail or
	// Cancel reason, a dead job's reason), at most 2 KiB (the terminal
	// record keeps the whole of a run's final error).
	Error string `json:"error,omitempty"`
	// PayloadSize is the size of the step's payload (a signal entry: the
	// signal's payload), ResultSize the size of what the step returned:
	// the result of Succeed, the next step's payload of Continue and
	// AwaitSignal, the number of children of Spawn.
	PayloadSize int64 `json:"payload_size"`
	ResultSize  int64 `json:"result_size"`
	// Preview is the start of what the step returned (the signal's
	// payload for a signal entry, the input for submitted): at most 256
	// bytes of it as text when it is UTF-8, else the hex of its first 128
	// bytes with PreviewBinary set. It is truncated when shorter than
	// ResultSize (PayloadSize for signal and submitted).
	Preview       string `json:"preview,omitempty"`
	PreviewBinary bool   `json:"preview_binary,omitempty"`
	// Signal is the signal's name in signal, await and await_timeout
	// entries.
	Signal string `json:"signal,omitempty"`
	// Due is when what the entry scheduled is due: the next step of a
	// delay, the retry of an error, the timeout of an await, step 0 of a
	// submitted run. Zero when none.
	Due time.Time `json:"due,omitzero"`
}

// Duration returns End - Start: how long the attempt ran and settled.
func (e HistoryEntry) Duration() time.Duration { return e.End.Sub(e.Start) }

// History returns the run's history, oldest first: the newest 1,000
// entries (see HistoryEntry.Seq for the count of older ones). It reads
// the store, from any Runtime on it (a client Runtime, a cluster
// member). Unknown runs (or expired: the history goes with the run
// record) return ErrRunNotFound.
func (rt *Runtime) History(ctx context.Context, runID string) ([]HistoryEntry, error) {
	if err := ValidateRunID(runID); err != nil {
		return nil, err
	}
	rec, _, err := rt.loadRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := make([]HistoryEntry, 0, min(rec.HistorySeq, runrec.HistoryKeep))
	if rec.HistorySeq >= submittedSeq && rec.HistorySeq < submittedSeq+runrec.HistoryKeep {
		// The submitted entry, still among the newest: from the record.
		at := unixTime(rec.SubmittedAt)
		e := HistoryEntry{Seq: submittedSeq, Kind: HistorySubmitted, Start: at, End: at, Due: unixTime(rec.StartAt)}
		if rec.CurrentStep == 0 {
			e.Queue = rec.Queue
		}
		out = append(out, e)
	}
	prefix := runrec.HistoryRunPrefix(runID)
	var after []byte
	for {
		page, err := rt.q.Scan(ctx, prefix, queue.ScanOptions{After: after, Limit: queue.MaxScanLimit})
		if err != nil {
			return nil, err
		}
		for _, kv := range page.Items {
			seq, err := runrec.ParseHistorySeq(kv.Key, runID)
			if err != nil {
				return nil, err
			}
			h, err := runrec.DecodeHistory(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("run %q history entry %d: %w", runID, seq, err)
			}
			out = append(out, historyEntry(seq, h))
		}
		if page.Next == nil {
			return out, nil
		}
		after = page.Next
	}
}

// historyEntry returns the public form of stored entry seq.
func historyEntry(seq uint64, h *runrec.History) HistoryEntry {
	e := HistoryEntry{Seq: seq, Kind: HistoryKind(h.Kind), Step: h.Step, Attempt: h.Attempt, Queue: h.Queue,
		Worker: h.Worker, Job: h.Job, Start: unixTime(h.Start), End: unixTime(h.End), Error: h.Error,
		PayloadSize: int64(h.PayloadSize), ResultSize: int64(h.ResultSize), Signal: h.Signal, Due: unixTime(h.Due)}
	if utf8.Valid(h.Preview) {
		e.Preview = string(h.Preview)
	} else {
		e.Preview, e.PreviewBinary = hex.EncodeToString(h.Preview[:min(len(h.Preview), runrec.HistoryPreviewMax/2)]), true
	}
	return e
}

// WithWorkerName names this process in the history entries it writes
// (HistoryEntry.Worker): a pod or host name, say. The default is
// host:pid. At most 128 bytes.
func WithWorkerName(name string) Option {
	return func(o *options) error {
		if name == "" || len(name) > 128 || !utf8.ValidString(name) {
			return invalid("worker name %q: 1 to 128 bytes of UTF-8", name)
		}
		o.workerName = name
		return nil
	}
}

// defaultWorkerName returns host:pid.
func defaultWorkerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// addHistory appends entry h to the history of the run whose record next
// the transaction txn writes (not yet encoded): it numbers h with
// next.HistorySeq+1, puts it, and deletes the entry that falls out of the
// newest runrec.HistoryKeep. h.End defaults to now, h.Start to h.End.
func (rt *Runtime) addHistory(txn *queue.Txn, next *kvrecord.Run, h *runrec.History) {
	if next.HistorySeq == 0 {
		// A run submitted before history: its submission is entry 1 all
		// the same (see History).
		next.HistorySeq = submittedSeq
	}
	next.HistorySeq++
	h.Worker = rt.opts.workerName
	if h.End == 0 {
		h.End = rt.opts.now().UnixNano()
	}
	if h.Start == 0 {
		h.Start = h.End
	}
	txn.Put(runrec.HistoryKV(next.RunID, next.HistorySeq, h))
	dropHistory(txn, next.RunID, next.HistorySeq)
}

// submittedSeq is the Seq of a run's submitted entry: not stored, but
// read from its run record (see History), which Submit and Spawn write
// with HistorySeq submittedSeq.
const submittedSeq = 1

// dropHistory adds to txn, which writes entry seq of a run's history,
// the deletion of the entry that falls out of the newest
// runrec.HistoryKeep (none while it is the submitted one, never stored).
func dropHistory(txn *queue.Txn, runID string, seq uint64) {
	if seq > runrec.HistoryKeep+submittedSeq {
		txn.Delete(runrec.HistoryKey(runID, seq-runrec.HistoryKeep))
	}
}

// stepHistory returns the entry of job's attempt of step n, begun at
// began; the settlement sets its kind and what the step returned.
func (rt *Runtime) stepHistory(job *queue.Job, n uint32, began time.Time) *runrec.History {
	return &runrec.History{Step: n, Attempt: job.Attempt, Queue: job.Queue, Job: job.ID,
		Start: began.UnixNano(), PayloadSize: uint64(len(job.Payload))}
}

// errorKind is the kind of an attempt that returned err.
func errorKind(err error) HistoryKind {
	var p *stepPanic
	switch {
	case errors.As(err, &p):
		return HistoryPanic
	case errors.Is(err, steprunner.ErrStepTimeout):
		return HistoryTimeout
	}
	return HistoryError
}

// setOutput records b as what the entry's step returned (or its signal
// carried): its size and preview.
func setOutput(h *runrec.History, b []byte) {
	h.ResultSize, h.Preview = uint64(len(b)), runrec.HistoryPreview(b)
}

// attemptHistory appends to the history of the run whose record next txn
// writes the entry h of an attempt of job, after entries for the
// attempts before it that lost their lease since the last committed
// settlement: the trailing attempts of the job's queue history that the
// queue ended (queuex.LostAttempt: "lease expired", "worker stopped
// without settling"). dead says the job is dead and its history's last
// attempt is h's (the queue recorded it); otherwise the job is claimed
// for h's attempt and its history ends with the attempt before. job may
// be nil (none known).
func (rt *Runtime) attemptHistory(txn *queue.Txn, next *kvrecord.Run, job *queue.Job, dead bool, h *runrec.History) {
	if job != nil && (job.Attempt > 1 || dead) {
		hist, last := job.History, int64(job.Attempt)-1
		if dead && len(hist) > 0 {
			hist = hist[:len(hist)-1]
		}
		c := 0
		for c < len(hist) && c < int(last) && queuex.LostAttempt(hist[len(hist)-1-c].Error) {
			c++
		}
		for i := len(hist) - c; i < len(hist); i++ {
			attempt := last - int64(len(hist)-1-i)
			if attempt < 1 {
				continue
			}
			at := hist[i].At.UnixNano()
			rt.addHistory(txn, next, &runrec.History{Kind: string(HistoryLeaseLost), Step: h.Step,
				Attempt: uint32(attempt), Queue: job.Queue, Job: job.ID, Start: at, End: at, Error: hist[i].Error,
				PayloadSize: uint64(len(job.Payload))})
		}
	}
	rt.addHistory(txn, next, h)
}

// endHistory appends the history entry of the ending e (at ended) to the
// run whose final record next txn writes.
func (rt *Runtime) endHistory(txn *queue.Txn, next *kvrecord.Run, e *ending, ended int64) {
	h := e.hist
	if h == nil {
		h = &runrec.History{Kind: string(endingKind(e.status)), Step: e.step, Queue: e.queue}
	}
	h.End = ended
	if h.Error == "" {
		h.Error = runrec.HistoryError(e.reason)
	}
	if e.status == terminal.Succeeded {
		setOutput(h, e.result)
	}
	rt.attemptHistory(txn, next, e.histJob, e.histDead, h)
}

// endingKind is the kind of a run's end with status s.
func endingKind(s terminal.Status) HistoryKind {
	switch s {
	case terminal.Succeeded:
		return HistorySucceed
	case terminal.Failed:
		return HistoryFail
	}
	return HistoryCancel
}

// signalHistory is the entry of a signal name delivered to the run whose
// record next its transaction writes: Job is the step it started, "" if
// it went to the mailbox.
func signalHistory(next *kvrecord.Run, name string, payload []byte) *runrec.History {
	return &runrec.History{Kind: string(HistorySignal), Step: next.CurrentStep, Queue: next.Queue, Job: next.CurrentJob,
		Signal: name, End: next.UpdatedAt, PayloadSize: uint64(len(payload)), Preview: runrec.HistoryPreview(payload)}
}

// controlHistory is the entry of kind of the run whose record next its
// transaction writes, at next.UpdatedAt.
func controlHistory(kind HistoryKind, next *kvrecord.Run) *runrec.History {
	return &runrec.History{Kind: string(kind), Step: next.CurrentStep, Queue: next.Queue, Job: next.CurrentJob, End: next.UpdatedAt}
}
