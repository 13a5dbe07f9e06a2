//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A binary of ClickHouse's size (3.1 M unwind rows, 20 MiB of .eh_frame,
// 520k C++ symbols in a separate debug file of 1 GiB) already running when
// a host-wide collector starts in the DaemonSet's memory cgroup, beside a
// small binary with the same chain: how soon its stacks are whole, the
// collector's peak memory and its BPF memory. Then the same with a table
// budget it does not fit: its table refused and counted, the small
// binary's stacks whole.
func TestFaultHugeBinary(t *testing.T) {
	bin, full := faultLength(t)
	window := 10 * time.Second
	if full {
		window = 30 * time.Second
	}
	dir := t.TempDir()
	begin := time.Now()
	huge := hugeBinary(t, dir, "clickhub", 520_000, 1<<30)
	small := hugeBinary(t, dir, "minihub", 0, 0)
	faultFigure(t, "built in %v", time.Since(begin).Round(time.Second))
	for _, tc := range []struct {
		name      string
		budgetMiB int
		fits      bool
	}{{"default budget", 64, true}, {"over budget", 16, false}} {
		t.Run(tc.name, func(t *testing.T) {
			runHugeBinary(t, bin, huge, small, tc.budgetMiB, tc.fits, full, window)
		})
	}
}

func runHugeBinary(t *testing.T, bin, huge, small string, budgetMiB int, fits, full bool, window time.Duration) {
	hugeWork := testutil.StartReadyWorkload(t, huge)
	smallWork := testutil.StartReadyWorkload(t, small)
	before, err := readKernelObjects()
	require.NoError(t, err)
	otlp, addr := startOTLPServer(t)
	metricsPort := freePort(t)
	config := profilesMetricsTo(fmt.Sprintf(`    report_interval: 1s
    cpu: {samples_per_second: 99}
    unwinding: {table_memory_mib: %d}
`, budgetMiB), addr, metricsPort)
	path := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	cg, env := daemonSetCgroup(t)
	argv := cg.Wrap(bin, "--config", path, "--feature-gates=service.profilesSupport")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	start := time.Now()
	out, _ := runStoppableCollector(t, cmd)
	waitReady(t, out)
	started := time.Since(start)

	// Ready: the first report in which 90% of the huge binary's samples
	// (at least 20) are whole.
	var ready time.Duration
	seen := 0
	deadline := time.Now().Add(testutil.Patient(2 * time.Minute))
	for ready == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		received := otlp.all()
		for ; seen < len(received); seen++ {
			if share, n := wholeShare(received[seen:seen+1], hugeWork.Process.Pid); n >= 20 && share >= 0.9 {
				ready = time.Since(start)
				break
			}
		}
		if !fits && time.Since(start) > started+window {
			break // it never will be: measure the window
		}
	}
	if fits {
		require.NotZero(t, ready, "the huge binary's stacks never whole:\n%s", out)
	}
	first := len(otlp.all())
	time.Sleep(window)
	received := otlp.all()[first:]
	hugeShare, hugeN := wholeShare(received, hugeWork.Process.Pid)
	smallShare, smallN := wholeShare(received, smallWork.Process.Pid)
	objects, err := readKernelObjects()
	require.NoError(t, err)
	bpfBytes := objects.since(before).bytes()
	peakRSS := procStatusKiB(t, cmd.Process.Pid, "VmHWM") << 10
	text := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	tableBytes := metricValue(text, "otelcol_bpfprofiler_unwind_table_bytes")
	spaceFull := metricValue(text, "otelcol_bpfprofiler_unwind_tables_failed", `reason="space_full"`)

	faultFigure(t, "%d MiB budget: collector ready %v, huge binary's stacks whole %v after its start; then whole: huge %.1f%% of %d samples, small %.1f%% of %d; peak RSS %.0f MiB, cgroup peak %.0f MiB, OOM kills %d; BPF maps %.1f MiB, unwind rows %.1f MiB; tables refused for space %.0f",
		budgetMiB, started.Round(100*time.Millisecond), ready.Round(100*time.Millisecond), 100*hugeShare, hugeN, 100*smallShare, smallN,
		float64(peakRSS)/(1<<20), float64(cg.Peak())/(1<<20), cg.OOMKills(), float64(bpfBytes)/(1<<20), tableBytes/(1<<20), spaceFull)
	assert.Zero(t, cg.OOMKills(), "OOM kills in the collector's cgroup")
	assert.GreaterOrEqual(t, smallN, int64(200), "the small binary's samples over %v", window)
	assert.GreaterOrEqual(t, smallShare, 0.9, "the small binary's whole stacks")
	if fits {
		assert.GreaterOrEqual(t, hugeN, int64(200), "the huge binary's samples over %v", window)
		assert.GreaterOrEqual(t, hugeShare, 0.9, "the huge binary's whole stacks once ready")
		assert.Zero(t, spaceFull, "tables refused for space within the budget")
		if full {
			assert.LessOrEqual(t, ready, 30*time.Second, "the huge binary's stacks whole after")
			assert.LessOrEqual(t, peakRSS, uint64(250<<20), "the collector's peak RSS")
		}
	} else {
		assert.GreaterOrEqual(t, spaceFull, 1.0, "the huge binary's table refused for space, counted")
		var logged []string
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, "got no unwind table") && strings.Contains(line, "space_full") {
				logged = append(logged, line)
			}
		}
		if assert.Len(t, logged, 1, "log lines of a table refused for space") {
			assert.Contains(t, logged[0], filepath.Base(huge))
			assert.Contains(t, logged[0], "unwinding::table_memory_mib")
		}
		assert.Less(t, hugeShare, 0.1, "whole stacks of a binary without its table (its chain keeps no frame pointers)")
	}
}

