//go:build linux

package e2e

import (
	"fmt"
	"os/exec"
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

// A thread running a leaf, started before the collector: from the first
// report that has its samples on (taken by frame pointers until the
// process's unwind tables are loaded, seconds later in an emulated guest),
// at least 95% of leaf_spin's samples name spin_caller next and main below
// it, in that first report and over all.
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
	var all leafTotals
	if !assert.Eventually(t, func() bool { all = leafCallers(otlp.all()); return all.leaf >= 600 }, testutil.Patient(2*time.Minute), 500*time.Millisecond) {
		t.Fatalf("%d samples of leaf_spin, want 600", all.leaf)
	}
	first := leafTotals{}
	for _, pd := range otlp.all() {
		if first = leafCallers([]pprofile.Profiles{pd}); first.leaf > 0 {
			break
		}
	}
	t.Logf("first report: %d of %d whole (e.g. %s); all: %d of %d", first.whole, first.leaf, first.example, all.whole, all.leaf)
	matrixFigure(t, "leaf_spin <- spin_caller <- main: first report %.1f%% of %d samples, all %.1f%% of %d",
		100*ratio(first.whole, first.leaf), first.leaf, 100*ratio(all.whole, all.leaf), all.leaf)
	assert.GreaterOrEqual(t, ratio(first.whole, first.leaf), 0.95, "the first report; e.g. %s", first.example)
	assert.GreaterOrEqual(t, ratio(all.whole, all.leaf), 0.95, "all reports; e.g. %s", all.example)
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
