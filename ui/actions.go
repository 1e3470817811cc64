package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/stepwell/stepwell/kvrecord"
	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/terminal"
)

// maxForm bounds an action's body: a signal's payload (up to the
// Runtime's limit, 1 MiB by default) form-encoded.
const maxForm = 4 << 20

// actionDef is one POST action.
type actionDef struct {
	path string // under BasePath
	// do acts on the form's target and returns the page to go to and its
	// flash code.
	do func(h *handler, ctx context.Context, r *http.Request) (to, done string, err error)
}

var actions = []actionDef{
	{"run/cancel", func(h *handler, ctx context.Context, r *http.Request) (string, string, error) {
		id := r.PostFormValue("id")
		if err := runtime.ValidateRunID(id); err != nil {
			return "", "", err
		}
		if err := h.checkCancellable(ctx, id); err != nil {
			return "", "", err
		}
		ok, err := h.rt.Cancel(ctx, id)
		if err != nil {
			return "", "", err
		}
		if !ok {
			return h.runURL(id), "cancel-ended", nil
		}
		return h.runURL(id), "cancel", nil
	}},
	{"run/retry", runAction("retry", func(rt *runtime.Runtime, ctx context.Context, id string, _ *http.Request) error {
		return rt.Retry(ctx, id)
	})},
	{"run/pause", runAction("pause", func(rt *runtime.Runtime, ctx context.Context, id string, _ *http.Request) error {
		return rt.Pause(ctx, id)
	})},
	{"run/resume", runAction("resume", func(rt *runtime.Runtime, ctx context.Context, id string, _ *http.Request) error {
		return rt.Resume(ctx, id)
	})},
	{"run/signal", runAction("signal", func(rt *runtime.Runtime, ctx context.Context, id string, r *http.Request) error {
		name := r.PostFormValue("name")
		if err := runtime.ValidateSignalName(name); err != nil {
			return err
		}
		var payload []byte
		if p := r.PostFormValue("payload"); p != "" {
			payload = []byte(p)
		}
		return rt.Signal(ctx, id, name, payload)
	})},
	{"job/requeue", func(h *handler, ctx context.Context, r *http.Request) (string, string, error) {
		id := r.PostFormValue("id")
		return h.requeue(ctx, id)
	}},
}

func runAction(done string, f func(rt *runtime.Runtime, ctx context.Context, id string, r *http.Request) error) func(*handler, context.Context, *http.Request) (string, string, error) {
	return func(h *handler, ctx context.Context, r *http.Request) (string, string, error) {
		id := r.PostFormValue("id")
		if err := runtime.ValidateRunID(id); err != nil {
			return "", "", err
		}
		if err := f(h.rt, ctx, id, r); err != nil {
			return "", "", err
		}
		return h.runURL(id), done, nil
	}
}

// action serves a POST: read-only, CSRF and form checks, then the action,
// then a redirect (303) to the page that shows its effect.
func (h *handler) action(a actionDef) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if why := h.readOnly(); why != "" {
			h.fail(w, r, http.StatusForbidden, "read-only: "+why)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "bad form: "+err.Error())
			return
		}
		if !h.checkCSRF(r) {
			h.fail(w, r, http.StatusForbidden, "missing or wrong form token: reload the page and try again")
			return
		}
		ctx, cancel := reqCtx(r)
		defer cancel()
		to, done, err := a.do(h, ctx, r)
		if err != nil {
			h.actionError(w, r, err)
			return
		}
		sep := "?"
		if containsQuery(to) {
			sep = "&"
		}
		http.Redirect(w, r, to+sep+"done="+url.QueryEscape(done), http.StatusSeeOther)
	}
}

func containsQuery(u string) bool {
	for i := range len(u) {
		if u[i] == '?' {
			return true
		}
	}
	return false
}

// refused is an action the UI will not take, with why.
type refused struct{ msg string }

func (e *refused) Error() string { return e.msg }