// procStatusKiB is a "<field>: <n> kB" line of /proc/<pid>/status.
func procStatusKiB(t *testing.T, pid int, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kib uint64
			_, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib)
			require.NoError(t, err, "%s: %q", field, line)
			return kib
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// hugeChain is the stack of a huge binary's working thread, leaf first:
// four functions spread over its text, none keeping a frame pointer (each
// clears rbp), so only its unwind table can walk it.
var hugeChain = []string{"spin_rows", "scan_block", "plan_run", "query_execute", "main"}

// hugeBinary builds a binary the size of ClickHouse's or Chromium's in
// dir: filler functions with C++ names and the CFI of a pushing,
// frame-allocating prologue each (rows of .eh_frame), and the hot chain
// between them. It is stripped as distributions ship it: its names and
// debugBytes of debug sections are in .debug/<name>.debug, found through
// its .gnu_debuglink (the binary carries the debug file's CRC-32, which the
// symbolizer checks over the whole file), as ClickHouse's debug package
// installs it.
func hugeBinary(t *testing.T, dir, name string, fillers int, debugBytes int64) string {
	t.Helper()
	asm := filepath.Join(dir, name+".s")
	f, err := os.Create(asm)
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "\t.section .note.GNU-stack,\"\",@progbits\n\t.text\n")
	hot := map[int]string{}
	if fillers > 0 {
		hot = map[int]string{fillers / 4: "query_execute", fillers / 2: "plan_run", 3 * fillers / 4: "scan_block", fillers - 1: "spin_rows"}
	}
	for i := range fillers {
		writeFiller(w, i)
		if fn, ok := hot[i]; ok {
			writeHot(w, fn)
		}
	}
	if fillers == 0 {
		for _, fn := range hugeChain[:4] {
			writeHot(w, fn)
		}
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	src := filepath.Join(dir, name+"-main.c")
	require.NoError(t, os.WriteFile(src, []byte(hugeMain), 0o644))
	bin := filepath.Join(dir, name)
	run := func(argv ...string) {
		t.Helper()
		out, err := testutil.RunWithin(exec.Command(argv[0], argv[1:]...), 5*time.Minute)
		require.NoError(t, err, "%v:\n%s", argv, out)
	}
	run("gcc", "-O2", "-g", "-fomit-frame-pointer", "-Wl,--build-id", "-o", bin, src, asm)
	require.NoError(t, os.Remove(asm))
	debugDir := filepath.Join(dir, ".debug")
	require.NoError(t, os.MkdirAll(debugDir, 0o755))
	debug := filepath.Join(debugDir, name+".debug")
	run("objcopy", "--only-keep-debug", bin, debug)
	if debugBytes > 0 {
		// The bulk of a big C++ program's DWARF: what matters to the
		// collector is its size (it is mapped, and read whole for the CRC).
		bulk := filepath.Join(dir, "debug-bulk")
		writePattern(t, bulk, debugBytes)
		run("objcopy", "--add-section", ".debug_str.bulk="+bulk, "--set-section-flags", ".debug_str.bulk=noload,readonly", debug)
		require.NoError(t, os.Remove(bulk))
	}
	run("objcopy", "--strip-all", "--add-gnu-debuglink="+debug, bin)
	return bin
}

