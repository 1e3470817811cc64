package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo is a scratch git repository holding a one-package module.
type repo struct {
	t    *testing.T
	root string
}

func newRepo(t *testing.T) *repo {
	r := &repo{t: t, root: t.TempDir()}
	r.git("init", "-q")
	r.file("go.mod", "module example.com/m\n\ngo 1.26\n")
	r.file("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n## [0.1.0]\n\n- Breaking: an old release's note\n")
	r.file("p/p.go", "package p\n\nfunc A() {}\n\nfunc B() {}\n\ntype T struct{ X int }\n")
	r.file("internal/i/i.go", "package i\n\nfunc Hidden() {}\n")
	r.record()
	r.commit("first")
	return r
}

func (r *repo) file(name, content string) {
	path := filepath.Join(r.root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *repo) git(args ...string) {
	cmd := exec.Command("git", append([]string{"-C", r.root, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func (r *repo) commit(msg string) { r.git("add", "-A"); r.git("commit", "-qm", msg) }

func (r *repo) record() {
	pkgs, err := loadPublic(r.root)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := writeRecord(r.root, pkgs); err != nil {
		r.t.Fatal(err)
	}
}

// problems runs the whole check.
func (r *repo) problems() []string {
	pkgs, err := loadPublic(r.root)
	if err != nil {
		r.t.Fatal(err)
	}
	return append(checkCode(r.root, pkgs), checkHistory(r.root)...)
}

func TestRecordedAPIPasses(t *testing.T) {
	r := newRepo(t)
	if p := r.problems(); len(p) > 0 {
		t.Fatalf("a fresh record: %q", p)
	}
	if _, err := os.Stat(filepath.Join(r.root, "api", "internal-i.txt")); err == nil {
		t.Fatal("an internal package was recorded")
	}
	txt, _ := os.ReadFile(filepath.Join(r.root, "api", "p.txt"))
	for _, want := range []string{"pkg p, func A()", "pkg p, type T struct, X int"} {
		if !strings.Contains(string(txt), want+"\n") {
			t.Errorf("api/p.txt lacks %q:\n%s", want, txt)
		}
	}
}

func TestUnrecordedChangeFails(t *testing.T) {
	r := newRepo(t)
	r.file("p/p.go", "package p\n\nfunc A() {}\n\nfunc B() {}\n\nfunc C() {}\n\ntype T struct{ X int }\n")
	p := r.problems()
	if len(p) != 2 || !strings.Contains(p[0], "+ pkg p, func C()") || !strings.Contains(p[1], "C: added") {
		t.Fatalf("a compatible addition without its record: %q", p)
	}
	r.record()
	if p := r.problems(); len(p) > 0 {
		t.Fatalf("an addition recorded: %q", p)
	}
}

func TestIncompatibleChangeNeedsBreaking(t *testing.T) {
	r := newRepo(t)
	r.file("p/p.go", "package p\n\nfunc A() {}\n\ntype T struct{ X int }\n")
	r.record()
	p := r.problems()
	if len(p) != 1 || !strings.Contains(p[0], "the working tree") || !strings.Contains(p[0], "B: removed") {
		t.Fatalf("a removal recorded, not announced, uncommitted: %q", p)
	}
	r.commit("remove B")
	p = r.problems()
	if len(p) != 1 || !strings.Contains(p[0], "commit ") || !strings.Contains(p[0], "B: removed") {
		t.Fatalf("a removal recorded, not announced, committed: %q", p)
	}
	// Announcing it in a later commit does not mend the commit that made it.
	r.file("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n- Breaking: B is gone\n\n## [0.1.0]\n")
	r.commit("announce")
	if p := r.problems(); len(p) != 1 {
		t.Fatalf("announced a commit late: %q", p)
	}
	r.git("reset", "-q", "--hard", "HEAD~2")
	r.file("p/p.go", "package p\n\nfunc A() {}\n\ntype T struct{ X int }\n")
	r.file("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n- Breaking: B is gone\n\n## [0.1.0]\n")
	r.record()
	r.commit("remove B, announced")
	if p := r.problems(); len(p) > 0 {
		t.Fatalf("a removal announced in its own commit: %q", p)
	}
}

func TestRemovedPackageIsIncompatible(t *testing.T) {
	r := newRepo(t)
	r.file("q/q.go", "package q\n\nfunc Q() {}\n")
	r.record()
	r.commit("add q")
	if err := os.RemoveAll(filepath.Join(r.root, "q")); err != nil {
		t.Fatal(err)
	}
	if p := r.problems(); len(p) != 1 || !strings.Contains(p[0], "no longer public") {
		t.Fatalf("a package removed, record kept: %q", p)
	}
	r.record()
	if p := r.problems(); len(p) != 1 || !strings.Contains(p[0], "q: package removed") {
		t.Fatalf("a package removed with its record: %q", p)
	}
}
