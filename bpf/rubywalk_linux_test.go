//go:build linux

package bpf

import (
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// rubyWalkBudget is the most instructions the verifier may process for the
// Ruby walk's test program: the walk is to be inlined into the samplers,
// whose budget (1M on 5.10 arm64) CPython's walk already shares.
const rubyWalkBudget = 100_000

// The Ruby walk's test program (rubywalk.bpf.c) loads, and the verifier
// walks it within rubyWalkBudget instructions.
func TestRubywalkLoads(t *testing.T) {
	testutil.RequireBPF(t)
	_ = memlock.Raise()
	spec, err := LoadRubywalk()
	require.NoError(t, err)
	for _, regs := range []uint8{0, 1} {
		require.NoError(t, spec.Variables["have_task_pt_regs"].Set(regs))
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
		require.NoError(t, err)
		m := processedInsns.FindStringSubmatch(coll.Programs[RubywalkProgRubywalk].VerifierLog)
		coll.Close()
		require.NotNil(t, m, "no instruction count in the verifier's log")
		n, _ := strconv.Atoi(m[1])
		t.Logf("have_task_pt_regs=%d: the verifier processed %d instructions", regs, n)
		require.Less(t, n, rubyWalkBudget)
	}
}
