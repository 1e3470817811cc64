package queue

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stepwell/stepwell/internal/testenv"
)

// The crash test runs a child process (this test binary, re-executed) that
// commits continuously and appends every acknowledged commit to a side file,
// SIGKILLs it at random moments, and checks after every round that the store
// opens and holds every acknowledged commit.

const crashChildEnv = "STEPWELL_CRASH_CHILD"

// crashOpts make the child snapshot, collect and spill large values often,
// so kills land inside those paths too.
func crashOpts() []Option {
	return []Option{WithSnapshotThreshold(32<<10, 6), WithLargeValueThreshold(1024)}
}

// crashKey names the i'th key of goroutine g in a round.
func crashKey(round string, g, i int) string { return fmt.Sprintf("r%s-g%d-%06d", round, g, i) }

// crashValue is the value written with key; every third is a large value
// (its own blob object).
func crashValue(key string) []byte {
	var round string
	var g, i int
	fmt.Sscanf(key, "r%3s-g%d-%06d", &round, &g, &i)
	n := 8 + i%50
	if i%3 == 0 {
		n = 1500 // above the large-value threshold
	}
	return bytes.Repeat([]byte(key), n/len(key)+1)[:n]
}

// successor is the key whose commit overwrites key (with its own value).
func successor(key string) string {
	var round string
	var g, i int
	fmt.Sscanf(key, "r%3s-g%d-%06d", &round, &g, &i)
	return crashKey(round, g, i+5)
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir, os.Getenv("STEPWELL_CRASH_ROUND"))
		return
	}
	if url := os.Getenv(busyWriterEnv); url != "" {
		os.Exit(busyWriter(url))
	}
	if url := os.Getenv(strandHelperEnv); url != "" {
		os.Exit(strandHelper(url))
	}
	testenv.Main(m)
}

func crashChild(dir, round string) {
	ctx := context.Background()
	q, err := Open(ctx, "file://"+dir, crashOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	side, err := os.OpenFile(filepath.Join(dir, "..", "acked-"+round), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		os.Exit(4)
	}
	fmt.Fprintf(os.Stderr, "child %s: opened at %v\n", round, time.Now().Format(time.StampMicro))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := crashKey(round, g, i)
				txn := new(Txn).Put([]byte(key), crashValue(key))
				if i >= 5 {
					// Overwrite an earlier key too: replaced blobs are freed.
					txn.Put([]byte(crashKey(round, g, i-5)), crashValue(key))
				}
				if _, err := q.Commit(ctx, txn); err != nil {
					fmt.Fprintln(os.Stderr, "child commit:", err)
					os.Exit(5)
				}
				mu.Lock()
				side.WriteString(key + "\n")
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	rounds := 25
	if s := os.Getenv("STEPWELL_CRASH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	seed := time.Now().UnixNano()
	t.Logf("crash test: %d rounds, seed %d", rounds, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	ctx := context.Background()
	// acked holds every acknowledged key. A key's value is its own, or its
	// successor's once that commit (which overwrites it) is acknowledged; if
	// the successor committed unacknowledged (killed before recording), the
	// store may hold either.
	acked := map[string]bool{}
	total := 0
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRecovery$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("STEPWELL_CRASH_ROUND=%03d", round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(30+rng.IntN(250)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL: %v\n%s", round, err, stderr.String())
		}
		// Read what the child acknowledged. A torn last line (killed
		// mid-write) is ignored: it was not completely recorded.
		f, err := os.Open(filepath.Join(base, fmt.Sprintf("acked-%03d", round)))
		if errors.Is(err, os.ErrNotExist) {
			continue // killed before its first commit was acknowledged
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "r") || len(line) != len("r000-g0-000000") {
				continue
			}
			acked[line] = true
			total++
		}
		f.Close()

		q, err := Open(ctx, "file://"+dir, crashOpts()...)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		for k := range acked {
			got, err := q.Get(ctx, []byte(k))
			next := successor(k)
			ok := err == nil && (bytes.Equal(got, crashValue(next)) || !acked[next] && bytes.Equal(got, crashValue(k)))
			if !ok {
				q.Close(ctx)
				t.Fatalf("round %d: acknowledged key %s: got %q, %v; want its value or its successor's", round, k, got, err)
			}
		}
		if err := q.Close(ctx); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
	}
	t.Logf("crash test: %d rounds, %d acknowledged commits verified", rounds, total)
}

func TestSecondProcessGetsStoreLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRecovery$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, "STEPWELL_CRASH_ROUND=000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ctx := context.Background()
	// Wait until the child has committed (so it holds the lock).
	testenv.Eventually(t, 10*time.Second, "the child to commit", func() bool {
		st, err := os.Stat(filepath.Join(dir, "..", "acked-000"))
		return err == nil && st.Size() > 0
	})
	if _, err := Open(ctx, "file://"+dir); !errors.Is(err, ErrStoreLocked) {
		t.Fatalf("Open while another process writes = %v, want ErrStoreLocked", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	q, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatalf("Open after the writer died: %v", err)
	}
	q.Close(ctx)
}
