//go:build linux

package e2e

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A backend built on the released v1development protos (as Grafana
// Pyroscope 2.0.6 is) decodes what otlp_grpc and otlp_http deliver of the
// same reports: resource, sample attributes, functions and totals.
func TestBackendDecodesOurOTLP(t *testing.T) {
	bin := collectorBinary(t)
	work := testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "60")
	pid := work.Process.Pid
	grpcSink, grpcAddr := startReleasedGRPCSink(t, 0)
	httpSink, httpURL := startReleasedHTTPSink(t)

	_, stop := startStoppableCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 199}
exporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
  otlp_http:
    endpoint: %s
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [otlp_grpc, otlp_http]}
`, pid, grpcAddr, httpURL))

	// At least 3 reports on each path and 1000 samples (burn_hot's share
	// then has a standard error of 1.4 points).
	require.Eventually(t, func() bool {
		if len(grpcSink.requests()) < 3 || len(httpSink.requests()) < 3 {
			return false
		}
		got, err := readReleased(grpcSink.requests())
		return err != nil || functionTotals(got)[""] >= 1000
	}, 40*time.Second, 200*time.Millisecond, "too few requests or samples on one of the paths")
	// Both exporters drain their queues on shutdown: each path then holds
	// every report.
	require.NoError(t, stop())
	require.Empty(t, httpSink.refusals(), "HTTP requests the released types could not decode")

	viaGRPC, err := readReleased(grpcSink.requests())
	require.NoError(t, err, "gRPC")
	viaHTTP, err := readReleased(httpSink.requests())
	require.NoError(t, err, "HTTP")
	require.NotEmpty(t, viaGRPC)

	wantResource, wantProcess := expectedIdentity(t, pid)
	paths := []struct {
		name     string
		profiles []releasedProfile
	}{{"otlp_grpc", viaGRPC}, {"otlp_http", viaHTTP}}

	// Since collector v0.163 (#15861, "Use the profiles dictionary for
	// resource and scope attribute strings sent over OTLP/gRPC") both
	// exporters send every resource attribute key as key_strindex and every
	// string value as string_value_strindex into the request's string table
	// (at v0.162 only otlp_http did; otlp_grpc sent them inline). A backend
	// that resolves them, as the v1development spec asks (Grafana Pyroscope
	// 2.2.1 does), reads the same resource from both; one that reads only
	// the inline key and value (Pyroscope 2.0.6) gets one attribute with an
	// empty key from both, and refuses the request. This asserts that state
	// exactly: a collector release that changes it fails here, and must
	// update README.md's "Backends" section with this test.
	for _, path := range paths {
		t.Run("resource over "+path.name+": string-table references only", func(t *testing.T) {
			for _, p := range path.profiles {
				require.NotEmpty(t, p.Resource)
				for _, a := range p.Resource {
					assert.Empty(t, a.Key, "inline key")
					assert.Positive(t, a.KeyStrindex, "key_strindex")
					if a.Value == nil {
						assert.True(t, a.HasValueStrindex, "string value %d as string_value_strindex", a.KeyStrindex)
					}
				}
				assert.Equal(t, map[string]any{"": nil}, p.plainResource(), "what a reader of inline keys sees")
				resolved, err := p.resolvedResource()
				require.NoError(t, err)
				assert.Equal(t, wantResource, resolved, "resolved through the string table")
			}
			t.Logf("%s resource as encoded: %+v", path.name, path.profiles[0].Resource)
		})
	}

	// Both exporters declare the schema they encode (collector v0.163,
	// #16147): a backend can tell this encoding from the one before.
	t.Run("declared profiles version", func(t *testing.T) {
		for name, sink := range map[string]*releasedSink{"otlp_grpc": grpcSink, "otlp_http": httpSink} {
			versions := sink.declaredVersions()
			assert.Equal(t, []string{"1"}, slices.Collect(maps.Keys(versions)), "%s: %s by request", name, versionHeader)
		}
	})

	for _, path := range paths {
		t.Run("samples over "+path.name, func(t *testing.T) {
			checkSamples(t, path.profiles, wantProcess, viaGRPC[0].Scope)
		})
	}

	t.Run("both paths deliver the same reports with the same totals", func(t *testing.T) {
		grpcTotals, grpcDup := totalsByID(viaGRPC)
		httpTotals, httpDup := totalsByID(viaHTTP)
		assert.Empty(t, grpcDup, "profile ids received twice over gRPC")
		assert.Empty(t, httpDup, "profile ids received twice over HTTP")
		assert.Equal(t, grpcTotals, httpTotals, "sample totals by profile id")
		assert.Equal(t, functionTotals(viaGRPC), functionTotals(viaHTTP), "samples by function")
		t.Logf("%d profiles, %d samples on each path", len(grpcTotals), sum(grpcTotals))
	})
}

// checkSamples checks that every sample of profiles carries exactly the
// process's attributes and a thread of cpuburn, and that the stacks name
// burn_hot and burn_cold in their share of the work.
func checkSamples(t *testing.T, profiles []releasedProfile, wantProcess map[string]any, scope string) {
	t.Helper()
	threads := map[string]int64{}
	for _, p := range profiles {
		assert.Equal(t, "samples", p.SampleType)
		assert.Equal(t, scope, p.Scope)
		for _, s := range p.Samples {
			process := maps.Clone(s.Attributes)
			tid, name := process[attrkey.ThreadID], process[attrkey.ThreadName]
			delete(process, attrkey.ThreadID)
			delete(process, attrkey.ThreadName)
			require.Equal(t, wantProcess, process, "sample attributes of profile %s", p.ID)
			require.IsType(t, int64(0), tid, "thread.id")
			require.IsType(t, "", name, "thread.name")
			threads[name.(string)] += s.Value
		}
	}
	t.Logf("attributes of the first sample: %v", profiles[0].Samples[0].Attributes)
	t.Logf("samples by thread.name: %v", threads)
	assert.Subset(t, []string{"burner-1", "burner-2", "cpuburn"}, slices.Collect(maps.Keys(threads)))
	assert.Positive(t, threads["burner-1"])
	assert.Positive(t, threads["burner-2"])

	fn := functionTotals(profiles)
	hot, cold := fn["burn_hot"], fn["burn_cold"]
	t.Logf("burn_hot=%d burn_cold=%d of %d", hot, cold, fn[""])
	require.Positive(t, hot+cold)
	assert.InDelta(t, 0.75, float64(hot)/float64(hot+cold), 0.05, "burn_hot's share")
	assert.GreaterOrEqual(t, float64(hot+cold)/float64(fn[""]), 0.95, "samples naming burn_hot or burn_cold")
}

// expectedIdentity is what the receiver's identity resolver says of pid,
// split as internal/pdata splits it for a process outside containers: the
// host attributes on the resource, the others on each sample.
func expectedIdentity(t *testing.T, pid int) (resource, process map[string]any) {
	t.Helper()
	host := os.Getenv("NODE_NAME") // as the receiver names the host
	if host == "" {
		var err error
		host, err = os.Hostname()
		require.NoError(t, err)
	}
	id, err := identity.NewResolver(procfs.FS{Root: "/proc"}, host).Resolve(uint32(pid))
	require.NoError(t, err)
	require.NotContains(t, id.Attributes, attrkey.ContainerID, "the workload runs outside containers")
	resource, process = map[string]any{}, map[string]any{}
	for k, v := range id.Attributes {
		if strings.HasPrefix(k, "host.") {
			resource[k] = v
		} else {
			process[k] = v
		}
	}
	require.Equal(t, map[string]any{attrkey.HostName: host}, resource)
	for _, k := range []string{attrkey.ProcessPID, attrkey.ProcessExecutableName, attrkey.ServiceName} {
		require.Contains(t, process, k)
	}
	return resource, process
}

// totalsByID sums each profile id's samples, and lists the ids that came
// more than once.
func totalsByID(profiles []releasedProfile) (totals map[string]int64, repeated []string) {
	totals = map[string]int64{}
	for _, p := range profiles {
		if _, ok := totals[p.ID]; ok {
			repeated = append(repeated, p.ID)
		}
		totals[p.ID] += p.total()
	}
	return totals, repeated
}

// functionTotals sums the samples naming each function (once per sample);
// "" is every sample.
func functionTotals(profiles []releasedProfile) map[string]int64 {
	out := map[string]int64{}
	for _, p := range profiles {
		for _, s := range p.Samples {
			out[""] += s.Value
			seen := map[string]bool{}
			for _, f := range s.Functions {
				if !seen[f] {
					seen[f] = true
					out[f] += s.Value
				}
			}
		}
	}
	return out
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
