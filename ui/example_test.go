package ui_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
	"github.com/stepwell/stepwell/ui"
)

// A service mounts the UI under a path of its admin server, behind its own
// authentication (here the package's BasicAuth).
func ExampleNew() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-ui")
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(ctx)
	// A client Runtime is enough: the service's Runtimes run the steps.
	rt, err := runtime.New(q, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	h, err := ui.New(rt, ui.Options{BasePath: "/admin/stepwell", Authorize: ui.BasicAuth("admin", "s3cret")})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/stepwell/", h)

	req := httptest.NewRequest("GET", "/admin/stepwell/runs", nil)
	req.SetBasicAuth("admin", "s3cret")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get("X-Frame-Options"))
	// Output: 200 DENY
}
