//go:build !linux

package testutil

import (
	"os"
	"os/exec"
)

// setChildAttr leaves cmd as it is: process groups and Pdeathsig are
// Linux's here, and the tests that start children are Linux tests.
func setChildAttr(*exec.Cmd) {}

func killGroup(p *os.Process) { _ = p.Kill() }
