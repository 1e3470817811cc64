// Command apicheck keeps the committed record of Stepwell's public API in
// api/ and checks changes against it; .ci/run runs it on every CI run.
//
// The record holds two files per public package (every package of the
// module outside internal/ that is not a command and has non-test files):
//
//	api/<pkg>.txt     one line per exported name, sorted, in the style of
//	                  Go's own api/ files; it is what a reviewer reads
//	api/<pkg>.export  the package's export data, which apidiff
//	                  (golang.org/x/exp/apidiff) compares for compatibility
//
// where <pkg> is the package's path in the module with '/' written as '-'.
//
// Usage, from anywhere in the repository:
//
//	(cd .ci/apicheck && go run .)      check (exit 1 on a problem)
//	(cd .ci/apicheck && go run . -w)   rewrite api/ from the code
//
// The check fails when
//
//  1. the code's public API differs from api/ (a change, compatible or not,
//     lands with its record), or
//  2. a commit on the first-parent history of HEAD, or the working tree,
//     changes api/ incompatibly while the "## [Unreleased]" section of its
//     CHANGELOG.md does not say "Breaking".
//
// It needs no tags: the history is the record's own, and a clone without
// the parent of a commit (a shallow one) checks what it has.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/token"
	"go/types"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

const recordDir = "api"

func main() {
	write := flag.Bool("w", false, "rewrite the record in api/ from the code")
	root := flag.String("root", "", "repository root (default: the git top level of the working directory)")
	flag.Parse()
	if *root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			die("finding the repository root: %v", err)
		}
		*root = strings.TrimSpace(string(out))
	}
	pkgs, err := loadPublic(*root)
	if err != nil {
		die("%v", err)
	}
	if *write {
		if err := writeRecord(*root, pkgs); err != nil {
			die("%v", err)
		}
		fmt.Printf("apicheck: wrote the record of %d packages to %s/\n", len(pkgs), recordDir)
		return
	}
	problems := checkCode(*root, pkgs)
	problems = append(problems, checkHistory(*root)...)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Println(p)
		}
		fmt.Println("\napicheck: FAILED. Rewrite the record with `(cd .ci/apicheck && go run . -w)` and commit api/" +
			" with the change; an incompatible change also says \"Breaking\" in CHANGELOG.md's [Unreleased] section.")
		os.Exit(1)
	}
	fmt.Printf("apicheck: the public API of %d packages matches %s/; no unannounced incompatible change\n", len(pkgs), recordDir)
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "apicheck: "+format+"\n", args...)
	os.Exit(2)
}

// loadPublic type-checks the module's public packages.
func loadPublic(root string) ([]*packages.Package, error) {
	cfg := &packages.Config{
		Dir:  root,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedFiles | packages.NeedModule,
	}
	all, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	var pkgs []*packages.Package
	for _, p := range all {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("loading %s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Name == "main" || len(p.GoFiles) == 0 || p.Module == nil ||
			slices.Contains(strings.Split(p.PkgPath, "/"), "internal") {
			continue
		}
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b *packages.Package) int { return strings.Compare(a.PkgPath, b.PkgPath) })
	return pkgs, nil
}

// recordName is the name of p's record files, without extension.
func recordName(p *packages.Package) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(p.PkgPath, p.Module.Path), "/")
	if rel == "" {
		rel = p.Name
	}
	return strings.ReplaceAll(rel, "/", "-")
}

func writeRecord(root string, pkgs []*packages.Package) error {
	dir := filepath.Join(root, recordDir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	readme := "The committed record of the public API, one pair of files per package.\n" +
		"Written and checked by .ci/apicheck (see its doc); do not edit by hand.\n"
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte(readme), 0o644); err != nil {
		return err
	}
	for _, p := range pkgs {
		name := filepath.Join(dir, recordName(p))
		if err := os.WriteFile(name+".txt", []byte(digestText(p.Types)), 0o644); err != nil {
			return err
		}
		var buf bytes.Buffer
		// An empty file set keeps this machine's source paths out of the record.
		if err := gcexportdata.Write(&buf, token.NewFileSet(), p.Types); err != nil {
			return fmt.Errorf("export data of %s: %v", p.PkgPath, err)
		}
		if err := os.WriteFile(name+".export", buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkCode compares the code's public API with the record in the
// working tree.
func checkCode(root string, pkgs []*packages.Package) []string {
	var problems []string
	seen := map[string]bool{}
	for _, p := range pkgs {
		name := recordName(p)
		seen[name] = true
		base := filepath.Join(root, recordDir, name)
		txt, err := os.ReadFile(base + ".txt")
		if errors.Is(err, os.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("%s: a public package with no record (%s/%s.txt)", p.PkgPath, recordDir, name))
			continue
		} else if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if d := lineDiff(strings.FieldsFunc(string(txt), func(r rune) bool { return r == '\n' }), digest(p.Types)); len(d) > 0 {
			problems = append(problems, fmt.Sprintf("%s: the API differs from %s/%s.txt (- record, + code):\n%s",
				p.PkgPath, recordDir, name, strings.Join(d, "\n")))
		}
		exp, err := os.ReadFile(base + ".export")
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		old, err := readExport(exp, p.PkgPath)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s/%s.export: %v", recordDir, name, err))
			continue
		}
		if r := apidiff.Changes(old, p.Types); len(r.Changes) > 0 {
			problems = append(problems, fmt.Sprintf("%s: apidiff against %s/%s.export:\n%s", p.PkgPath, recordDir, name, r))
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, recordDir))
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".txt"); ok && !seen[name] {
			problems = append(problems, fmt.Sprintf("%s/%s: a record of a package that is no longer public", recordDir, e.Name()))
		}
	}
	return problems
}

