package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// Bucket is the name of the one bucket created on each server. Tests are
// isolated by key prefix, not by bucket.
const Bucket = "stepwell-test"

// Main runs the package's tests, stops every server they started and exits
// with the tests' status. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop kills every server started by this process and removes their data
// directories. It is safe to call more than once and when nothing was
// started. After Stop, S3 and GCS fail the calling test.
func Stop() {
	reg.mu.Lock()
	reg.stopped = true
	servers := reg.servers
	reg.servers = nil
	reg.mu.Unlock()
	for _, s := range servers {
		s.stop()
	}
}

// registry holds the running servers of this process.
var reg struct {
	mu      sync.Mutex
	stopped bool      // guarded by mu
	servers []*server // guarded by mu
	sigOnce sync.Once
}

// register records a started server so that Stop kills it. It reports false
// (and the caller must stop s itself) if Stop has already run.
func register(s *server) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.stopped {
		return false
	}
	reg.servers = append(reg.servers, s)
	reg.sigOnce.Do(watchSignals)
	return true
}

func isStopped() bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.stopped
}

// watchSignals stops the servers when the test binary is interrupted, then
// exits as the default handler would have.
func watchSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		Stop()
		fmt.Fprintf(os.Stderr, "testenv: %v: stopped test servers\n", sig)
		code := 128 + 2 // SIGINT
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
}

// errNotInstalled marks a server binary that could not be found.
var errNotInstalled = errors.New("not installed")

// need turns the result of starting a server into the test's fate: skip
// (binary missing, not on CI), fail, or carry on.
func need(t testing.TB, what string, err error) {
	t.Helper()
	if isStopped() {
		t.Fatalf("testenv: %s requested after testenv.Stop", what)
	}
	if err == nil {
		return
	}
	if errors.Is(err, errNotInstalled) {
		msg := fmt.Sprintf("testenv: %v.\n"+
			"Install the pinned test servers with `bash .ci/install-tools` "+
			"(or run all of CI with `bash .ci/run`) from the repository root, "+
			"or point $STEPWELL_TOOLS_BIN at a directory holding them.", err)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s\nCI=true: refusing to skip the %s integration tests.", msg, what)
		}
		t.Skip(msg)
	}
	t.Fatalf("testenv: %s: %v", what, err)
}

// findBinary looks for an executable in $STEPWELL_TOOLS_BIN, <repo>/.ci/bin
// and $PATH, in that order.
func findBinary(name, display string) (string, error) {
	var tried []string
	if dir := os.Getenv("STEPWELL_TOOLS_BIN"); dir != "" {
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, "$STEPWELL_TOOLS_BIN="+dir)
	}
	if root, err := repoRoot(); err == nil {
		p := filepath.Join(root, ".ci", "bin", name)
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, filepath.Join(root, ".ci", "bin"))
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	tried = append(tried, "$PATH")
	return "", fmt.Errorf("%s (%q) %w: looked in %s", display, name, errNotInstalled, strings.Join(tried, ", "))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

const modulePath = "github.com/stepwell/stepwell"

// repoRoot finds the module root: from this source file if the build kept
// its path, else by walking up from the working directory (a package dir
// while tests run).
func repoRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			if isModuleRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("testenv: cannot find the root of module %s", modulePath)
}

func isModuleRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == modulePath
		}
	}
	return false
}

var prefixSeq atomic.Uint64

// uniquePrefix returns a fresh key prefix ending in "/", made of the test's
// name (for reading server logs) and a per-process sequence number. Only
// characters that need no escaping in a URL query are used.
func uniquePrefix(t testing.TB) string {
	var b strings.Builder
	for _, r := range t.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_',
			r == '.' && b.Len() > 0: // a leading '.' would make a reserved key
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	return fmt.Sprintf("%s-%d/", b.String(), prefixSeq.Add(1))
}
