//go:build linux

package sampler

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A library loaded with dlopen after the process's tables were read (a
// plugin, as JIT code is made later too): the first sample in it asks the
// kernel side for a rescan, its table is loaded, and the later samples of
// its chain, in code without frame pointers, are whole down to main.
func TestRescanLoadsLibraryLoadedLater(t *testing.T) {
	testutil.RequireBPF(t)
	lib := testutil.BuildC(t, "dlchain.c")
	bin := testutil.BuildC(t, "dlburn.c")
	if filepath.Base(lib) != "dlchain" {
		t.Fatalf("library built as %s", lib)
	}
	cmd := exec.Command(bin, lib, "60", "stdin")
	cmd.Dir = t.TempDir()
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	child := testutil.StartChild(t, cmd)
	// Its pid: it runs and burns its own code for a second.
	require.NotEmpty(t, child.Line(t, testutil.Patient(time.Minute)))
	pid := uint32(cmd.Process.Pid)

	tables := openTables(t, true)
	s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, Unwind: tables})
	// The first samples announce it (its tables load then, without the
	// library); once they have, it loads the library and burns there.
	require.Eventually(t, func() bool { return tables.Loaded(pid) }, 10*time.Second, 10*time.Millisecond,
		"the process's tables were never loaded")
	_, err = in.Write([]byte("go\n"))
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond)
	st := tables.Stats()
	t.Logf("loader after the dlopen: %d rescans, %d reloads, %d tables", st.Rescans, st.Reloads, st.Tables)
	require.NotZero(t, st.Reloads, "no rescan reloaded the process's mappings")

	samples, sst, _ := sampleFor(t, s, 3*time.Second)
	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()
	c := chain{[]string{"dl_leaf", "dl_mid", "dl_entry", "main"}, mainRoots}
	share, total, example := c.share(sym, pid, samples)
	t.Logf("dl_leaf: %.1f%% of %d samples whole; unwind ends %v", 100*share, total, sst.UnwindEnds)
	require.GreaterOrEqual(t, total, uint64(100), "samples with leaf dl_leaf")
	require.GreaterOrEqual(t, share, 0.95, "e.g. %s", strings.Join(example, " <- "))
}
