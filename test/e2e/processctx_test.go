//go:build linux

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A process that publishes an OpenTelemetry process context (OTEP 4719, as
// an SDK does: otelctx.c) has its samples named by it: the SDK's
// service.name over the executable's, its service.instance.id and
// deployment.environment.name, the pid this node sees over the SDK's; and
// a new publication renames the samples that follow.
func TestCollectorAppliesProcessContext(t *testing.T) {
	bin := collectorBinary(t)
	seconds := testutil.Patient(45 * time.Second).Seconds()
	republish := testutil.Patient(12 * time.Second).Seconds()
	work := testutil.StartWorkload(t, testutil.BuildC(t, "otelctx.c"), fmt.Sprint(seconds), fmt.Sprint(republish))
	pid := int64(work.Process.Pid)
	otlp, addr := startOTLPServer(t)
	startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 49}
`, pid), addr))

	names := func() []string {
		var seen []string
		for _, p := range otlp.all() {
			if attrs, ok := pdata.ProcessAttributes(p)[pid]; ok {
				seen = append(seen, fmt.Sprint(attrs[attrkey.ServiceName]))
			}
		}
		return seen
	}
	require.Eventually(t, func() bool { return len(names()) > 0 }, testutil.Patient(30*time.Second), 200*time.Millisecond,
		"no samples of the workload (pid %d)", pid)
	first := map[string]any{}
	for _, p := range otlp.all() {
		if attrs, ok := pdata.ProcessAttributes(p)[pid]; ok {
			first = attrs
			break
		}
	}
	assert.Equal(t, "otelctx-checkout", first[attrkey.ServiceName])
	assert.Equal(t, "7c3e2a10-0d4b-4f3c-9a51-1b2c3d4e5f60", first["service.instance.id"])
	assert.Equal(t, "e2e", first["deployment.environment.name"])
	assert.Equal(t, pid, first[attrkey.ProcessPID], "the SDK published pid 1, its own namespace's")

	// Republished at 12 s; polled every 10 s: renamed within 12 + 10 + a report.
	require.Eventually(t, func() bool {
		n := names()
		return len(n) > 0 && n[len(n)-1] == "otelctx-checkout-v2"
	}, testutil.Patient(30*time.Second), 500*time.Millisecond, "samples still named %v after the new publication", names())
	seen := names()
	v2 := seen[len(seen)-1]
	for i, n := range seen {
		if n == v2 {
			assert.NotContains(t, seen[i:], "otelctx-checkout", "once renamed, every later report keeps the new name")
			break
		}
	}
	t.Logf("service.name by report: %v", seen)
}
