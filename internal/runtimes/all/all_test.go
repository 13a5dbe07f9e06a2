package all

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// Every runtime is described whole, under a name of its own that its
// walker's frames (capture.Runtime) carry.
func TestRuntimesDescribed(t *testing.T) {
	frameNames := map[string]bool{}
	for r := capture.Runtime(1); r.Name() != ""; r++ {
		frameNames[r.Name()] = true
	}
	seen := map[string]bool{}
	for _, rt := range Runtimes {
		require.NotEmpty(t, rt.Name)
		require.False(t, seen[rt.Name], "two runtimes named %s", rt.Name)
		seen[rt.Name] = true
		// A runtime has a BPF walker, whose frames carry its name, or
		// names the JIT code native walks reach, or both (HotSpot).
		require.True(t, rt.ProcMap != "" || rt.NamesCode, "%s neither walks nor names code", rt.Name)
		if rt.ProcMap != "" {
			require.True(t, frameNames[rt.Name], "no capture.Runtime named %s", rt.Name)
		}
		require.NotEmpty(t, rt.Exports, rt.Name)
		require.NotNil(t, rt.Detect, rt.Name)
		require.Same(t, rt, ByName(rt.Name))
	}
	require.Nil(t, ByName("nope"))
}
