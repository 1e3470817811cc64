package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stepwell/stepwell/queue"
	"github.com/stepwell/stepwell/runtime"
)

// TestSchedules: "schedules" lists a store's schedules (text and JSON),
// "schedules delete NAME" deletes one (exit 4 when there is none, 2 for
// a bad name or subcommand).
func TestSchedules(t *testing.T) {
	dir := t.TempDir()
	f := &fixture{url: "file://" + dir, dir: dir}
	ctx := context.Background()
	q, err := queue.Open(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(q, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skipf("no zoneinfo: %v", err)
	}
	for _, s := range []runtime.Schedule{
		{Name: "hourly", Every: time.Hour, Spec: runtime.RunSpec{Input: []byte("ping"), Headers: map[string]string{"k": "v"}}},
		{Name: "nightly", Cron: "0 3 * * *", Location: paris, AllowOverlap: true, Spec: runtime.RunSpec{Queue: "batch",
			Concurrency: runtime.Concurrency{Key: "tenant-a", Limit: 1}}},
	} {
		if err := rt.SetSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}

	var list schedulesJSON
	f.okJSON(t, &list, "schedules")
	if len(list.Schedules) != 2 {
		t.Fatalf("schedules --json = %+v", list)
	}
	h, n := list.Schedules[0], list.Schedules[1]
	if h.Name != "hourly" || h.Every != "1h0m0s" || h.Cron != "" || h.Location != "UTC" || h.Queue != "workflow-steps" ||
		h.Input == nil || *h.Input != "ping" || h.InputSize != 4 || h.Headers["k"] != "v" || h.NextAt == nil ||
		!h.NextAt.Equal(h.NextAt.Truncate(time.Hour)) || h.LastRunID != "" || h.LastAt != nil || h.Skipped != 0 || h.AllowOverlap ||
		h.ConcurrencyKey != "" || h.ConcurrencyLimit != 0 {
		t.Errorf("hourly = %+v", h)
	}
	if n.Name != "nightly" || n.Every != "" || n.Cron != "0 3 * * *" || n.Location != "Europe/Paris" || n.Queue != "batch" ||
		!n.AllowOverlap || n.NextAt == nil || n.NextAt.In(paris).Format("15:04") != "03:00" ||
		n.ConcurrencyKey != "tenant-a" || n.ConcurrencyLimit != 1 {
		t.Errorf("nightly = %+v", n)
	}
	out := f.ok(t, "schedules")
	for _, want := range []string{"NAME", "hourly", "every 1h0m0s", "nightly", `"0 3 * * *" Europe/Paris (overlap) (key tenant-a, limit 1)`, "batch"} {
		if !strings.Contains(out, want) {
			t.Errorf("schedules output lacks %q:\n%s", want, out)
		}
	}

	if out := f.ok(t, "schedules", "delete", "hourly"); out != "schedule hourly deleted\n" {
		t.Errorf("schedules delete: %q", out)
	}
	var del scheduleDeleteJSON
	f.okJSON(t, &del, "schedules", "delete", "nightly")
	if del != (scheduleDeleteJSON{Name: "nightly", Deleted: true}) {
		t.Errorf("schedules delete --json = %+v", del)
	}
	f.okJSON(t, &list, "schedules")
	if len(list.Schedules) != 0 {
		t.Errorf("after the deletes: %+v", list)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"schedules", "delete", "hourly"}, exitNotFound, `schedule "hourly" not found`},
		{[]string{"schedules", "delete", "a/b"}, exitUsage, "invalid schedule"},
		{[]string{"schedules", "delete"}, exitUsage, "usage: stepwell schedules delete NAME"},
		{[]string{"schedules", "remove", "x"}, exitUsage, "unknown schedules subcommand"},
	} {
		if r := f.on(t, tc.args...); r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) || r.stdout != "" {
			t.Errorf("stepwell %q: exit %d, stdout %q, stderr %q; want exit %d, %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.stderr)
		}
	}
}
