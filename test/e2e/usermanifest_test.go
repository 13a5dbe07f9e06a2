//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A user's own ocb manifest of the release we build against, with our
// receiver beside core and contrib components (testdata/user-manifest.yaml),
// builds; the collector it makes is at that one release and runs a profiles
// pipeline through the contrib resource processor to otlp_http, with the
// contrib health check answering.
func TestUserManifestBuildsAndRuns(t *testing.T) {
	testutil.RequireBPF(t)
	ocb := os.Getenv("BPFPROFILER_OCB")
	if ocb == "" {
		if os.Getenv(testutil.RequireBPFEnv) == "1" {
			t.Fatal("BPFPROFILER_OCB is not set; run the tests with `make test`")
		}
		t.Skip("BPFPROFILER_OCB is not set; `make test` installs ocb and sets it")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := buildUserManifest(t, ocb, root)

	work := testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "60")
	httpSink, httpURL := startReleasedHTTPSink(t)
	health := freePort(t)
	_, stop := startStoppableCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 199}
processors:
  memory_limiter: {check_interval: 1s, limit_percentage: 80, spike_limit_percentage: 20}
  resource:
    attributes:
      - {key: deployment.environment.name, value: e2e, action: upsert}
exporters:
  otlp_http:
    endpoint: %s
extensions:
  health_check: {endpoint: "127.0.0.1:%d"}
service:
  extensions: [health_check]
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], processors: [memory_limiter, resource], exporters: [otlp_http]}
`, work.Process.Pid, httpURL, health))

	require.Eventually(t, func() bool {
		got, err := readReleased(httpSink.requests())
		return err != nil || functionTotals(got)[""] >= 600
	}, 40*time.Second, 200*time.Millisecond, "too few samples over otlp_http")
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", health))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "health_check")
	require.NoError(t, stop())
	require.Empty(t, httpSink.refusals())

	profiles, err := readReleased(httpSink.requests())
	require.NoError(t, err)
	wantResource, wantProcess := expectedIdentity(t, work.Process.Pid)
	wantResource["deployment.environment.name"] = "e2e"
	for _, p := range profiles {
		resolved, err := p.resolvedResource()
		require.NoError(t, err)
		assert.Equal(t, wantResource, resolved, "resource of profile %s after the resource processor", p.ID)
	}
	checkSamples(t, profiles, wantProcess, profiles[0].Scope)
}

// buildUserManifest builds testdata/user-manifest.yaml with ocb, our receiver
// taken from root, and checks that every collector module of the result is at
// collector-release.mk's release.
func buildUserManifest(t *testing.T, ocb, root string) string {
	t.Helper()
	manifest, err := os.ReadFile("testdata/user-manifest.yaml")
	require.NoError(t, err)
	out := filepath.Join(root, "_build", "user-collector")
	text := strings.Replace(string(manifest), "output_path: ./_build/user-collector", "output_path: "+out, 1)
	text = strings.Replace(text, "path: ../../..", "path: "+root, 1)
	require.NotEqual(t, string(manifest), text)
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))

	// One deadline for the build and the check, as ocb's first build
	// downloads and compiles the collector's modules.
	deadline := time.Now().Add(testutil.Patient(20 * time.Minute))
	start := time.Now()
	cmd := exec.Command(ocb, "--config", path)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	output, err := testutil.RunWithin(cmd, time.Until(deadline))
	require.NoError(t, err, "ocb:\n%s", output)
	t.Logf("ocb built the user manifest in %s", time.Since(start).Round(time.Second))

	check := exec.Command("go", "run", "./tools/collectorrelease", "-check-module", out)
	check.Dir = root
	output, err = testutil.RunWithin(check, time.Until(deadline))
	require.NoError(t, err, "the user collector's modules:\n%s", output)
	t.Logf("%s", strings.TrimSpace(string(output)))
	return filepath.Join(out, "otelcol-user")
}
