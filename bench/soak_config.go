package main

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// soakCollectorYAML is the configuration the DaemonSet ships (shipped:
// deploy/kubernetes/configmap.yaml's collector.yaml) as the soak runs it:
// off-CPU profiling on too (min_block 1ms), the node's files at / (no /host
// here), its own metrics on 127.0.0.1:metricsPort. Its exporters keep
// sending to ${env:OTLP_ENDPOINT}.
func soakCollectorYAML(shipped string, metricsPort int) (string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(shipped), &cfg); err != nil {
		return "", fmt.Errorf("the shipped collector configuration: %w", err)
	}
	receiver, err := yamlMapAt(cfg, "receivers", "bpfprofiler")
	if err != nil {
		return "", err
	}
	receiver["off_cpu"] = map[string]any{"enabled": true, "min_block": "1ms"}
	receiver["kubernetes"] = map[string]any{"host_root": "/"}
	metrics, err := yamlMapAt(cfg, "service", "telemetry", "metrics")
	if err != nil {
		return "", err
	}
	metrics["readers"] = []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
		"prometheus": map[string]any{"host": "127.0.0.1", "port": metricsPort}}}}}
	out, err := yaml.Marshal(cfg)
	return string(out), err
}

// yamlMapAt returns the mapping at path in m.
func yamlMapAt(m map[string]any, path ...string) (map[string]any, error) {
	for i, key := range path {
		next, ok := m[key].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("the shipped collector configuration has no mapping %v", path[:i+1])
		}
		m = next
	}
	return m, nil
}
