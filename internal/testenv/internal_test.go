package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "stepwell-fake-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STEPWELL_TOOLS_BIN", dir)
	got, err := findBinary("stepwell-fake-tool", "fake tool")
	if err != nil || got != tool {
		t.Fatalf("findBinary = %q, %v; want %q", got, err, tool)
	}

	_, err = findBinary("stepwell-no-such-tool", "missing tool")
	if !errors.Is(err, errNotInstalled) {
		t.Fatalf("missing binary: got %v, want errNotInstalled", err)
	}
	for _, want := range []string{"$STEPWELL_TOOLS_BIN", filepath.Join(".ci", "bin"), "$PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say it looked in %s", err, want)
		}
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testenv", "testenv.go")); err != nil {
		t.Fatalf("repoRoot = %q: %v", root, err)
	}
}

// recorder captures the first skip or failure of need.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	if !r.skipped && !r.failed {
		r.skipped, r.msg = true, fmt.Sprint(args...)
	}
}
func (r *recorder) Fatalf(format string, args ...any) {
	if !r.skipped && !r.failed {
		r.failed, r.msg = true, fmt.Sprintf(format, args...)
	}
}

func TestNeedMissingBinary(t *testing.T) {
	missing := fmt.Errorf("MinIO (%q) %w: looked in $PATH", "minio", errNotInstalled)

	t.Setenv("CI", "")
	r := &recorder{TB: t}
	need(r, "S3 (MinIO)", missing)
	if !r.skipped || !strings.Contains(r.msg, "bash .ci/install-tools") {
		t.Errorf("without CI: skipped=%v failed=%v msg=%q; want a skip saying how to install", r.skipped, r.failed, r.msg)
	}

	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	need(r, "S3 (MinIO)", missing)
	if !r.failed || !strings.Contains(r.msg, "CI=true") {
		t.Errorf("with CI=true: skipped=%v failed=%v msg=%q; want a failure", r.skipped, r.failed, r.msg)
	}

	r = &recorder{TB: t}
	need(r, "S3 (MinIO)", errors.New("boom"))
	if !r.failed {
		t.Errorf("start error: want a failure, got skipped=%v", r.skipped)
	}
}

func TestUniquePrefix(t *testing.T) {
	a, b := uniquePrefix(t), uniquePrefix(t)
	if a == b || !strings.HasPrefix(a, "TestUniquePrefix-") || !strings.HasSuffix(a, "/") {
		t.Fatalf("uniquePrefix: %q, %q", a, b)
	}
	t.Run("sub test/with spaces.and.dots", func(t *testing.T) {
		p := uniquePrefix(t)
		if strings.ContainsAny(strings.TrimSuffix(p, "/"), "/ ") {
			t.Fatalf("uniquePrefix = %q: contains '/' or ' '", p)
		}
	})
}
