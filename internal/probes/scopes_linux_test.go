//go:build linux

package probes

import (
	"debug/elf"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A probe that links samples marks its thread's open scope in the shared
// map while the scope runs (the start the record then carries) and removes
// it at the scope's end; with entry stacks, each record carries the user
// stack its scope was entered with. With and without attach cookies.
func TestOpenScopesAndEntryStacks(t *testing.T) {
	testutil.RequireBPF(t)
	for _, cookies := range []bool{true, false} {
		t.Run(map[bool]string{true: "cookies", false: "per-probe programs"}[cookies], func(t *testing.T) {
			saved := haveAttachCookies
			haveAttachCookies = func() bool { return cookies }
			t.Cleanup(func() { haveAttachCookies = saved })
			open, err := scopemap.New()
			require.NoError(t, err)
			t.Cleanup(func() { _ = open.Close() })
			bin := testutil.BuildC(t, "scopelink.c")
			m, c := openAndRunWith(t, []Spec{
				{ID: "other", FileMatch: "^/nothing$", EntrySymbol: "f", Return: true}, // the probe of interest is index 1
				{
					ID: "handle", FileMatch: "^" + regexp.QuoteMeta(bin) + "$", EntrySymbol: "handle", Return: true,
					MinDuration: 20 * time.Millisecond, LinkSamples: true, EntryStack: true,
				},
			}, Options{OpenScopes: open})

			callers := callerRanges(t, bin)
			// 2 cycles: 8 slow scopes of 50 ms, 6 fast ones of 1 ms.
			child := testutil.StartWorkloadChild(t, bin, "2", "150")
			cmd := child.Cmd
			var base uint64           // where bin is loaded
			seen := map[uint64]bool{} // starts of the open scopes seen
			wait := testutil.Patient(time.Minute)
			deadline := time.After(wait)
			for running := true; running; {
				select {
				case <-child.Exited():
					require.NoError(t, child.Wait(t, wait))
					running = false
				case <-deadline:
					t.Fatalf("workload did not exit within %v", wait)
				case <-time.After(5 * time.Millisecond):
					if base == 0 {
						base = loadBase(cmd.Process.Pid, bin)
					}
					var tid uint32
					var s bpf.CpuOpenScope
					for it := open.Threads.Iterate(); it.Next(&tid, &s); {
						if tid == uint32(cmd.Process.Pid) {
							require.EqualValues(t, 2, s.Probe, "probe index + 1")
							seen[s.StartNs] = true
						}
					}
				}
			}
			require.Eventually(t, func() bool { return len(c.byProbe(1)) == 8 }, 2*time.Second, 10*time.Millisecond)

			recs := c.byProbe(1)
			var marked int
			entered := map[string]int{}
			for _, r := range recs {
				if seen[r.Start] {
					marked++
				}
				require.Equal(t, capture.StackKept, r.EntryStackLoss)
				require.GreaterOrEqual(t, len(r.EntryStack), 3, "handle, its caller, main")
				// The caller is the second frame, once (the walk from the
				// frame pointer alone skips it; some kernels add it).
				var in []string
				for _, pc := range r.EntryStack[1:] {
					for name, rg := range callers {
						if pc-1-base >= rg[0] && pc-1-base < rg[1] {
							in = append(in, name)
						}
					}
				}
				require.Len(t, in, 1, "entry stack %x (base %x)", r.EntryStack, base)
				require.Contains(t, callers, in[0])
				entered[in[0]]++
			}
			require.Equal(t, map[string]int{"caller_a": 6, "caller_b": 2}, entered)
			require.GreaterOrEqual(t, marked, 6, "slow scopes seen open in the map under their start (of 8)")
			var tid uint32
			var s bpf.CpuOpenScope
			require.False(t, open.Threads.Iterate().Next(&tid, &s), "every scope was removed at its end")
			require.Zero(t, m.Stats().Dropped())
		})
	}
}

// callerRanges are the file addresses [start, end) of scopelink's callers of handle.
func callerRanges(t *testing.T, bin string) map[string][2]uint64 {
	t.Helper()
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	out := map[string][2]uint64{}
	for _, s := range syms {
		if s.Name == "caller_a" || s.Name == "caller_b" {
			out[s.Name] = [2]uint64{s.Value, s.Value + s.Size}
		}
	}
	require.Len(t, out, 2)
	return out
}

// loadBase is where pid maps bin's first segment (file offset 0); 0 when
// not (yet) known.
func loadBase(pid int, bin string) uint64 {
	maps, err := procfs.FS{Root: "/proc"}.Maps(uint32(pid))
	if err != nil {
		return 0
	}
	for _, m := range maps {
		if m.Path == bin && m.Offset == 0 {
			return m.Start
		}
	}
	return 0
}
