package allocs

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The hooks of goalloc built by the oldest and newest releases known, for
// x86-64 and arm64 (whose gcMarkTermination has LSE atomics the decoder
// does not know), with a symbol table and stripped (no MemProfileRate
// address then).
func TestFindHooks(t *testing.T) {
	for _, tt := range []struct {
		toolchain, arch string
		strip           bool
		args            MallocArgs
	}{
		{"go1.21.13", "amd64", true, MallocP0},
		{"go1.21.13", "arm64", false, MallocP0},
		{"go1.27.3", "amd64", false, MallocP1},
		{"go1.27.3", "arm64", true, MallocP1},
	} {
		b := testutil.GoBuild{Toolchain: testutil.GoToolchain(tt.toolchain)}
		if tt.strip {
			b.LDFlags = "-s -w"
		}
		t.Run(tt.arch+" "+b.Name(), func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "goalloc")
			require.NoError(t, testutil.CrossBuildGo(testutil.Workload(t, "goalloc"), bin, tt.arch, b))
			f, err := os.Open(bin)
			require.NoError(t, err)
			defer f.Close()
			ef, err := elf.NewFile(f)
			require.NoError(t, err)
			funcs, err := symbolize.FindFunctions(f, HookNames)
			require.NoError(t, err)
			h, err := FindHooks(f, ef, funcs)
			require.NoError(t, err)
			require.Equal(t, tt.args, h.Args)
			for name, at := range map[string]uint64{"malloc": h.Malloc, "freeSpecial": h.FreeSpecial, "free": h.Free, "cycle": h.Cycle} {
				require.NotZero(t, at, name)
			}
			if tt.strip {
				require.Zero(t, h.RateAddr)
			} else {
				require.NotZero(t, h.RateAddr)
			}
		})
	}
}

func TestFindHooksRefuses(t *testing.T) {
	f, err := os.Open("/bin/true")
	require.NoError(t, err)
	defer f.Close()
	ef, err := elf.NewFile(f)
	require.NoError(t, err)
	funcs, err := symbolize.FindFunctions(f, HookNames)
	require.NoError(t, err)
	_, err = FindHooks(f, ef, funcs)
	require.ErrorIs(t, err, ErrNotGo)
}
