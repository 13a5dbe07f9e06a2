// Package kernelcheck tells, before any BPF program is loaded, whether the
// running kernel can run the receiver's programs at all, and when it cannot,
// says why and what to change: the verifier's or the loader's own error on
// such a kernel names neither.
package kernelcheck

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// LockdownFile is where securityfs shows the kernel lockdown mode.
const LockdownFile = "/sys/kernel/security/lockdown"

// lockdownMode returns the selected mode of the lockdown file's content
// ("none integrity [confidentiality]"), "" when none is marked.
func lockdownMode(content string) string {
	for _, f := range strings.Fields(content) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			return f[1 : len(f)-1]
		}
	}
	return ""
}

// errLockdownFix says why confidentiality lockdown stops the receiver and
// what to change.
var errLockdownFix = errors.New("it forbids BPF programs to read kernel memory, which the samplers and probes do; " +
	"boot with lockdown=integrity or lockdown=none on the kernel command line " +
	"(a kernel that locks down under Secure Boot does so in integrity mode unless told otherwise)")

// lockdownError is the error of a kernel in mode, nil when the mode allows
// the receiver's programs. Integrity mode forbids only writes (to user
// memory from BPF, among others), which no program here does;
// confidentiality forbids BPF programs to read kernel memory, which every
// sampler does (a task's pid namespace, cgroup and registers).
func lockdownError(mode string) error {
	if mode != "confidentiality" {
		return nil
	}
	return fmt.Errorf("kernel lockdown is in confidentiality mode (%s): %w", LockdownFile, errLockdownFix)
}

// lockedHelper is how the verifier refuses a program calling a helper that
// confidentiality lockdown withdrew (bpf_probe_read_kernel, or
// bpf_probe_read, which the programs' CO-RE reads call): as if the kernel
// had no such helper ("unknown func bpf_probe_read#4", Linux 5.10 to 6.1)
// or as if the program's type could not call it ("program of this type
// cannot use helper bpf_probe_read#4", 6.12).
var lockedHelper = regexp.MustCompile(`(unknown func|cannot use helper) bpf_probe_read(_kernel)?#`)

// Explain returns err with the lockdown error added when it is the
// verifier refusing to read kernel memory: what a locked-down kernel says
// where the lockdown file is not visible (securityfs is not mounted in
// containers). Any other error is returned unchanged.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	refusal := lockedHelper.FindString(err.Error())
	if refusal == "" {
		return err
	}
	return fmt.Errorf("%w (%s: is kernel lockdown in confidentiality mode? %w)", err, refusal,
		errors.Unwrap(lockdownError("confidentiality")))
}

// btfError is the error of a kernel without BTF. It does not wrap err
// (ebpf.ErrNotSupported): the receiver runs without a feature the kernel
// lacks, but without BTF it runs nothing.
func btfError(release string, err error) error {
	return fmt.Errorf("kernel %s has no BTF (/sys/kernel/btf/vmlinux): the receiver's BPF programs are compiled "+
		"once and relocated against it; run a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian 11, Ubuntu 20.10, "+
		"RHEL 8.2 and later kernels are), and in a container leave the host's /sys/kernel/btf visible (%v)", release, err)
}

// Release is the running kernel's release, for messages ("unknown" where
// /proc does not say).
func Release() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
