package kernelcheck

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLockdown(t *testing.T) {
	for _, tc := range []struct {
		content, mode string
		fails         bool
	}{
		{"[none] integrity confidentiality\n", "none", false},
		{"none [integrity] confidentiality\n", "integrity", false},
		{"none integrity [confidentiality]\n", "confidentiality", true},
		{"", "", false},
		{"[]\n", "", false},
	} {
		mode := lockdownMode(tc.content)
		assert.Equal(t, tc.mode, mode, "%q", tc.content)
		err := lockdownError(mode)
		if !tc.fails {
			assert.NoError(t, err, "%q", tc.content)
			continue
		}
		require.Error(t, err)
		assert.Contains(t, err.Error(), LockdownFile)
		assert.Contains(t, err.Error(), "lockdown=integrity")
	}
}

func TestBTFErrorNamesCauseAndFix(t *testing.T) {
	cause := errors.New("no BTF found")
	err := btfError("5.4.0-test", cause)
	assert.Contains(t, err.Error(), cause.Error())
	assert.NotErrorIs(t, err, cause, "not a kernel feature to run without: Start fails")
	for _, want := range []string{"5.4.0-test", "/sys/kernel/btf/vmlinux", "CONFIG_DEBUG_INFO_BTF=y"} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestExplainVerifierLockdown(t *testing.T) {
	for _, verifier := range []string{
		"load program: invalid argument: unknown func bpf_probe_read_kernel#113",
		"load program: invalid argument:\n\t8: (85) call bpf_probe_read#4\n\tunknown func bpf_probe_read#4\n",                           // Linux 5.10
		"load program: invalid argument:\n\t8: (85) call bpf_probe_read#4\n\tprogram of this type cannot use helper bpf_probe_read#4\n", // 6.12
	} {
		refused := errors.New(verifier)
		err := Explain(refused)
		require.ErrorIs(t, err, refused)
		assert.Contains(t, err.Error(), "confidentiality mode")
		assert.Contains(t, err.Error(), "lockdown=integrity")
	}

	other := errors.New("load program: permission denied: call bpf_probe_read#4")
	assert.Equal(t, other, Explain(other))
	assert.NoError(t, Explain(nil))
}