// hugeMain runs the hot chain for ever, once it said it is ready.
const hugeMain = `#include <stdio.h>
unsigned long query_execute(unsigned long);
int main(void)
{
	volatile unsigned long sink = 0;
	puts("ready");
	fflush(stdout);
	for (;;)
		sink += query_execute(200000);
}
`

func writeFiller(w *bufio.Writer, i int) {
	module := fmt.Sprint(i / 1000)
	component := fmt.Sprintf("Component%d", i)
	sym := fmt.Sprintf("_ZN8clickhub6engine%dmodule%s%d%s12processEventERKSt6vectorIiSaIiEE",
		len("module")+len(module), module, len(component), component)
	fmt.Fprintf(w, `	.globl %[1]s
	.type %[1]s,@function
%[1]s:
	.cfi_startproc
	push %%rbx
	.cfi_def_cfa_offset 16
	.cfi_offset 3,-16
	push %%r12
	.cfi_def_cfa_offset 24
	.cfi_offset 12,-24
	sub $40,%%rsp
	.cfi_def_cfa_offset 64
	lea %[2]d(%%rdi),%%rax
	add $40,%%rsp
	.cfi_def_cfa_offset 24
	pop %%r12
	.cfi_def_cfa_offset 16
	pop %%rbx
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size %[1]s,.-%[1]s
`, sym, i)
}

// writeHot writes one function of the chain: spin_rows spins n times,
// each other calls the next (a fixed order, hugeChain's) and adds to its
// result, keeping rbp as a plain register (zero).
func writeHot(w *bufio.Writer, fn string) {
	if fn == "spin_rows" {
		fmt.Fprintf(w, `	.globl spin_rows
	.type spin_rows,@function
spin_rows:
	.cfi_startproc
	sub $24,%%rsp
	.cfi_def_cfa_offset 32
	mov %%rdi,%%rcx
	mov $7,%%rax
1:	imul %%rcx,%%rax
	add $13,%%rax
	dec %%rcx
	jnz 1b
	add $24,%%rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size spin_rows,.-spin_rows
`)
		return
	}
	callee := map[string]string{"query_execute": "plan_run", "plan_run": "scan_block", "scan_block": "spin_rows"}[fn]
	fmt.Fprintf(w, `	.globl %[1]s
	.type %[1]s,@function
%[1]s:
	.cfi_startproc
	push %%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6,-16
	xor %%ebp,%%ebp
	sub $16,%%rsp
	.cfi_def_cfa_offset 32
	call %[2]s
	add $1,%%rax
	add $16,%%rsp
	.cfi_def_cfa_offset 16
	pop %%rbp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size %[1]s,.-%[1]s
`, fn, callee)
}

// writePattern writes n bytes that do not compress to nothing.
func writePattern(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*131 + i>>8)
	}
	for written := int64(0); written < n; written += int64(len(block)) {
		_, err := f.Write(block[:min(int64(len(block)), n-written)])
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
}

// wholeShare is the share of pid's CPU samples in the received profiles
// whose stack starts with hugeChain, and their number.
func wholeShare(profiles []pprofile.Profiles, pid int) (float64, int64) {
	var whole, all int64
	for _, p := range profiles {
		for _, st := range pdata.Stacks(pdata.OfType(pdata.OfPID(p, pid), "samples")) {
			all += st.Value
			if len(st.Functions) >= len(hugeChain) && strings.Join(st.Functions[:len(hugeChain)], "<") == strings.Join(hugeChain, "<") {
				whole += st.Value
			}
		}
	}
	if all == 0 {
		return 0, 0
	}
	return float64(whole) / float64(all), all
}
