//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/kernelcheck"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Under integrity lockdown the receiver runs; under confidentiality lockdown
// Start fails within 10 s with an error naming it and the fix, whether the
// collector sees the lockdown file (securityfs mounted) or only the
// verifier's refusal (a container, where it is not). Lockdown is raised,
// never lowered: the kernel matrix runs this last, in its guests only.
func TestCollectorUnderLockdown(t *testing.T) {
	bin := collectorBinary(t)
	if os.Getenv(testutil.DisposableKernelEnv) != "1" {
		t.Skipf("raises the kernel's lockdown until it reboots: only where %s=1 (the kernel matrix's guests)", testutil.DisposableKernelEnv)
	}
	const security = "/sys/kernel/security"
	if _, err := os.Stat(kernelcheck.LockdownFile); err != nil {
		require.NoError(t, unix.Mount("securityfs", security, "securityfs", 0, ""), "mount securityfs")
	}
	before, err := os.ReadFile(kernelcheck.LockdownFile)
	require.NoError(t, err, "the kernel has no lockdown LSM")
	config := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(config, []byte(degradedConfig), 0o644))
	argv := []string{bin, "--config", config, "--feature-gates=service.profilesSupport"}

	require.NoError(t, os.WriteFile(kernelcheck.LockdownFile, []byte("integrity"), 0o644))
	out, stop := runStoppableCollector(t, exec.Command(argv[0], argv[1:]...))
	waitReady(t, out)
	require.NoError(t, stop())

	require.NoError(t, os.WriteFile(kernelcheck.LockdownFile, []byte("confidentiality"), 0o644))
	var took []string
	for _, visible := range []bool{true, false} {
		if !visible {
			require.NoError(t, unix.Unmount(security, 0), "unmount securityfs")
		}
		began := time.Now()
		b, err := testutil.RunWithin(exec.Command(argv[0], argv[1:]...), testutil.Patient(time.Minute))
		d := time.Since(began)
		text := string(b)
		require.Error(t, err, "the collector ran under confidentiality lockdown:\n%s", text)
		assert.Less(t, d, testutil.Patient(10*time.Second), "Start failed only after %v", d)
		assert.Contains(t, text, "confidentiality mode")
		assert.Contains(t, text, "lockdown=integrity")
		if !visible {
			assert.Regexp(t, `(unknown func|cannot use helper) bpf_probe_read`, text, "the verifier's own words")
		}
		took = append(took, d.Round(100*time.Millisecond).String())
	}
	matrixFigure(t, "%s: integrity runs; confidentiality fails Start in %s", strings.TrimSpace(string(before)), strings.Join(took, "/"))
}