// lineDiff lists the lines only in a ("-") and only in b ("+"); both are
// sorted and unique.
func lineDiff(a, b []string) []string {
	var d []string
	for _, l := range a {
		if _, ok := slices.BinarySearch(b, l); !ok {
			d = append(d, "- "+l)
		}
	}
	for _, l := range b {
		if _, ok := slices.BinarySearch(a, l); !ok {
			d = append(d, "+ "+l)
		}
	}
	return d
}

func readExport(b []byte, path string) (*types.Package, error) {
	return gcexportdata.Read(bytes.NewReader(b), token.NewFileSet(), map[string]*types.Package{}, path)
}

// checkHistory checks each first-parent commit that changed api/, and the
// working tree, for an incompatible change the CHANGELOG does not announce.
func checkHistory(root string) []string {
	git := func(args ...string) ([]byte, error) {
		return exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	}
	out, err := git("log", "--first-parent", "--format=%H", "--", recordDir)
	if err != nil {
		return []string{"git log: " + err.Error()}
	}
	type rev struct{ name, ref string } // ref "" is the working tree
	revs := []rev{{"the working tree", ""}}
	for _, h := range strings.Fields(string(out)) {
		revs = append(revs, rev{"commit " + h[:12], h})
	}
	var problems []string
	for _, r := range revs {
		parent := "HEAD"
		if r.ref != "" {
			parent = r.ref + "^"
		}
		if _, err := git("rev-parse", "--verify", "-q", parent+"^{commit}"); err != nil {
			continue // a root commit, or a shallow clone's edge
		}
		read := func(ref, file string) ([]byte, error) {
			if ref == "" {
				return os.ReadFile(filepath.Join(root, file))
			}
			return git("show", ref+":"+file)
		}
		incompatible := incompatibleChanges(root, parent, r.ref, git, read)
		if len(incompatible) == 0 {
			continue
		}
		changelog, err := read(r.ref, "CHANGELOG.md")
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: reading CHANGELOG.md: %v", r.name, err))
			continue
		}
		if !strings.Contains(unreleased(string(changelog)), "Breaking") {
			problems = append(problems, fmt.Sprintf("%s changes the public API incompatibly, and its CHANGELOG.md's"+
				" [Unreleased] section does not say \"Breaking\":\n  %s", r.name, strings.Join(incompatible, "\n  ")))
		}
	}
	return problems
}

// incompatibleChanges lists the incompatible changes of the record from
// commit parent to ref (a commit, or "" for the working tree).
func incompatibleChanges(root, parent, ref string, git func(...string) ([]byte, error), read func(ref, file string) ([]byte, error)) []string {
	list := func(ref string) map[string]bool {
		var names []string
		if ref == "" {
			entries, _ := os.ReadDir(filepath.Join(root, recordDir))
			for _, e := range entries {
				names = append(names, e.Name())
			}
		} else {
			out, _ := git("ls-tree", "--name-only", ref+":"+recordDir)
			names = strings.Fields(string(out))
		}
		files := map[string]bool{}
		for _, n := range names {
			if strings.HasSuffix(n, ".export") {
				files[n] = true
			}
		}
		return files
	}
	before, after := list(parent), list(ref)
	var out []string
	for _, f := range slices.Sorted(maps.Keys(before)) {
		pkg := strings.TrimSuffix(f, ".export")
		if !after[f] {
			out = append(out, pkg+": package removed from the public API")
			continue
		}
		ob, err1 := read(parent, recordDir+"/"+f)
		nb, err2 := read(ref, recordDir+"/"+f)
		if err1 != nil || err2 != nil {
			out = append(out, fmt.Sprintf("%s: unreadable record (%v, %v)", pkg, err1, err2))
			continue
		}
		old, err1 := readExport(ob, pkg)
		cur, err2 := readExport(nb, pkg)
		if err1 != nil || err2 != nil {
			out = append(out, fmt.Sprintf("%s: undecodable record (%v, %v)", pkg, err1, err2))
			continue
		}
		for _, c := range apidiff.Changes(old, cur).Changes {
			if !c.Compatible {
				out = append(out, pkg+": "+c.Message)
			}
		}
	}
	return out
}

// unreleased returns the "## [Unreleased]" section of a changelog.
func unreleased(changelog string) string {
	_, rest, ok := strings.Cut(changelog, "## [Unreleased]")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// digestText is the content of a package's .txt record.
func digestText(pkg *types.Package) string {
	var b strings.Builder
	for _, l := range digest(pkg) {
		b.WriteString(l + "\n")
	}
	return b.String()
}
