package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree lists every path under dir (relative, sorted), to see what a
// command left there.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		paths = append(paths, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	return paths
}

// notAStore returns a directory that holds no store's objects though it is
// not empty: a store one level down (the URL of its parent is a typo), and
// files named like a store's directories that are none of its objects (a
// home directory's ~/snap).
func notAStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	seedStore(t, "file://"+filepath.Join(dir, "stepwell"))
	for name, data := range map[string]string{
		"notes.txt":                 "unrelated",
		"snap/firefox/common/x":     "unrelated",
		"wal/README":                "unrelated",
		"wal/00000000000000000001x": "unrelated",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestNoStoreAtURL: a directory that holds no store's objects is "no store"
// (exit 4), for every read command and with --json, even when it is not
// empty (it used to print an empty listing and exit 0); and a write
// command on a URL where no store is exits 4 the same way before opening
// it, leaving nothing there (it used to create a store). Neither kind of
// command writes anything into the directory.
func TestNoStoreAtURL(t *testing.T) {
	for name, dir := range map[string]string{
		"empty directory":              t.TempDir(),
		"a store in a subdirectory":    notAStore(t),
		"a directory of other files":   filepath.Join(notAStore(t), "snap"),
		"a store's directory of files": filepath.Join(notAStore(t), "stepwell", "wal"),
	} {
		t.Run(name, func(t *testing.T) {
			url := "file://" + dir
			before := tree(t, dir)
			for _, args := range [][]string{
				{"stats"}, {"queues"}, {"runs"}, {"dead"}, {"schedules"}, {"limits"},
				{"run", "order-1"}, {"job", "x"},
				{"cancel", "order-1"}, {"requeue", "x"}, {"retry", "order-1"},
				{"signal", "order-1", "go"}, {"pause", "order-1"}, {"resume", "order-1"},
				{"schedules", "delete", "hourly"},
				{"limits", "set", "llm", "--max-running", "3"}, {"limits", "remove", "llm"},
			} {
				r := runCLI(t, nil, append([]string{"--store", url}, args...)...)
				if r.code != exitNotFound || !strings.Contains(r.stderr, "no store at "+url) || r.stdout != "" {
					t.Errorf("stepwell %q: exit %d, stdout %q, stderr %q; want exit %d, no store at %s",
						args, r.code, r.stdout, r.stderr, exitNotFound, url)
				}
				r = runCLI(t, nil, append([]string{"--store", url, "--json"}, args...)...)
				if r.code != exitNotFound || !strings.Contains(r.stdout, `"error": "no store at `+url) || r.stderr != "" {
					t.Errorf("stepwell --json %q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
				}
			}
			// ui, --write or not (its open: it would serve until interrupted).
			for _, write := range []bool{false, true} {
				var stderr strings.Builder
				c := &cli{env: func(string) string { return "" }, stdout: io.Discard, stderr: &stderr, store: url}
				w := writeFlags{listen: "127.0.0.1:0", wait: defaultWait}
				q, _, err := c.openUI(t.Context(), w, false, write)
				if q != nil {
					q.Close(context.Background())
				}
				if exitCode(err) != exitNotFound || !strings.Contains(fmt.Sprint(err), "no store at "+url) {
					t.Errorf("ui (--write %v): %v (exit %d); want no store at %s", write, err, exitCode(err), url)
				}
			}
			if after := tree(t, dir); !slices.Equal(after, before) {
				t.Errorf("the commands changed the directory:\nbefore %q\nafter  %q", before, after)
			}
		})
	}

	// A mem:// store is new in each process: a write command finds no store
	// there either, and does not make one.
	for _, args := range [][]string{{"cancel", "order-1"}, {"limits", "set", "llm", "--max-running", "3"}} {
		r := runCLI(t, nil, append([]string{"--store", "mem://nothing-here"}, args...)...)
		if r.code != exitNotFound || !strings.Contains(r.stderr, "no store at mem://nothing-here") {
			t.Errorf("stepwell %q on mem://: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}
