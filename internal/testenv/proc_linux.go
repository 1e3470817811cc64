package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// sysProcAttr puts the server in its own process group (so that stop can
// kill everything it spawned) and has the kernel kill it if the test binary
// dies without calling Stop (panic, timeout, SIGKILL).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killProcess kills p's process group, falling back to p alone.
func killProcess(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// Job-control signals for Server.Pause and Resume.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// signalGroup sends sig to p's process group. For SIGSTOP it returns once
// every thread of p has stopped: kill(2) returns before the stop is
// delivered, and a busy machine let a paused server answer a request
// made after Pause returned (TestStoreOutageFailsNoRun saw a Submit
// succeed during the "outage").
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		return err
	}
	if sig != syscall.SIGSTOP {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for !allStopped(p.Pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: process %d did not stop within 10s of SIGSTOP", p.Pid)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// allStopped reports whether every thread of process pid is stopped (state
// T or t in /proc/PID/task/TID/stat).
func allStopped(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true // gone, or no /proc: nothing left to wait for
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name, which is in parentheses
		// and may itself contain spaces or parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return false
		}
		if st := stat[i+2]; st != 'T' && st != 't' {
			return false
		}
	}
	return true
}
