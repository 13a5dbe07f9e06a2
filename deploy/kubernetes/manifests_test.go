package kubernetes_test

import (
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The parts of a DaemonSet the receiver relies on.
type daemonSet struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Template struct {
			Spec struct {
				HostPID                      bool        `yaml:"hostPID"`
				AutomountServiceAccountToken *bool       `yaml:"automountServiceAccountToken"`
				Containers                   []container `yaml:"containers"`
				Volumes                      []struct {
					Name     string `yaml:"name"`
					HostPath *struct {
						Path string `yaml:"path"`
					} `yaml:"hostPath"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	SecurityContext struct {
		Privileged   bool `yaml:"privileged"`
		Capabilities struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	Resources struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type configMap struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
}

func decodeFile(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	require.NoError(t, yaml.NewDecoder(strings.NewReader(string(b))).Decode(v), name)
}

func TestDaemonSet(t *testing.T) {
	var ds daemonSet
	decodeFile(t, "daemonset.yaml", &ds)
	require.Equal(t, "DaemonSet", ds.Kind)
	pod := ds.Spec.Template.Spec
	assert.True(t, pod.HostPID, "hostPID")
	require.NotNil(t, pod.AutomountServiceAccountToken)
	assert.False(t, *pod.AutomountServiceAccountToken, "no API token needed")
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	assert.Contains(t, c.Args, "--feature-gates=service.profilesSupport")
	assert.Contains(t, c.Args, "--config=/conf/collector.yaml")

	sc := c.SecurityContext
	assert.False(t, sc.Privileged)
	assert.Equal(t, []string{"ALL"}, sc.Capabilities.Drop)
	// The set README.md documents for profiles, plus DAC_READ_SEARCH: as uid
	// 0 the collector reads root's private files, not other uids'. No
	// SYS_ADMIN: configmap.yaml declares no probes.
	assert.ElementsMatch(t, []string{"BPF", "PERFMON", "SYS_PTRACE", "SYSLOG", "DAC_READ_SEARCH"}, sc.Capabilities.Add)
	assert.NotEmpty(t, c.Resources.Limits["memory"])

	fieldRefs, values := map[string]string{}, map[string]string{}
	for _, e := range c.Env {
		values[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fieldRefs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	assert.Equal(t, "metadata.name", fieldRefs["POD_NAME"])
	assert.Equal(t, "metadata.namespace", fieldRefs["POD_NAMESPACE"])
	assert.Equal(t, "metadata.uid", fieldRefs["POD_UID"])
	assert.Equal(t, "spec.nodeName", fieldRefs["NODE_NAME"])
	assert.NotEmpty(t, values["OTLP_ENDPOINT"], "the exporter endpoint of configmap.yaml")

	// Every host directory is mounted read-only at the same path below /host.
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		assert.True(t, m.ReadOnly, "mount %s read-only", m.Name)
		if p, ok := hostPaths[m.Name]; ok {
			assert.Equal(t, path.Join("/host", p), m.MountPath, m.Name)
			mounted[p] = true
		}
	}
	assert.Len(t, mounted, len(hostPaths), "every hostPath volume is mounted")
	for _, dir := range []string{
		"/run/containerd/io.containerd.runtime.v2.task/k8s.io",
		"/run/containers/storage/overlay-containers",
		"/var/lib/docker/containers",
		"/sys/fs/cgroup",
	} {
		assert.True(t, mounted[dir], "host directory %s mounted", dir)
	}
	for _, p := range hostPaths {
		assert.NotContains(t, []string{"/", "/run", "/run/containerd", "/var/run"}, p, "no runtime socket directory")
	}
}

func TestConfigMap(t *testing.T) {
	var cm configMap
	decodeFile(t, "configmap.yaml", &cm)
	require.Equal(t, "ConfigMap", cm.Kind)

	var ds daemonSet
	decodeFile(t, "daemonset.yaml", &ds)
	var configVolume string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			configVolume = v.ConfigMap.Name
		}
	}
	assert.Equal(t, cm.Metadata.Name, configVolume, "the DaemonSet mounts this ConfigMap")

	text, ok := cm.Data["collector.yaml"]
	require.True(t, ok, "collector.yaml key")
	var cfg struct {
		Receivers struct {
			Bpfprofiler struct {
				Kubernetes struct {
					HostRoot string `yaml:"host_root"`
				} `yaml:"kubernetes"`
			} `yaml:"bpfprofiler"`
		} `yaml:"receivers"`
		Exporters map[string]struct {
			Endpoint string `yaml:"endpoint"`
			Timeout  string `yaml:"timeout"`
		} `yaml:"exporters"`
		Service struct {
			Pipelines map[string]struct {
				Receivers []string `yaml:"receivers"`
				Exporters []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(text), &cfg))
	assert.Equal(t, "/host", cfg.Receivers.Bpfprofiler.Kubernetes.HostRoot)
	require.Contains(t, cfg.Exporters, "otlp_grpc")
	assert.Equal(t, "${env:OTLP_ENDPOINT}", cfg.Exporters["otlp_grpc"].Endpoint)
	require.Contains(t, cfg.Service.Pipelines, "profiles")
	assert.Equal(t, []string{"bpfprofiler"}, cfg.Service.Pipelines["profiles"].Receivers)
	for name, p := range cfg.Service.Pipelines {
		for _, e := range p.Exporters {
			require.Contains(t, cfg.Exporters, e, "pipeline %s", name)
			// A backend slower than the default 5 s would get each request
			// again (test/e2e TestSlowBackendNoDuplicates).
			timeout, err := time.ParseDuration(cfg.Exporters[e].Timeout)
			if assert.NoError(t, err, "exporters::%s::timeout", e) {
				assert.GreaterOrEqual(t, timeout, 30*time.Second, "exporters::%s::timeout", e)
			}
		}
	}
}
