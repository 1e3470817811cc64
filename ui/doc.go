// Package ui is Stepwell's web UI: an http.Handler that shows a store's
// runs, queues and writer, and acts on runs through a Runtime. A service
// mounts it behind its own authentication; `stepwell ui` is a thin
// command around it.
//
//	h, err := ui.New(rt, ui.Options{BasePath: "/admin/stepwell"})
//	mux.Handle("/admin/stepwell/", requireAdmin(h))
//
// # Pages
//
//   - Runs: counts by state (of the newest 10,000 runs), the runs newest
//     first (Runtime.ListRuns) with filters (state, submitted between, run
//     ID prefix) and paging.
//   - A run (/run?id=ID): its record, headers, memory (Runtime.RunMemo),
//     parent and children, its current step's job (payload, failed
//     attempts), its result, and its history as a timeline: a bar per
//     step attempt on a time axis, its error on hover and, on click, in the
//     table of attempts below. Payloads, results and memory values are
//     shown as JSON or text when they are, as a hex dump when binary, cut
//     to 16 KiB (1 KiB of hex) with their size.
//   - Queues: depth per queue (pending, scheduled, running, dead), a chart
//     of each drawn in the browser from the page's own samples, and the
//     dead letters with their error history.
//   - Store: this process's role and health (queue.Health), its storage
//     figures (WAL, snapshots, object-store requests), and, when
//     Options.StoreURL is set, the writer the store's owner object names
//     (ID, epoch, heartbeat, cluster address).
//
// Pages refresh their changing parts in place (a small script fetches the
// page again and swaps the elements marked live; the pages work without
// it); a run's page follows the run until it ended.
//
// # Actions
//
// Cancel, retry, pause, resume, signal (a name and a text payload) and
// requeue (a dead job) go through the Runtime, so in cluster mode a
// member's UI has the writer do them. Where the store cannot be written
// the UI is read-only and says why on every page: Options.ReadOnly, or a
// store opened read-only (queue.RoleReadOnly: another process writes it
// and is not in cluster mode, or `stepwell ui` was not asked to become
// the writer). A read-only Queue shows the store as of its last
// queue.Queue.Refresh: the program that serves the handler refreshes it
// (`stepwell ui` does, at most once a second, as pages are loaded).
//
// # Safe by default
//
//   - GET and HEAD never change anything; every action is a POST.
//   - A POST is refused (403, nothing changed) unless it carries the form
//     token of its browser: a random cookie (HttpOnly, SameSite=Strict)
//     whose MAC under the handler's key (Options.CSRFKey) is in the form.
//     A request a browser marks as cross-origin (Sec-Fetch-Site, Origin)
//     is refused before that (net/http.CrossOriginProtection).
//   - Every byte of user data (run IDs, headers, errors, payloads, signal
//     names) is escaped by html/template; invalid UTF-8 is replaced and
//     long values are cut with their size said.
//   - Every response carries a Content-Security-Policy with no inline
//     script or style (default-src 'self'; frame-ancestors 'none'),
//     X-Content-Type-Options: nosniff, X-Frame-Options: DENY,
//     Referrer-Policy: same-origin and Cache-Control: no-store.
//   - Options.Authorize runs before every request: BasicAuth and TokenAuth
//     make one. Without it the handler trusts whoever reaches it: mount it
//     behind the service's own authentication. A port on 127.0.0.1 is not
//     that: a page of any site whose DNS points its name at 127.0.0.1 (DNS
//     rebinding) is same-origin to the browser, so it passes the checks
//     above. Serve it there with an Authorize that accepts only requests
//     whose Host is localhost or a loopback IP, as `stepwell ui` does.
//
// The templates, the stylesheet and the script are built in (embed); there
// is no build step.
package ui
