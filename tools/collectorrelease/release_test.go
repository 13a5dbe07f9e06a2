package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var rel = Release{Core: "v0.165.0", Stable: "v1.71.0", Contrib: "v0.165.1", Mdatagen: "v0.161.0"}

func TestParseRelease(t *testing.T) {
	for _, tc := range []struct {
		name, text, err string
		want            Release
	}{
		{name: "ok", text: "# c\nCOLLECTOR_CORE := v0.165.0\nCOLLECTOR_STABLE  := v1.71.0\n\nCOLLECTOR_CONTRIB := v0.165.1\nMDATAGEN_VERSION := v0.161.0\n", want: rel},
		{name: "missing", text: "COLLECTOR_CORE := v0.165.0\n", err: "COLLECTOR_CONTRIB"},
		{name: "not a version", text: "COLLECTOR_CORE := 0.165\nCOLLECTOR_STABLE := v1.71.0\nCOLLECTOR_CONTRIB := v0.165.1\nMDATAGEN_VERSION := v0.161.0\n", err: `COLLECTOR_CORE: "0.165"`},
		{name: "swapped lines", text: "COLLECTOR_CORE := v1.71.0\nCOLLECTOR_STABLE := v0.165.0\nCOLLECTOR_CONTRIB := v0.165.1\nMDATAGEN_VERSION := v0.161.0\n", err: "must be v0.x"},
		{name: "no assignment", text: "COLLECTOR_CORE = v0.165.0\n", err: "want NAME := value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRelease(strings.NewReader(tc.text))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		mods []Module
		errs []string
	}{
		{name: "one release", mods: []Module{
			{Path: "go.opentelemetry.io/collector/pdata", Version: "v1.71.0"},
			{Path: "go.opentelemetry.io/collector/pdata/pprofile", Version: "v0.165.0"},
			{Path: "go.opentelemetry.io/collector", Version: "v0.165.0"},
			{Path: "github.com/open-telemetry/opentelemetry-collector-contrib/processor/resourceprocessor", Version: "v0.165.1"},
			{Path: "go.opentelemetry.io/collector/cmd/mdatagen", Version: "v0.161.0"},
			{Path: "go.opentelemetry.io/otel", Version: "v1.47.0"},
			{Path: "go.opentelemetry.io/collectorx", Version: "v9.0.0"},
		}},
		{name: "older core, stable and contrib", mods: []Module{
			{Path: "go.opentelemetry.io/collector/pdata", Version: "v1.68.0", Source: "go.mod"},
			{Path: "go.opentelemetry.io/collector/exporter/otlpexporter", Version: "v0.162.0", Source: "builder-config.yaml"},
			{Path: "github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest", Version: "v0.165.0", Source: "go.mod"},
		}, errs: []string{
			"go.mod: go.opentelemetry.io/collector/pdata is at v1.68.0, the release is v1.71.0",
			"builder-config.yaml: go.opentelemetry.io/collector/exporter/otlpexporter is at v0.162.0, the release is v0.165.0",
			"pdatatest is at v0.165.0, the release is v0.165.1",
		}},
		{name: "mdatagen at the release of the others", mods: []Module{
			{Path: "go.opentelemetry.io/collector/cmd/mdatagen", Version: "v0.165.0"},
		}, errs: []string{"mdatagen is at v0.165.0, the release is v0.161.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rel.Check(tc.mods)
			if len(tc.errs) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, e := range tc.errs {
				assert.ErrorContains(t, err, e)
			}
			assert.Len(t, strings.Split(err.Error(), "\n"), len(tc.errs))
		})
	}
}

const manifest = `# ocb (go.opentelemetry.io/collector/cmd/builder v0.162.0) manifest
dist:
  name: x
receivers:
  - gomod: github.com/bpfprofiler/bpfprofiler v0.0.0
    path: .
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v0.162.0
processors:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/processor/resourceprocessor v0.162.0
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider v1.68.0
`

func TestManifest(t *testing.T) {
	mods, err := ManifestModules("m.yaml", []byte(manifest))
	require.NoError(t, err)
	assert.Equal(t, []Module{
		{Path: "github.com/bpfprofiler/bpfprofiler", Version: "v0.0.0", Source: "m.yaml"},
		{Path: "go.opentelemetry.io/collector/receiver/otlpreceiver", Version: "v0.162.0", Source: "m.yaml"},
		{Path: "github.com/open-telemetry/opentelemetry-collector-contrib/processor/resourceprocessor", Version: "v0.162.0", Source: "m.yaml"},
		{Path: "go.opentelemetry.io/collector/confmap/provider/envprovider", Version: "v1.68.0", Source: "m.yaml"},
	}, mods)
	assert.Error(t, rel.Check(mods))

	rewritten := rel.RewriteManifest([]byte(manifest))
	mods, err = ManifestModules("m.yaml", rewritten)
	require.NoError(t, err)
	require.NoError(t, rel.Check(mods))
	assert.Contains(t, string(rewritten), "cmd/builder v0.165.0) manifest")
	assert.Contains(t, string(rewritten), "bpfprofiler v0.0.0\n    path: .")
	assert.Contains(t, string(rewritten), "resourceprocessor v0.165.1\n")
	assert.Contains(t, string(rewritten), "envprovider v1.71.0\n")

	_, err = ManifestModules("bad.yaml", []byte("receivers:\n  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver\n"))
	assert.ErrorContains(t, err, `bad.yaml: receivers[0]::gomod: want "module version"`)
}

func TestImage(t *testing.T) {
	ds := []byte("      containers:\n        - name: otelcol\n          image: ghcr.io/example/otelcol-bpfprofiler:0.1.0-otelcol-v0.162.0\n")
	assert.ErrorContains(t, rel.CheckImage("ds.yaml", ds), "ds.yaml: the image is tagged v0.162.0, the release is v0.165.0")
	require.NoError(t, rel.CheckImage("ds.yaml", rel.RewriteImage(ds)))
	assert.Contains(t, string(rel.RewriteImage(ds)), "image: ghcr.io/example/otelcol-bpfprofiler:0.1.0-otelcol-v0.165.0\n")
	assert.ErrorContains(t, rel.CheckImage("ds.yaml", []byte("image: x:latest\n")), "no image tagged")
}

func TestParseListModules(t *testing.T) {
	out := "github.com/bpfprofiler/bpfprofiler\ngo.opentelemetry.io/collector/pdata v1.71.0\nexample.com/r v1.0.0 => ../r\n"
	assert.Equal(t, []Module{
		{Path: "go.opentelemetry.io/collector/pdata", Version: "v1.71.0", Source: "s"},
		{Path: "example.com/r", Version: "v1.0.0", Source: "s"},
	}, ParseListModules("s", []byte(out)))
}

// The repository itself: go.mod and everything it pulls in, ocb's manifest,
// the e2e user manifest and mdatagen's module at collector-release.mk's
// release.
func TestRepositoryAtOneRelease(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	require.NoError(t, Check("../.."))
}
