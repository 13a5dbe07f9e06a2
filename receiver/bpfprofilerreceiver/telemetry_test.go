package bpfprofilerreceiver

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
)

// metadataFile is the part of metadata.yaml the telemetry is checked against.
type metadataFile struct {
	Attributes map[string]struct {
		NameOverride string   `yaml:"name_override"`
		Description  string   `yaml:"description"`
		Enum         []string `yaml:"enum"`
	} `yaml:"attributes"`
	Telemetry struct {
		Metrics map[string]struct {
			Attributes []string `yaml:"attributes"`
		} `yaml:"metrics"`
	} `yaml:"telemetry"`
}

func readMetadata(t *testing.T) metadataFile {
	t.Helper()
	b, err := os.ReadFile("metadata.yaml")
	require.NoError(t, err)
	var md metadataFile
	require.NoError(t, yaml.Unmarshal(b, &md))
	return md
}

// metadata.yaml (and so documentation.md, generated from it) documents
// exactly the attribute values the code emits: a reason added in the code
// and not here, or documented and never emitted, fails.
func TestTelemetryAttributeValuesDocumented(t *testing.T) {
	md := readMetadata(t)
	emitted := emittedAttributeValues()
	for name, attr := range md.Attributes {
		if len(attr.Enum) == 0 {
			continue
		}
		values, ok := emitted[name]
		if !assert.True(t, ok, "metadata.yaml attribute %s: the code emits no values for it", name) {
			continue
		}
		assert.ElementsMatch(t, attr.Enum, values, "metadata.yaml attribute %s: enum vs values the code emits", name)
		// Reasons are explained value by value.
		if strings.HasSuffix(name, "reason") {
			for _, v := range values {
				assert.Contains(t, attr.Description, v+":", "metadata.yaml attribute %s does not explain %q", name, v)
			}
		}
	}
	for name := range emitted {
		_, ok := md.Attributes[name]
		assert.True(t, ok, "the code emits attribute %s, metadata.yaml does not declare it", name)
	}

	// The keys the code writes are the documented names.
	keys := map[string]string{}
	for name, attr := range md.Attributes {
		key := name
		if attr.NameOverride != "" {
			key = attr.NameOverride
		}
		keys[name] = key
	}
	for _, key := range []string{attrKind, attrSignal, attrStack, attrReason, attrkey.ProbeID} {
		assert.True(t, slices.Contains(slices.Collect(maps.Values(keys)), key), "attribute key %q is not in metadata.yaml", key)
	}
	for _, metric := range []string{"bpfprofiler_samples_lost", "bpfprofiler_stacks_lost", "bpfprofiler_probe_records_dropped"} {
		assert.Contains(t, md.Telemetry.Metrics[metric].Attributes, map[string]string{
			"bpfprofiler_samples_lost":          "sample_loss_reason",
			"bpfprofiler_stacks_lost":           "stack_loss_reason",
			"bpfprofiler_probe_records_dropped": "probe_drop_reason",
		}[metric], "%s reasons", metric)
	}
}

// The README's telemetry section names every metric and every reason.
func TestReadmeNamesEveryReason(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	readme := string(b)
	md := readMetadata(t)
	for name := range md.Telemetry.Metrics {
		assert.True(t, strings.Contains(readme, "otelcol_"+name), "README.md does not name metric %s", name)
	}
	for name, values := range emittedAttributeValues() {
		for _, v := range values {
			assert.True(t, strings.Contains(readme, "`"+v+"`"), "README.md does not name %s value %q", name, v)
		}
	}
}
