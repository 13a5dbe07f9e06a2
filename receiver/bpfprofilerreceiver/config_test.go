package bpfprofilerreceiver

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.yaml.in/yaml/v3"

	"github.com/bpfprofiler/bpfprofiler/internal/allocs"
	"github.com/bpfprofiler/bpfprofiler/internal/probes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	tests := []struct {
		id           component.ID
		expected     *Config
		errorMessage string
	}{
		{
			id:       component.NewID(metadata.Type),
			expected: createDefaultConfig().(*Config),
		},
		{
			id: component.NewIDWithName(metadata.Type, "custom"),
			expected: &Config{
				ReportInterval:   5 * time.Second,
				Targets:          TargetsConfig{PIDs: []uint32{1}, Executables: []string{"/usr/bin/.*"}},
				CPU:              CPUConfig{Enabled: true, SamplesPerSecond: 99},
				Pprof:            PprofConfig{Directory: "/tmp/profiles"},
				OffCPU:           OffCPUConfig{MinBlock: time.Millisecond, Mechanism: "auto"},
				Memory:           MemoryConfig{MaxLive: allocs.DefaultMaxLive, USDTInterval: allocs.DefaultUSDTInterval},
				Kubernetes:       K8sConfig{HostRoot: "/host"},
				ThreadAttributes: []string{"thread.id", "thread.name"},
				PerfMaps:         PerfMapsConfig{MaxSizeMiB: 32},
				Unwinding:        UnwindingConfig{Method: "frame_pointer", TableMemoryMiB: 256},
				TraceContext:     TraceContextConfig{Enabled: false},
				GoLabels:         GoLabelsConfig{Enabled: false},
			},
		},
		{id: component.NewIDWithName(metadata.Type, "zero_rate"), errorMessage: "cpu::samples_per_second: must be 1..10000, got 0"},
		{id: component.NewIDWithName(metadata.Type, "too_fast"), errorMessage: "cpu::samples_per_second: must be 1..10000, got 20000"},
		{id: component.NewIDWithName(metadata.Type, "short_interval"), errorMessage: "report_interval: must be between 100ms and 1h0m0s, got 1ms"},
		{id: component.NewIDWithName(metadata.Type, "bad_regexp"), errorMessage: `targets::executables[0]: invalid regexp "("`},
		{id: component.NewIDWithName(metadata.Type, "zero_pid"), errorMessage: "targets::pids[0]: must be a positive pid"},
		{id: component.NewIDWithName(metadata.Type, "nothing_enabled"), errorMessage: "cpu::enabled, off_cpu::enabled, memory::go, memory::usdt, probes: nothing to do"},
		{
			id: component.NewIDWithName(metadata.Type, "memory_usdt"),
			expected: func() *Config {
				c := createDefaultConfig().(*Config)
				c.CPU.Enabled = false
				c.Memory.USDT, c.Memory.USDTInterval = true, 65536
				return c
			}(),
		},
		{id: component.NewIDWithName(metadata.Type, "zero_usdt_interval"), errorMessage: "memory::usdt_interval: must be 1..4294967296, got 0"},
		{id: component.NewIDWithName(metadata.Type, "huge_usdt_interval"), errorMessage: "memory::usdt_interval: must be 1..4294967296, got 8589934592"},
		{
			id: component.NewIDWithName(metadata.Type, "off_cpu_only"),
			expected: &Config{
				ReportInterval:   10 * time.Second,
				CPU:              CPUConfig{Enabled: false, SamplesPerSecond: 19},
				OffCPU:           OffCPUConfig{Enabled: true, MinBlock: 5 * time.Millisecond, Mechanism: "switch_out"},
				Memory:           MemoryConfig{MaxLive: allocs.DefaultMaxLive, USDTInterval: allocs.DefaultUSDTInterval},
				Kubernetes:       K8sConfig{HostRoot: "/"},
				ThreadAttributes: []string{"thread.id", "thread.name"},
				PerfMaps:         PerfMapsConfig{MaxSizeMiB: 8},
				Unwinding:        UnwindingConfig{Method: "auto", TableMemoryMiB: 64},
				TraceContext:     TraceContextConfig{Enabled: true},
				GoLabels:         GoLabelsConfig{Enabled: true},
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "probes"),
			expected: &Config{
				ReportInterval: 10 * time.Second,
				CPU:            CPUConfig{SamplesPerSecond: 19},
				OffCPU:         OffCPUConfig{MinBlock: time.Millisecond, Mechanism: "auto"},
				Memory:         MemoryConfig{MaxLive: allocs.DefaultMaxLive, USDTInterval: allocs.DefaultUSDTInterval},
				Probes: []ProbeConfig{
					{
						ID: "node.callback_scope", FileMatch: "/node$",
						EntrySymbol:    "node::InternalCallbackScope::InternalCallbackScope(...)",
						ExitSymbol:     "node::InternalCallbackScope::~InternalCallbackScope()",
						MainThreadOnly: true, MinDuration: 10 * time.Millisecond,
					},
					{ID: "app.handle", FileMatch: "/myapp$", Symbol: "main.handle", MaxPerSecond: ptr(uint64(100))},
					{ID: "app.unlimited", FileMatch: "/myapp$", Symbol: "main.loop", MaxPerSecond: ptr(uint64(0))},
					{
						ID: "pg.query", FileMatch: "/postgres$",
						USDTEntry: "postgresql:query__start", USDTExit: "postgresql:query__done", MinDuration: 5 * time.Millisecond,
					},
				},
				Kubernetes:       K8sConfig{HostRoot: "/"},
				ThreadAttributes: []string{"thread.id", "thread.name"},
				PerfMaps:         PerfMapsConfig{MaxSizeMiB: 8},
				Unwinding:        UnwindingConfig{Method: "auto", TableMemoryMiB: 64},
				TraceContext:     TraceContextConfig{Enabled: true},
				GoLabels:         GoLabelsConfig{Enabled: true},
			},
		},
		{id: component.NewIDWithName(metadata.Type, "negative_min_block"), errorMessage: "off_cpu::min_block: must not be negative, got -1ms"},
		{
			id: component.NewIDWithName(metadata.Type, "thread_name_only"),
			expected: func() *Config {
				c := createDefaultConfig().(*Config)
				c.ThreadAttributes = []string{"thread.name"}
				return c
			}(),
		},
		{id: component.NewIDWithName(metadata.Type, "bad_thread_attribute"), errorMessage: `thread_attributes[1]: want thread.id or thread.name, got "thread.cpu"`},
		{
			id: component.NewIDWithName(metadata.Type, "pod_on_samples"),
			expected: func() *Config {
				c := createDefaultConfig().(*Config)
				c.ResourceAttributesOnSamples = []string{"k8s.namespace.name", "k8s.pod.name", "k8s.container.name", "container.id", "host.name"}
				return c
			}(),
		},
		{id: component.NewIDWithName(metadata.Type, "bad_resource_on_samples"), errorMessage: `resource_attributes_on_samples[1]: want one of host.name, container.id, container.runtime.name, k8s.pod.uid, k8s.pod.name, k8s.namespace.name, k8s.container.name, got "process.pid"`},
		{id: component.NewIDWithName(metadata.Type, "twice_resource_on_samples"), errorMessage: `resource_attributes_on_samples[1]: host.name is listed twice`},
		{id: component.NewIDWithName(metadata.Type, "bad_mechanism"), errorMessage: `off_cpu::mechanism: want auto, task_work or switch_out, got "kprobe"`},
		{id: component.NewIDWithName(metadata.Type, "bad_container_id"), errorMessage: `targets::container_ids[0]: want 12 to 64 lowercase hex digits, got "abc"`},
		{id: component.NewIDWithName(metadata.Type, "bad_pod_uid"), errorMessage: `targets::k8s_pod_uids[0]: want a pod uid`},
		{id: component.NewIDWithName(metadata.Type, "bad_unwinding"), errorMessage: `unwinding::method: want auto or frame_pointer, got "dwarf"`},
		{id: component.NewIDWithName(metadata.Type, "zero_table_memory"), errorMessage: "unwinding::table_memory_mib: must be 1..4096, got 0"},
		{id: component.NewIDWithName(metadata.Type, "zero_perf_map_size"), errorMessage: "perf_maps::max_size_mib: must be 1..1024, got 0"},
		{id: component.NewIDWithName(metadata.Type, "huge_perf_map_size"), errorMessage: "perf_maps::max_size_mib: must be 1..1024, got 4096"},
		{id: component.NewIDWithName(metadata.Type, "link_without_samples"), errorMessage: "probes[0]::link_samples: there are no samples to link: enable cpu or off_cpu"},
		{id: component.NewIDWithName(metadata.Type, "relative_host_root"), errorMessage: `kubernetes::host_root: must be an absolute path, got "host"`},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			if tt.errorMessage != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.errorMessage)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.expected, cfg)
		})
	}
}

