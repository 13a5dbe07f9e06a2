//go:build linux

package sampler

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// chainShare returns, of the samples of threads named comm, the share
// (by value) whose symbolized user stack holds want in order, leaf first
// (other frames may come between), and reaches one of roots.
func chainShare(sym *symbolize.Symbolizer, pid uint32, samples []capture.RawStack, comm string, want, roots []string) (share float64, total uint64, example []string) {
	var whole uint64
	for _, smp := range samples {
		if smp.Comm != comm {
			continue
		}
		total += smp.Value
		var names []string
		for _, f := range sym.User(pid, smp.Addresses(capture.UserFrame)) {
			names = append(names, f.Function)
		}
		if inOrder(names, want) && slices.ContainsFunc(names, func(n string) bool { return slices.Contains(roots, n) }) {
			whole += smp.Value
		} else if example == nil {
			example = names
		}
	}
	if total == 0 {
		return 0, 0, nil
	}
	return float64(whole) / float64(total), total, example
}

// inOrder reports whether want appears in names in order; "qsort" stands
// for glibc's own name of it (__qsort_r in 2.36).
func inOrder(names, want []string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && (n == want[i] || want[i] == "qsort" && strings.Contains(n, "qsort")) {
			i++
		}
	}
	return i == len(want)
}

// A program built without frame pointers: with unwind tables, its stacks
// are whole, through its own frames and through glibc's qsort, down to the
// thread's root; with frame pointers only, they are not.
func TestUnwindTablesWalkCodeWithoutFramePointers(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "nofp.c")
	cmd := testutil.StartWorkload(t, bin, "60")
	pid := uint32(cmd.Process.Pid)
	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()

	chain := []string{"chain_leaf", "chain_c", "chain_b", "chain_a", "main"}
	sorter := []string{"compare_slow", "qsort", "sort_round", "sorter"}
	mainRoots := []string{"__libc_start_main", "__libc_start_call_main", "_start"}
	threadRoots := []string{"start_thread", "__clone3", "clone3", "__clone", "clone"}

	for _, tables := range []bool{false, true} {
		s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, UnwindTables: tables, Proc: procfs.FS{Root: "/proc"}})
		// The first samples announce the process; its tables load then.
		time.Sleep(time.Second)
		samples, st, _ := sampleFor(t, s, 3*time.Second)
		_ = s.Close()

		chainOK, chainN, chainEx := chainShare(sym, pid, samples, "chain", chain, mainRoots)
		sortOK, sortN, sortEx := chainShare(sym, pid, samples, "sorter", sorter, threadRoots)
		t.Logf("tables %v: chain %.1f%% of %d samples whole, sorter %.1f%% of %d; unwind ends %v, %d frames",
			tables, 100*chainOK, chainN, 100*sortOK, sortN, st.UnwindEnds, st.UnwindFrames)
		if chainN < 100 || sortN < 100 {
			t.Fatalf("tables %v: %d chain and %d sorter samples, want 100 each", tables, chainN, sortN)
		}
		if !tables {
			// Without tables the walk loses callers: what the tables must fix.
			if chainOK > 0.5 && sortOK > 0.5 {
				t.Errorf("frame pointers alone give whole stacks (%.2f, %.2f): the fixture does not test the tables", chainOK, sortOK)
			}
			continue
		}
		if chainOK < 0.95 {
			t.Errorf("chain: %.1f%% of samples whole, want >= 95%%; e.g. %s", 100*chainOK, strings.Join(chainEx, " <- "))
		}
		if sortOK < 0.95 {
			t.Errorf("sorter: %.1f%% of samples whole, want >= 95%%; e.g. %s", 100*sortOK, strings.Join(sortEx, " <- "))
		}
		if st.UnwindEnds[capture.UnwindRoot] == 0 {
			t.Errorf("no walk reached a root: %v", st.UnwindEnds)
		}
	}
}

// Debian's own stripped binaries, built without frame pointers, compressing
// a stream: with unwind tables, at least 90% of their samples reach
// __libc_start_main (the deepest frame the symbolizer names in them).
func TestUnwindTablesDebianBinaries(t *testing.T) {
	testutil.RequireBPF(t)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"xz", []string{"-9", "-T1", "-c"}},
		{"gzip", []string{"-9", "-c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin, err := exec.LookPath(tt.name)
			if err != nil {
				testutil.SkipOrFail(t, "%s is not installed: %v", tt.name, err)
			}
			pid := compressForever(t, bin, tt.args...)
			s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, UnwindTables: true, Proc: procfs.FS{Root: "/proc"}})
			time.Sleep(time.Second) // the first samples announce the process
			samples, st, _ := sampleFor(t, s, 3*time.Second)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			var total, rooted, depth uint64
			var example []string
			for _, smp := range samples {
				if smp.PID != pid {
					continue
				}
				total += smp.Value
				addrs := smp.Addresses(capture.UserFrame)
				depth += smp.Value * uint64(len(addrs))
				var names []string
				for _, f := range sym.User(pid, addrs) {
					names = append(names, f.Function)
				}
				if slices.Contains(names, "__libc_start_main") || slices.Contains(names, "__libc_start_call_main") {
					rooted += smp.Value
				} else if example == nil {
					example = names
				}
			}
			if total < 100 {
				t.Fatalf("%d samples of %s, want 100", total, tt.name)
			}
			share := float64(rooted) / float64(total)
			t.Logf("%s: %.1f%% of %d samples reach __libc_start_main, mean depth %.1f frames; unwind ends %v",
				tt.name, 100*share, total, float64(depth)/float64(total), st.UnwindEnds)
			if share < 0.9 {
				t.Errorf("%.1f%% of samples reach __libc_start_main, want >= 90%%; e.g. %s", 100*share, strings.Join(example, " <- "))
			}
		})
	}
}

// compressForever runs bin args, reading a pseudo-random but compressible
// stream and writing to nowhere, until the test ends; it returns its pid.
func compressForever(t *testing.T, bin string, args ...string) uint32 {
	t.Helper()
	cmd := exec.Command(bin, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		defer in.Close()
		buf := make([]byte, 1<<16)
		seed := uint64(1)
		for {
			for i := range buf {
				seed ^= seed << 13
				seed ^= seed >> 7
				seed ^= seed << 17
				buf[i] = "abcdefgh"[seed%8] // compressible, never the same
			}
			select {
			case <-done:
				return
			default:
			}
			if _, err := in.Write(buf); err != nil {
				return
			}
		}
	}()
	return uint32(cmd.Process.Pid)
}
