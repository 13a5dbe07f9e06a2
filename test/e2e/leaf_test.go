//go:build linux

package e2e

import (
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// leafChain is leafcall.c's stack from its leaf: leaf_spin saves no frame
// record on arm64, so its caller is in x30 alone while it runs.
var leafChain = []string{"leaf_spin", "spin_caller", "main"}

// A thread running a leaf, started before the collector. On arm64 (x30
// holds the leaf's caller), from the first report that has its samples on
// (taken by frame pointers until the process's unwind tables are loaded,
// seconds later in an emulated guest) at least 95% of leaf_spin's samples
// name spin_caller next and main below it, in that first report and over
// all. x86-64 has no link register: a leaf without a frame loses its caller
// until the tables load, so there the first report's share is only shown,
// and 95% is required of the samples after the reports in which half were
// whole or fewer.
func TestCollectorKeepsLeafCallers(t *testing.T) {
	testutil.RequireBPF(t)
	bin := collectorBinary(t)
	leaf := testutil.BuildC(t, "leafcall.c")
	otlp, addr := startOTLPServer(t)
	work := testutil.StartChild(t, exec.Command(leaf, fmt.Sprint(testutil.Patient(10*time.Minute).Seconds())))
	out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 199}
`, work.Pid()), addr))
	waitReady(t, out)
	skip := 0 // reports left out before the share is measured
	if runtime.GOARCH != "arm64" {
		if !assert.Eventually(t, func() bool {
			lt := leafCallers(otlp.all())
			return lt.leaf > 0 && ratio(lt.whole, lt.leaf) > 0.5
		}, testutil.Patient(3*time.Minute), 500*time.Millisecond) {
			t.Fatalf("leaf_spin's callers not whole in half its samples: %+v", leafCallers(otlp.all()))
		}
		skip = len(otlp.all())
	}
	var all leafTotals
	if !assert.Eventually(t, func() bool { all = leafCallers(otlp.all()[skip:]); return all.leaf >= 600 }, testutil.Patient(2*time.Minute), 500*time.Millisecond) {
		t.Fatalf("%d samples of leaf_spin, want 600", all.leaf)
	}
	first := leafTotals{}
	for _, pd := range otlp.all() {
		if first = leafCallers([]pprofile.Profiles{pd}); first.leaf > 0 {
			break
		}
	}
	t.Logf("first report: %d of %d whole (e.g. %s); measured: %d of %d", first.whole, first.leaf, first.example, all.whole, all.leaf)
	measured := "all"
	if skip > 0 {
		measured = fmt.Sprintf("from report %d on", skip+1)
	}
	matrixFigure(t, "leaf_spin <- spin_caller <- main: first report %.1f%% of %d samples, %s %.1f%% of %d",
		100*ratio(first.whole, first.leaf), first.leaf, measured, 100*ratio(all.whole, all.leaf), all.leaf)
	if runtime.GOARCH == "arm64" {
		assert.GreaterOrEqual(t, ratio(first.whole, first.leaf), 0.95, "the first report; e.g. %s", first.example)
	}
	assert.GreaterOrEqual(t, ratio(all.whole, all.leaf), 0.95, "%s; e.g. %s", measured, all.example)
}

// leafTotals are the samples whose leaf is leaf_spin, those with the whole
// leafChain, and an example of one without.
type leafTotals struct {
	leaf, whole int64
	example     string
}

func leafCallers(received []pprofile.Profiles) leafTotals {
	var lt leafTotals
	for _, pd := range received {
		for _, st := range pdata.Stacks(pd) {
			if len(st.Functions) == 0 || st.Functions[0] != leafChain[0] {
				continue
			}
			lt.leaf += st.Value
			if len(st.Functions) >= len(leafChain) && slices.Equal(st.Functions[:len(leafChain)], leafChain) {
				lt.whole += st.Value
			} else if lt.example == "" {
				lt.example = fmt.Sprint(st.Functions)
			}
		}
	}
	return lt
}
