//go:build !linux

package testutil

import (
	"os"
	"os/exec"
)

// OwnGroup leaves cmd as it is: process groups and Pdeathsig are
// Linux's here, and the tests that start children are Linux tests.
func OwnGroup(*exec.Cmd) {}

func KillGroup(p *os.Process) { _ = p.Kill() }
