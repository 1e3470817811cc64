package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// startTimeout bounds how long a server may take to become ready.
const startTimeout = 60 * time.Second

// server is one child process serving on 127.0.0.1.
type server struct {
	// Immutable after start.
	name string // for messages: "MinIO", "fake-gcs-server"
	addr string // 127.0.0.1:PORT
	dir  string // temp dir: data, logs; removed by stop
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
}

// serverSpec says how to run one kind of server.
type serverSpec struct {
	name string
	bin  string
	// args returns the command line for a server listening on addr with its
	// state under dir.
	args func(addr, dir string) []string
	// env is appended to the inherited environment.
	env []string
	// dropEnv lists prefixes of inherited variables to remove (MINIO_).
	dropEnv []string
	// readyPath is polled with GET until it answers 200.
	readyPath string
}

// startServer runs spec on a free port, retrying with a new port if the
// process dies before it is ready (another process may have taken the port
// between probing and binding).
func startServer(spec serverSpec) (*server, error) {
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startOnce(spec)
		if err == nil {
			if !register(s) {
				s.stop()
				return nil, errors.New("testenv.Stop already called")
			}
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func startOnce(spec serverSpec) (_ *server, err error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	sweepStaleDirs()
	dir, err := os.MkdirTemp("", dirPattern+strings.ToLower(spec.name)+"-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{
		name: spec.name,
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:  dir,
		done: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	s.log, err = os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.bin, spec.args(s.addr, dir)...)
	cmd.Dir = dir
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.Env = childEnv(spec.env, spec.dropEnv)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.bin, err)
	}
	s.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(spec.readyPath); err != nil {
		return nil, fmt.Errorf("%s on %s: %w\n--- %s ---\n%s", spec.name, s.addr, err, filepath.Base(s.log.Name()), s.logTail())
	}
	return s, nil
}

// waitReady polls path until it answers 200, the process exits, or
// startTimeout passes.
func (s *server) waitReady(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + s.addr + path
	delay := 20 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("exited before becoming ready: %v", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (last: %v)", startTimeout, err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// stop kills the process (its whole group where supported), waits for it
// and removes its directory.
func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		killProcess(s.cmd.Process)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
	}
	if s.log != nil {
		s.log.Close()
	}
	os.RemoveAll(s.dir)
}

// logTail returns the last few KiB of the server's output.
func (s *server) logTail() string {
	data, err := os.ReadFile(s.log.Name())
	if err != nil {
		return err.Error()
	}
	const max = 4 << 10
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}

// Server directories are os.TempDir()/<dirPattern><name>-<random>, holding
// ownerFile: the pid of the test process that made them.
const (
	dirPattern = "stepwell-testenv-"
	ownerFile  = "owner.pid"
)

// sweepStaleDirs removes the directories of servers whose test process died
// without stopping them (SIGKILL): the servers died with it (Linux), their
// data did not.
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		os.RemoveAll(dir)
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// childEnv is the inherited environment without the variables starting with
// any of drop, plus extra.
func childEnv(extra, drop []string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, p := range drop {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