func TestUnknownKeyRejected(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub(component.NewIDWithName(metadata.Type, "unknown_key").String())
	require.NoError(t, err)
	err = sub.Unmarshal(NewFactory().CreateDefaultConfig())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sample_rate")
}

func TestValidateJoinsAllErrors(t *testing.T) {
	cfg := &Config{
		ReportInterval: 0,
		Targets:        TargetsConfig{PIDs: []uint32{0}, Executables: []string{""}},
		CPU:            CPUConfig{Enabled: true, SamplesPerSecond: 0},
	}
	err := cfg.Validate()
	require.Error(t, err)
	for _, key := range []string{"report_interval", "targets::pids[0]", "targets::executables[0]", "cpu::samples_per_second"} {
		assert.Contains(t, err.Error(), key)
	}
}

func TestProbeValidationNamesEveryKey(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub(component.NewIDWithName(metadata.Type, "bad_probes").String())
	require.NoError(t, err)
	cfg := NewFactory().CreateDefaultConfig()
	require.NoError(t, sub.Unmarshal(cfg))
	err = confmap.Validate(cfg)
	require.Error(t, err)
	for _, want := range []string{
		"probes[0]::id: must not be empty",
		"probes[0]::file_match: invalid regexp",
		"probes[1]: set one of symbol, entry_symbol+exit_symbol or usdt_entry+usdt_exit",
		"probes[2]: set one of symbol, entry_symbol+exit_symbol or usdt_entry+usdt_exit, not symbol and entry_symbol+exit_symbol",
		`probes[2]::id: "b" already used by probe 1`,
		"probes[3]::exit_symbol: must differ from the entry symbol",
		"probes[3]::min_duration: must not be negative",
		"probes[4]::max_per_second: must be 0 (unlimited) to 1000000, got 2000000",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// usdt_entry and usdt_exit: both or neither, provider:name each, and no
// symbol key beside them.
func TestProbeUSDTValidation(t *testing.T) {
	usdt := func(entry, exit string) ProbeConfig {
		return ProbeConfig{ID: "pg", FileMatch: "/postgres$", USDTEntry: entry, USDTExit: exit}
	}
	tests := []struct {
		name  string
		probe ProbeConfig
		want  []string // "": valid
	}{
		{name: "pair", probe: usdt("postgresql:query__start", "postgresql:query__done")},
		{name: "entry only", probe: usdt("a:b", ""), want: []string{"probes[1]::usdt_exit: must not be empty: the scope needs an exit probe too"}},
		{name: "exit only", probe: usdt("", "a:b"), want: []string{"probes[1]::usdt_entry: must not be empty: the scope needs an entry probe too"}},
		{name: "no provider", probe: usdt(":b", "a:c"), want: []string{`probes[1]::usdt_entry: want provider:name, got ":b"`}},
		{name: "no name", probe: usdt("a:b", "a"), want: []string{`probes[1]::usdt_exit: want provider:name, got "a"`}},
		{name: "space", probe: usdt("a :b", "a:c"), want: []string{`probes[1]::usdt_entry: "a :b": a provider or name has no spaces`}},
		{name: "same probe", probe: usdt("a:b", "a:b"), want: []string{"probes[1]::usdt_exit: must differ from the entry probe"}},
		{
			name: "with symbol", probe: func() ProbeConfig { p := usdt("a:b", "a:c"); p.Symbol = "f"; return p }(),
			want: []string{"probes[1]: set one of symbol, entry_symbol+exit_symbol or usdt_entry+usdt_exit, not symbol and usdt_entry+usdt_exit"},
		},
		{
			name: "with exit symbol", probe: func() ProbeConfig { p := usdt("a:b", ""); p.ExitSymbol = "g"; return p }(),
			want: []string{"probes[1]: set one of symbol, entry_symbol+exit_symbol or usdt_entry+usdt_exit, not entry_symbol+exit_symbol and usdt_entry+usdt_exit"},
		},
		{name: "nothing", probe: usdt("", ""), want: []string{"probes[1]: set one of symbol, entry_symbol+exit_symbol or usdt_entry+usdt_exit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			cfg.Probes = []ProbeConfig{{ID: "ok", FileMatch: "x", Symbol: "f"}, tt.probe}
			err := cfg.Validate()
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			msgs := strings.Split(err.Error(), "\n")
			assert.ElementsMatch(t, tt.want, msgs)
		})
	}
}

// attributes: USDT probes only, at most 4, each a valid name and argN or
// str(argN) (N 0 to 11); every problem names its key.
func TestProbeAttributesValidation(t *testing.T) {
	usdt := func(attrs map[string]string) ProbeConfig {
		return ProbeConfig{ID: "pg", FileMatch: "/postgres$", USDTEntry: "p:start", USDTExit: "p:done", Attributes: attrs}
	}
	tests := []struct {
		name  string
		probe ProbeConfig
		want  []string // "": valid
	}{
		{name: "integer and string", probe: usdt(map[string]string{"db.query.text": "str(arg0)", "rows": "arg11", "n": " arg3 "})},
		{name: "none", probe: usdt(map[string]string{})},
		{name: "not an argument", probe: usdt(map[string]string{"q": "query"}),
			want: []string{`probes[1]::attributes::q: want argN or str(argN) (N 0 to 11), got "query"`}},
		{name: "past arg11", probe: usdt(map[string]string{"q": "arg12"}), want: []string{"probes[1]::attributes::q: argument 12: want 0 to 11"}},
		{name: "leading zero", probe: usdt(map[string]string{"q": "str(arg01)"}), want: []string{"probes[1]::attributes::q: argument 01: want 0 to 11"}},
		{name: "unclosed str", probe: usdt(map[string]string{"q": "str(arg0"}),
			want: []string{`probes[1]::attributes::q: want argN or str(argN) (N 0 to 11), got "str(arg0"`}},
		{name: "empty name", probe: usdt(map[string]string{"": "arg0"}), want: []string{"probes[1]::attributes::: an attribute name must not be empty"}},
		{name: "space in name", probe: usdt(map[string]string{"a b": "arg0"}),
			want: []string{`probes[1]::attributes::a b: attribute name "a b": no spaces or control characters`}},
		{name: "the record's own", probe: usdt(map[string]string{"probe.id": "arg0", "thread.name": "arg1"}), want: []string{
			`probes[1]::attributes::probe.id: attribute name "probe.id": probe.* are the record's own`,
			`probes[1]::attributes::thread.name: attribute name "thread.name": thread.* are the record's own`,
		}},
		{name: "five", probe: usdt(map[string]string{"a": "arg0", "b": "arg1", "c": "arg2", "d": "arg3", "e": "arg4"}),
			want: []string{"probes[1]::attributes: at most 4, got 5"}},
		{name: "symbol probe", probe: ProbeConfig{ID: "f", FileMatch: "x", Symbol: "f", Attributes: map[string]string{"a": "arg0"}},
			want: []string{"probes[1]::attributes: only USDT probes (usdt_entry, usdt_exit) have arguments"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			cfg.Probes = []ProbeConfig{{ID: "ok", FileMatch: "x", Symbol: "f"}, tt.probe}
			err := cfg.Validate()
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ElementsMatch(t, tt.want, strings.Split(err.Error(), "\n"))
		})
	}
}

// An unset max_per_second is the default limit; 0 is no limit.
func TestProbeSpecsRateLimit(t *testing.T) {
	cfg := &Config{Probes: []ProbeConfig{
		{ID: "a", FileMatch: "x", Symbol: "f"},
		{ID: "b", FileMatch: "x", Symbol: "f", MaxPerSecond: ptr(uint64(0))},
		{ID: "c", FileMatch: "x", Symbol: "f", MaxPerSecond: ptr(uint64(250))},
	}}
	var got []uint64
	for _, s := range cfg.probeSpecs() {
		got = append(got, s.MaxPerSecond)
	}
	assert.Equal(t, []uint64{probes.DefaultMaxPerSecond, 0, 250}, got)
}

func ptr[T any](v T) *T { return &v }

// link_samples defaults to true; stacks to false.
func TestProbeSpecsLinkingAndStacks(t *testing.T) {
	cfg := &Config{Probes: []ProbeConfig{
		{ID: "a", FileMatch: "x", Symbol: "f"},
		{ID: "b", FileMatch: "x", Symbol: "f", LinkSamples: ptr(false), Stacks: true},
		{ID: "c", FileMatch: "x", Symbol: "f", LinkSamples: ptr(true)},
	}}
	var links, stacks []bool
	for _, s := range cfg.probeSpecs() {
		links, stacks = append(links, s.LinkSamples), append(stacks, s.EntryStack)
	}
	assert.Equal(t, []bool{true, false, true}, links)
	assert.Equal(t, []bool{false, true, false}, stacks)
}

// The receiver block of the DaemonSet's ConfigMap is a valid configuration
// of this receiver, every key known.
func TestShippedConfigMapValid(t *testing.T) {
	const file = "deploy/kubernetes/configmap.yaml"
	var collector struct {
		Receivers map[string]map[string]any `yaml:"receivers"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(testutil.ShippedCollectorYAML(t)), &collector), file)
	block, ok := collector.Receivers[metadata.Type.String()]
	require.True(t, ok, "%s: no receivers::%s", file, metadata.Type)
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	require.NoError(t, confmap.NewFromStringMap(block).Unmarshal(cfg), file)
	require.NoError(t, confmap.Validate(cfg), file)
	assert.Equal(t, "/host", cfg.Kubernetes.HostRoot)
	assert.Contains(t, cfg.ResourceAttributesOnSamples, "k8s.pod.name", "Pyroscope's pod label")
}

// A USDT probe's pair reaches the probes package and its records' names.
func TestProbeSpecsUSDT(t *testing.T) {
	cfg := &Config{Probes: []ProbeConfig{{ID: "pg", FileMatch: "x", USDTEntry: "postgresql:query__start", USDTExit: "postgresql:query__done"}}}
	specs := cfg.probeSpecs()
	require.Len(t, specs, 1)
	assert.Equal(t, "postgresql:query__start", specs[0].EntryUSDT)
	assert.Equal(t, "postgresql:query__done", specs[0].ExitUSDT)
	assert.Empty(t, specs[0].EntrySymbol)
	assert.False(t, specs[0].Return)
	names := scopeNames(specs)
	assert.Equal(t, "postgresql:query__start", names[0].EntryUSDT)
	assert.Equal(t, "postgresql:query__done", names[0].ExitUSDT)
	assert.Empty(t, names[0].EntrySymbol)
}