// actionError shows why an action was not taken: 409 for a run or job in
// the wrong state, 400 for bad input, 404 for unknown ones, 403 when the
// store cannot be written.
func (h *handler) actionError(w http.ResponseWriter, r *http.Request, err error) {
	var rf *refused
	switch {
	case errors.As(err, &rf):
		h.fail(w, r, http.StatusConflict, rf.msg)
	case errors.Is(err, runtime.ErrRunEnded), errors.Is(err, runtime.ErrRunNotRetryable), errors.Is(err, queue.ErrNotDead):
		h.fail(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, queue.ErrReadOnly), errors.Is(err, queue.ErrFenced):
		h.fail(w, r, http.StatusForbidden, "the store cannot be written from here: "+err.Error())
	default:
		h.storeError(w, r, "the action failed", err)
	}
}

// checkCancellable refuses to cancel an active run whose step job is dead
// (the queue dead-lettered it when its worker stopped on the last
// attempt): Cancel would wait for it forever. As `stepwell cancel`.
func (h *handler) checkCancellable(ctx context.Context, id string) error {
	rec, err := h.runRecord(ctx, id)
	if err != nil || rec == nil || rec.State != kvrecord.StateActive || rec.CurrentJob == "" {
		return err
	}
	job, err := h.q.GetJob(ctx, rec.CurrentJob)
	if err != nil || job.State != queue.JobDead {
		return nil
	}
	return &refused{fmt.Sprintf("the run's step job %s is dead (its worker stopped on the last attempt): requeue it first (Queues page), then cancel the run", job.ID)}
}

// runRecord reads a run's record; nil when there is none.
func (h *handler) runRecord(ctx context.Context, id string) (*kvrecord.Run, error) {
	b, err := h.q.Get(ctx, kvrecord.RunKey(id))
	if errors.Is(err, queue.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return kvrecord.DecodeRun(b)
}

// requeue makes dead job id pending again, as `stepwell requeue` does: a
// plain job or the current step of an active run is requeued; the dead
// final step of a failed or cancelled run by retrying the run; another
// step job (its run moved on, or ended otherwise) would never run and is
// refused.
func (h *handler) requeue(ctx context.Context, id string) (string, string, error) {
	if id == "" {
		return "", "", fmt.Errorf("%w: no job ID", queue.ErrInvalidJobID)
	}
	job, err := h.q.GetJob(ctx, id)
	if err != nil {
		return "", "", err
	}
	if job.State != queue.JobDead {
		return "", "", &refused{fmt.Sprintf("job %s is %s, not dead: nothing to requeue", id, job.State)}
	}
	back := h.opts.BasePath + "/queues"
	runID := job.Headers[runtime.HeaderRunID]
	if runID != "" && job.Headers[runtime.HeaderStep] != "" {
		rec, err := h.runRecord(ctx, runID)
		if err != nil {
			return "", "", err
		}
		switch {
		case rec == nil:
			return "", "", &refused{"the job is a step of a run that no longer exists: requeued, it would not run. Nothing was changed."}
		case rec.State != kvrecord.StateTerminal && rec.CurrentJob != id:
			return "", "", &refused{fmt.Sprintf("the job is an old step of its run, which is at step %d now: requeued, it would not run. Nothing was changed.", rec.CurrentStep)}
		case rec.State == kvrecord.StateTerminal:
			tb, err := h.q.Get(ctx, kvrecord.TerminalKey(rec.EndedAt, runID))
			if err != nil && !errors.Is(err, queue.ErrKeyNotFound) {
				return "", "", err
			}
			dead := ""
			if err == nil {
				t, err := kvrecord.DecodeTerminal(tb)
				if err != nil {
					return "", "", err
				}
				dead = t.DeadJob
			}
			if dead != id || terminal.Status(rec.Status) == terminal.Succeeded {
				return "", "", &refused{fmt.Sprintf("the job is a step of a run that ended (%s) at another step: requeued, it would not run. Nothing was changed; retry the run to run it again from its last step.", terminal.Status(rec.Status))}
			}
			if err := h.rt.Retry(ctx, runID); err != nil {
				return "", "", err
			}
			return h.runURL(runID), "requeue-run", nil
		}
		back = h.runURL(runID)
	}
	if err := h.q.RequeueDead(ctx, id); err != nil {
		return "", "", err
	}
	return back, "requeue", nil
}
