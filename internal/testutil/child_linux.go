package testutil

import (
	"os"
	"os/exec"
	"syscall"
)

// OwnGroup puts cmd's process in a process group of its own (KillGroup
// kills what it started too) and has the kernel kill it when the thread
// that started it exits (Pdeathsig): a test binary killed by its timeout
// leaves no child behind. Go's runtime does not end its threads while the
// process lives, except one a goroutine locked and did not unlock.
func OwnGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// KillGroup sends SIGKILL to p's process group, and to p itself in case it
// has left the group.
func KillGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}
