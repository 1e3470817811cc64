package bench

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// peakRSS returns VmHWM from /proc/self/status, in bytes (0 if unreadable).
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) >= 1 {
				n, err := strconv.ParseUint(f[0], 10, 64)
				if err == nil {
					return n * 1024
				}
			}
		}
	}
	return 0
}

// resetPeakRSS resets VmHWM to the current RSS (writing "5" to
// /proc/self/clear_refs, Linux 4.0+) and reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
