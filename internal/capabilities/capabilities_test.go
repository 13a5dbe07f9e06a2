package capabilities

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func setOf(cs ...Capability) Set {
	var s Set
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

func TestExplain(t *testing.T) {
	// What cilium/ebpf returns for a map it may not create.
	cilium := fmt.Errorf("load cpu sampler BPF program: map create: %w%s", syscall.EPERM, memlockHint)
	tests := []struct {
		name string
		err  error
		eff  Set
		need []Capability
		want string // "" keeps err unchanged
	}{
		{
			name: "both missing, cilium's hint replaced",
			err:  cilium, eff: setOf(SysPtrace, Syslog), need: []Capability{BPF, Perfmon},
			want: "load cpu sampler BPF program: map create: operation not permitted: the collector lacks CAP_BPF and CAP_PERFMON; run as root or grant them",
		},
		{
			name: "one missing",
			err:  cilium, eff: setOf(BPF), need: []Capability{BPF, Perfmon},
			want: "load cpu sampler BPF program: map create: operation not permitted: the collector lacks CAP_PERFMON; run as root or grant it",
		},
		{
			name: "EACCES of a uprobe",
			err:  fmt.Errorf("attach exit f at 0x10: opening perf event: %w", syscall.EACCES),
			eff:  setOf(BPF, Perfmon, SysPtrace), need: []Capability{SysAdmin},
			want: "attach exit f at 0x10: opening perf event: permission denied: the collector lacks CAP_SYS_ADMIN; run as root or grant it",
		},
		{
			name: "three missing",
			err:  fs.ErrPermission, need: []Capability{BPF, Perfmon, SysAdmin},
			want: "permission denied: the collector lacks CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN; run as root or grant them",
		},
		{name: "CAP_SYS_ADMIN covers CAP_BPF and CAP_PERFMON", err: cilium, eff: setOf(SysAdmin), need: []Capability{BPF, Perfmon}},
		{name: "nothing missing: another cause", err: cilium, eff: setOf(BPF, Perfmon), need: []Capability{BPF, Perfmon}},
		{name: "not a permission error", err: fmt.Errorf("load: %w", syscall.EINVAL), need: []Capability{BPF}},
		{name: "nil", err: nil, need: []Capability{BPF}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Explain(tt.err, tt.need...) // not a permission error: unchanged
			if IsPermission(tt.err) {
				got = explainWith(tt.err, tt.eff, tt.need)
			}
			if tt.want == "" {
				assert.True(t, got == tt.err, "want the error unchanged, got %v", got)
				return
			}
			require.EqualError(t, got, tt.want)
			assert.True(t, errors.Is(got, fs.ErrPermission), "still a permission error")
			var me *MissingError
			require.ErrorAs(t, got, &me)
			assert.Same(t, tt.err, me.Err)
		})
	}
}

func TestNames(t *testing.T) {
	assert.Equal(t, "CAP_DAC_READ_SEARCH", DACReadSearch.String())
	assert.Equal(t, "CAP_BPF", BPF.String())
	assert.Equal(t, "capability 5", Capability(5).String())
}
