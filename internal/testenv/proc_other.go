//go:build !linux

package testenv

import (
	"errors"
	"os"
	"syscall"
)

// sysProcAttr leaves the server in the test binary's process group, so that
// an interrupt from the terminal reaches it too. There is no portable
// equivalent of Linux's parent-death signal: a test binary killed with
// SIGKILL leaves its servers running.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func killProcess(p *os.Process) { _ = p.Kill() }

// processAlive cannot tell portably; assuming alive keeps every directory.
func processAlive(int) bool { return true }

// Server.Pause and Resume are Linux only here.
const (
	sigStop = syscall.Signal(-1)
	sigCont = syscall.Signal(-2)
)

func signalGroup(*os.Process, syscall.Signal) error { return errors.ErrUnsupported }
