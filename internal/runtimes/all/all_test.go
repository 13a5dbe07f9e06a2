package all

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// Every runtime is described whole, under a name of its own that frames
// (capture.Runtime) carry.
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
		require.True(t, frameNames[rt.Name], "no capture.Runtime named %s", rt.Name)
		require.NotEmpty(t, rt.ProcMap, rt.Name)
		require.NotNil(t, rt.LooksLike, rt.Name)
		require.NotNil(t, rt.Detect, rt.Name)
		require.Same(t, rt, ByName(rt.Name))
	}
	require.Nil(t, ByName("nope"))
}
