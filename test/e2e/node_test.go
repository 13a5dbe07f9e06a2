//go:build linux

package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// jsBody is a function of testdata/workloads/nodechain.js and the lines of
// its body.
type jsBody struct {
	name        string
	first, last int64
}

// nodechainBodies are nodechain.js's main <- work <- spin, the leaf first.
var nodechainBodies = []jsBody{{"spin", 4, 10}, {"work", 12, 18}, {"main", 25, 32}}

// A node process started with no flag (node 22), profiled by the
// collector: at least 90% of the samples naming spin show spin <- work <-
// main as JavaScript frames (profile.frame.type v8js) of nodechain.js at
// lines of their bodies, above node's native frames down to the thread's
// root.
func TestCollectorNodeFrames(t *testing.T) {
	testutil.RequireBPF(t)
	bin := collectorBinary(t)
	node := testutil.Node(t, 22)
	otlp, addr := startOTLPServer(t)
	script := testutil.Workload(t, "nodechain.js")
	cmd := testutil.StartWorkload(t, node, script, "600")
	pid := cmd.Process.Pid
	out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 99}
`, pid), addr))
	want := nodechainBodies
	// The first samples come before node's tables are loaded (slowly on
	// an emulated kernel): left out.
	if !assert.Eventually(t, func() bool {
		share, _, _ := nodeChain(otlp.all(), pid, want)
		return share > 0.5
	}, testutil.Patient(5*time.Minute), 500*time.Millisecond) {
		share, n, example := nodeChain(otlp.all(), pid, want)
		t.Fatalf("%.1f%% of %d samples naming spin whole, e.g. %s; collector output:\n%s", 100*share, n, example, out)
	}
	skip := len(otlp.all())
	later := func() []pprofile.Profiles { return otlp.all()[skip:] }
	var n int64
	if !assert.Eventually(t, func() bool { _, n, _ = nodeChain(later(), pid, want); return n >= 300 }, testutil.Patient(2*time.Minute), 500*time.Millisecond) {
		t.Fatalf("%d samples naming spin, want 300", n)
	}
	share, n, example := nodeChain(later(), pid, want)
	t.Logf("%.1f%% of %d samples naming spin whole", 100*share, n)
	matrixFigure(t, "node 22: spin <- work <- main at their lines: %.1f%% of %d samples", 100*share, n)
	assert.GreaterOrEqual(t, share, 0.9, "e.g. %s", example)
}

// nodeChain is the share of the samples of pid naming spin whose
// JavaScript frames, from spin, are want (nodechain.js, lines in their
// bodies) and whose root is the process's main; their number, and an
// example of one that is not.
func nodeChain(received []pprofile.Profiles, pid int, want []jsBody) (float64, int64, string) {
	var all, whole int64
	example := ""
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), pid)) {
			var js []pdata.NamedFrame
			for _, f := range st.Frames {
				if f.Type == "v8js" && (len(js) > 0 || f.Function == want[0].name) {
					js = append(js, f)
				}
			}
			if len(js) == 0 {
				continue
			}
			all += st.Value
			if jsWhole(js, want) && st.Frames[len(st.Frames)-1].Function == "_start" {
				whole += st.Value
			} else if example == "" {
				example = describeFrames(st.Frames)
			}
		}
	}
	return ratio(whole, all), all, example
}

func jsWhole(js []pdata.NamedFrame, want []jsBody) bool {
	if len(js) < len(want) {
		return false
	}
	for i, w := range want {
		f := js[i]
		if f.Function != w.name || filepath.Base(f.File) != "nodechain.js" || f.Line < w.first || f.Line > w.last {
			return false
		}
	}
	return true
}
