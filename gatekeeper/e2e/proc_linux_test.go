package e2e

import (
	"os/exec"
	"syscall"
)

// orphanProof makes the kernel kill cmd if this test process dies first
// (a timeout panic, a SIGKILL): no itogate is left serving after a test.
func orphanProof(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
