package ui

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// ErrInvalidOptions is returned by New for Options it cannot use; the
// error says which field.
var ErrInvalidOptions = errors.New("ui: invalid options")

// Defaults of Options.
const (
	DefaultTitle   = "Stepwell"
	DefaultRefresh = 2 * time.Second
)

// Options configure the handler New returns. The zero value serves the
// UI at the root of its server, writable when the store is, to whoever
// reaches it: mount it behind the service's own authentication, or set
// Authorize.
type Options struct {
	// Title names the UI in each page's header and title. Defaults to
	// "Stepwell".
	Title string
	// BasePath is the path the handler is mounted under, e.g.
	// "/admin/stepwell" (no trailing slash; "" for the root). The
	// handler is given the request's full path (mount it with
	// mux.Handle(BasePath+"/", h), without http.StripPrefix); every link
	// it draws starts with BasePath. Defaults to "".
	BasePath string
	// ReadOnly shows runs, queues and the store without any action: no
	// form is drawn and every POST is refused with 403. The UI is
	// read-only also when the Runtime's store is open read-only
	// (queue.RoleReadOnly). Defaults to false.
	ReadOnly bool
	// ReadOnlyReason says why the UI is read-only, on every page (e.g.
	// "another process writes the store, not in cluster mode"). Defaults to
	// a reason of the UI's own.
	ReadOnlyReason string
	// Authorize, when set, is called before every request is served. It
	// returns true to let the request through; false when it refused it,
	// having written the response itself (e.g. 401 with a
	// WWW-Authenticate header). BasicAuth and TokenAuth make one. nil
	// lets every request through. Defaults to nil.
	Authorize func(w http.ResponseWriter, r *http.Request) bool
	// StoreURL, when set, is the store's URL: the Store page reads the
	// store's owner object there to show the writer (its ID, epoch,
	// heartbeat and cluster address), as `stepwell stats` does. Defaults
	// to "": the page shows this process's view of the store only.
	StoreURL string
	// Refresh is how often pages fetch their changing parts again (in the
	// browser; a run's page stops once the run ended). Defaults to
	// DefaultRefresh (2s); at least 250ms.
	Refresh time.Duration
	// CSRFKey is the secret the forms' anti-CSRF tokens are MACed with.
	// Set it (32 random bytes or more) to share tokens between replicas of
	// a service behind one address; defaults to a random key of the
	// handler's own.
	CSRFKey []byte
	// Logger receives the errors the UI shows as a 500 page. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// handler is the UI: an http.Handler built by New.
type handler struct {
	// Immutable after New.
	rt      *runtime.Runtime
	q       *queue.Queue
	opts    Options
	mux     *http.ServeMux
	tmpl    map[string]*template.Template
	csrfKey []byte
	cop     *http.CrossOriginProtection
	static  http.Handler
	started time.Time

	mu     sync.Mutex // guards counts
	counts *countCache
}

// New returns the UI of rt's store as an http.Handler: the runs, one run
// with its history, the queues with their dead letters, the store, and
// the actions (cancel, retry, pause, resume, signal, requeue) that go
// through rt. See the package documentation for what it guarantees.
func New(rt *runtime.Runtime, opts Options) (http.Handler, error) {
	if rt == nil {
		return nil, fmt.Errorf("%w: a Runtime is required", ErrInvalidOptions)
	}
	if opts.Title == "" {
		opts.Title = DefaultTitle
	}
	if b := opts.BasePath; b != "" && (!strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.ContainsAny(b, "?#%\"'<> ") || strings.Contains(b, "//")) {
		return nil, fmt.Errorf("%w: BasePath %q must start with '/', not end with one, and hold no '?', '#', '%%', quotes or spaces", ErrInvalidOptions, b)
	}
	switch {
	case opts.Refresh == 0:
		opts.Refresh = DefaultRefresh
	case opts.Refresh < 250*time.Millisecond:
		return nil, fmt.Errorf("%w: Refresh %v is below 250ms", ErrInvalidOptions, opts.Refresh)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &handler{rt: rt, q: rt.Queue(), opts: opts, started: time.Now()}
	switch {
	case opts.CSRFKey == nil:
		h.csrfKey = make([]byte, 32)
		_, _ = rand.Read(h.csrfKey) // never fails (crypto/rand)
	case len(opts.CSRFKey) < 32:
		return nil, fmt.Errorf("%w: CSRFKey has %d bytes, fewer than 32", ErrInvalidOptions, len(opts.CSRFKey))
	default:
		h.csrfKey = append([]byte(nil), opts.CSRFKey...)
	}
	var err error
	if h.tmpl, err = parseTemplates(); err != nil {
		return nil, err
	}
	h.cop = http.NewCrossOriginProtection()
	h.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "cross-origin request refused: actions are taken from the UI's own pages")
	}))
	sub, _ := fs.Sub(assets, "static")
	h.static = http.StripPrefix(opts.BasePath+"/static/", http.FileServerFS(sub))

	b := opts.BasePath
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+b+"/{$}", h.redirectRuns)
	if b != "" {
		mux.HandleFunc("GET "+b+"", h.redirectRuns)
	}
	mux.HandleFunc("GET "+b+"/runs", h.runsPage)
	mux.HandleFunc("GET "+b+"/run", h.runPage)
	mux.HandleFunc("GET "+b+"/queues", h.queuesPage)
	mux.HandleFunc("GET "+b+"/store", h.storePage)
	mux.HandleFunc("GET "+b+"/static/", h.serveStatic)
	for _, a := range actions {
		mux.HandleFunc("POST "+b+"/"+a.path, h.action(a))
	}
	mux.HandleFunc(b+"/", h.notFound)
	h.mux = mux
	return h, nil
}

// ServeHTTP applies the security headers, the Authorize hook and the
// cross-origin check to every request, then routes it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	if h.opts.Authorize != nil && !h.opts.Authorize(w, r) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Browsers say where a request comes from (Sec-Fetch-Site,
		// Origin): a cross-site POST is refused before its token is
		// even read.
		if err := h.cop.Check(r); err != nil {
			h.fail(w, r, http.StatusForbidden, "cross-origin request refused: actions are taken from the UI's own pages")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) redirectRuns(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, h.opts.BasePath+"/runs", http.StatusSeeOther)
}

func (h *handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=300")
	h.static.ServeHTTP(w, r)
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, http.StatusNotFound, "no such page")
}

// readOnly returns why the UI takes no action, or "" when it does.
func (h *handler) readOnly() string {
	switch {
	case h.opts.ReadOnly && h.opts.ReadOnlyReason != "":
		return h.opts.ReadOnlyReason
	case h.opts.ReadOnly:
		return "this UI was started read-only"
	case h.q.Role() == queue.RoleReadOnly:
		return "the store is open read-only (queue.WithReadOnly): another process writes it"
	}
	return ""
}

// ctx bounds the store calls of one request.
func reqCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}
