package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/bpfprofiler/bpfprofiler/internal/allocs"
	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/offcpu"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/probes"
)

// Config is the receiver's configuration; keys follow shared/DESIGN.md.
type Config struct {
	// ReportInterval is how often aggregated data is flushed into the pipeline.
	ReportInterval time.Duration   `mapstructure:"report_interval"`
	Targets        TargetsConfig   `mapstructure:"targets"`
	CPU            CPUConfig       `mapstructure:"cpu"`
	OffCPU         OffCPUConfig    `mapstructure:"off_cpu"`
	Memory         MemoryConfig    `mapstructure:"memory"`
	Probes         []ProbeConfig   `mapstructure:"probes"`
	Pprof          PprofConfig     `mapstructure:"pprof"`
	Kubernetes     K8sConfig       `mapstructure:"kubernetes"`
	PerfMaps       PerfMapsConfig  `mapstructure:"perf_maps"`
	Unwinding      UnwindingConfig `mapstructure:"unwinding"`
	// TraceContext reads what OpenTelemetry SDKs publish for profilers.
	TraceContext TraceContextConfig `mapstructure:"trace_context"`
	// GoLabels reads Go programs' goroutine labels (runtime/pprof).
	GoLabels GoLabelsConfig `mapstructure:"go_labels"`
	// ThreadAttributes are the attributes of its thread each sample of an
	// OTLP profile carries: thread.id, thread.name, both or none.
	ThreadAttributes []string `mapstructure:"thread_attributes"`
	// ResourceAttributesOnSamples are resource attributes (host.name,
	// container.id, container.runtime.name, k8s.*) each sample carries too,
	// for backends that read samples' attributes but not the resource's.
	ResourceAttributesOnSamples []string `mapstructure:"resource_attributes_on_samples"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// TargetsConfig restricts which processes are profiled; empty means all.
type TargetsConfig struct {
	// PIDs as the collector sees them.
	PIDs []uint32 `mapstructure:"pids"`
	// ContainerIDs are full 64-hex container ids or unique prefixes of at
	// least 12 hex digits.
	ContainerIDs []string `mapstructure:"container_ids"`
	// K8sPodUIDs are pod uids as Kubernetes shows them (with dashes).
	K8sPodUIDs []string `mapstructure:"k8s_pod_uids"`
	// Executables are regular expressions matched against the executable path.
	Executables []string `mapstructure:"executables"`
}

// CPUConfig configures on-CPU stack sampling.
type CPUConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// SamplesPerSecond is the sampling frequency per CPU.
	SamplesPerSecond uint64 `mapstructure:"samples_per_second"`
}

// OffCPUConfig configures off-CPU (blocked time) profiling.
type OffCPUConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// MinBlock drops blocks shorter than this, in BPF.
	MinBlock time.Duration `mapstructure:"min_block"`
	// Mechanism chooses how the user stack of a blocked thread is taken:
	// auto, task_work (Linux >= 6.18) or switch_out (every kernel).
	Mechanism string `mapstructure:"mechanism"`
}

// MemoryConfig configures heap profiles (alloc_objects, alloc_space,
// inuse_objects, inuse_space).
type MemoryConfig struct {
	// Go probes the allocation profiling hooks of Go executables: every Go
	// process that samples its allocations (runtime.MemProfileRate, on
	// unless the program never references runtime.MemProfile) gets the
	// four profiles, with no change to it.
	Go bool `mapstructure:"go"`
	// USDT probes the OpenTelemetry memory probes otel_memory:alloc and
	// otel_memory:free in every executable and shared library that
	// declares them (Linux 5.15+): native allocators' allocations, sampled
	// in the kernel about once per USDTInterval weighted bytes of a thread.
	USDT bool `mapstructure:"usdt"`
	// USDTInterval is the mean bytes between sampled otel_memory
	// allocations of a thread.
	USDTInterval uint64 `mapstructure:"usdt_interval"`
	// MaxLive bounds the sampled objects kept as live, across processes;
	// beyond it the oldest are dropped (counted and logged).
	MaxLive int `mapstructure:"max_live"`
}

// enabled says whether any heap profiles are asked for.
func (m MemoryConfig) enabled() bool { return m.Go || m.USDT }

// ProbeConfig declares one uprobe duration probe: Symbol (a function's
// entry and return), EntrySymbol and ExitSymbol (two different functions,
// e.g. a C++ constructor and destructor) or USDTEntry and USDTExit (two
// USDT probes, "provider:name"), in every executable or library whose path
// matches FileMatch.
type ProbeConfig struct {
	ID          string `mapstructure:"id"`
	FileMatch   string `mapstructure:"file_match"`
	Symbol      string `mapstructure:"symbol"`
	EntrySymbol string `mapstructure:"entry_symbol"`
	ExitSymbol  string `mapstructure:"exit_symbol"`
	USDTEntry   string `mapstructure:"usdt_entry"`
	USDTExit    string `mapstructure:"usdt_exit"`
	// Attributes name arguments of the USDTEntry probe its records carry:
	// attribute name -> "argN" (integer) or "str(argN)" (the string the
	// argument points at, bounded); see probes.ParseAttribute.
	Attributes     map[string]string `mapstructure:"attributes"`
	MainThreadOnly bool              `mapstructure:"main_thread_only"`
	MinDuration    time.Duration     `mapstructure:"min_duration"`
	// MaxPerSecond limits this probe's records, in BPF; unset means
	// probes.DefaultMaxPerSecond, 0 no limit.
	MaxPerSecond *uint64 `mapstructure:"max_per_second"`
	// LinkSamples links the CPU and off-CPU samples taken inside this
	// probe's scopes to the scopes' log records (and gives them probe.id).
	// Unset: true (it takes effect when the receiver profiles and is in a
	// logs pipeline).
	LinkSamples *bool `mapstructure:"link_samples"`
	// Stacks captures the user stack at each scope's entry and adds the
	// scope's duration to it in a probe_duration profile of the probe.
	Stacks bool `mapstructure:"stacks"`
}

// linksSamples reports whether p's samples are to be linked (if the
// receiver profiles).
func (p ProbeConfig) linksSamples() bool { return p.LinkSamples == nil || *p.LinkSamples }

// PprofConfig configures the optional pprof file output.
type PprofConfig struct {
	// Directory, when set, receives one gzipped pprof file per kind per report.
	Directory string `mapstructure:"directory"`
}

// K8sConfig says where the node's files are visible, for pod and container
// names read from the container runtime's state (no Kubernetes API is used).
type K8sConfig struct {
	// HostRoot is where the node's /run and /var/lib are mounted ("/host" in
	// the DaemonSet).
	HostRoot string `mapstructure:"host_root"`
}

// PerfMapsConfig bounds the reading of JIT perf maps (/tmp/perf-<pid>.map),
// files the profiled processes write.
type PerfMapsConfig struct {
	// MaxSizeMiB is the size above which a perf map is not read.
	MaxSizeMiB int64 `mapstructure:"max_size_mib"`
}

// TraceContextConfig turns the readers of OpenTelemetry SDKs' published
// context on or off: the process context (OTEP 4719), whose resource
// attributes name a process.
type TraceContextConfig struct {
	Enabled bool `mapstructure:"enabled"`
}

// GoLabelsConfig turns the reader of Go programs' goroutine labels
// (pprof.Do, SetGoroutineLabels) on or off: each sample of a goroutine
// with labels carries them as attributes and pprof labels.
type GoLabelsConfig struct {
	Enabled bool `mapstructure:"enabled"`
}

// UnwindingConfig chooses how user stacks are walked.
type UnwindingConfig struct {
	// Method: auto walks CPU and off-CPU stacks with unwind tables built
	// from the files' CFI (.eh_frame, .debug_frame) where a process's are
	// loaded, and with frame pointers elsewhere; frame_pointer only follows
	// frame pointers.
	Method string `mapstructure:"method"`
	// TableMemoryMiB bounds the kernel memory of the unwind tables (8 bytes
	// a row; node 20 takes 3 MiB, libjvm 1.5 MiB, libLLVM 7.5 MiB). Tables
	// are allocated as files are loaded, not up front; past the budget,
	// tables of files no process maps any more are evicted first, then a
	// file is walked with frame pointers (counted as space_full).
	TableMemoryMiB int64 `mapstructure:"table_memory_mib"`
}

// Unwinding methods.
const (
	unwindAuto         = "auto"
	unwindFramePointer = "frame_pointer"
)

const (
	minReportInterval   = 100 * time.Millisecond
	maxReportInterval   = time.Hour
	maxSamplesPerSecond = 10000
	maxPerfMapSizeMiB   = 1024
	maxTableMemoryMiB   = 4096
	maxUSDTInterval     = 1 << 32 // bpf/alloc.bpf.c's draw stays in 64 bits
)

var (
	containerIDPattern = regexp.MustCompile(`^[0-9a-f]{12,64}$`)
	podUIDPattern      = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config {
	return &Config{
		ReportInterval:   10 * time.Second,
		CPU:              CPUConfig{Enabled: true, SamplesPerSecond: 19},
		OffCPU:           OffCPUConfig{MinBlock: time.Millisecond, Mechanism: string(offcpu.MechanismAuto)},
		Memory:           MemoryConfig{MaxLive: allocs.DefaultMaxLive, USDTInterval: allocs.DefaultUSDTInterval},
		Kubernetes:       K8sConfig{HostRoot: "/"},
		PerfMaps:         PerfMapsConfig{MaxSizeMiB: 8},
		Unwinding:        UnwindingConfig{Method: unwindAuto, TableMemoryMiB: 64},
		TraceContext:     TraceContextConfig{Enabled: true},
		GoLabels:         GoLabelsConfig{Enabled: true},
		ThreadAttributes: []string{attrkey.ThreadID, attrkey.ThreadName},
	}
}

// threadAttributes turns thread_attributes into what pdata takes.
func (c *Config) threadAttributes() pdata.ThreadAttributes {
	return pdata.ThreadAttributes{
		ID:   slices.Contains(c.ThreadAttributes, attrkey.ThreadID),
		Name: slices.Contains(c.ThreadAttributes, attrkey.ThreadName),
	}
}

// Validate checks every key and reports all problems at once. It is pure:
// no defaults are filled and nothing outside the struct is read.
func (c *Config) Validate() error {
	var errs []error
	if c.ReportInterval < minReportInterval || c.ReportInterval > maxReportInterval {
		errs = append(errs, fmt.Errorf("report_interval: must be between %v and %v, got %v", minReportInterval, maxReportInterval, c.ReportInterval))
	}
	for i, pid := range c.Targets.PIDs {
		if pid == 0 {
			errs = append(errs, fmt.Errorf("targets::pids[%d]: must be a positive pid", i))
		}
	}
	for i, id := range c.Targets.ContainerIDs {
		if !containerIDPattern.MatchString(id) {
			errs = append(errs, fmt.Errorf("targets::container_ids[%d]: want 12 to 64 lowercase hex digits, got %q", i, id))
		}
	}
	for i, uid := range c.Targets.K8sPodUIDs {
		if !podUIDPattern.MatchString(uid) {
			errs = append(errs, fmt.Errorf("targets::k8s_pod_uids[%d]: want a pod uid like 0b5c1a7e-3f2d-4c8e-9a61-1234567890ab, got %q", i, uid))
		}
	}
	for i, expr := range c.Targets.Executables {
		if expr == "" {
			errs = append(errs, fmt.Errorf("targets::executables[%d]: must not be empty", i))
			continue
		}
		if _, err := regexp.Compile(expr); err != nil {
			errs = append(errs, fmt.Errorf("targets::executables[%d]: invalid regexp %q: %w", i, expr, err))
		}
	}
	if c.CPU.Enabled && (c.CPU.SamplesPerSecond < 1 || c.CPU.SamplesPerSecond > maxSamplesPerSecond) {
		errs = append(errs, fmt.Errorf("cpu::samples_per_second: must be 1..%d, got %d", maxSamplesPerSecond, c.CPU.SamplesPerSecond))
	}
	if c.OffCPU.MinBlock < 0 {
		errs = append(errs, fmt.Errorf("off_cpu::min_block: must not be negative, got %v", c.OffCPU.MinBlock))
	}
	if c.Memory.MaxLive <= 0 {
		errs = append(errs, fmt.Errorf("memory::max_live: must be positive, got %d", c.Memory.MaxLive))
	}
	if c.Memory.USDTInterval < 1 || c.Memory.USDTInterval > maxUSDTInterval {
		errs = append(errs, fmt.Errorf("memory::usdt_interval: must be 1..%d, got %d", uint64(maxUSDTInterval), c.Memory.USDTInterval))
	}
	if _, err := offcpu.ParseMechanism(c.OffCPU.Mechanism); err != nil {
		errs = append(errs, fmt.Errorf("off_cpu::mechanism: %w", err))
	}
	for i, p := range c.Probes {
		if p.LinkSamples != nil && *p.LinkSamples && !c.CPU.Enabled && !c.OffCPU.Enabled {
			errs = append(errs, fmt.Errorf("probes[%d]::link_samples: there are no samples to link: enable cpu or off_cpu", i))
		}
		if forms := p.scopeForms(); len(forms) > 1 {
			errs = append(errs, fmt.Errorf("probes[%d]: set one of %s, not %s", i, scopeFormsHint, strings.Join(forms, " and ")))
		}
	}
	errs = append(errs, c.probeErrors(probes.ValidateSpecs(c.probeSpecs()))...)
	if !c.CPU.Enabled && !c.OffCPU.Enabled && !c.Memory.enabled() && len(c.Probes) == 0 {
		errs = append(errs, errors.New("cpu::enabled, off_cpu::enabled, memory::go, memory::usdt, probes: nothing to do: enable cpu, off_cpu, memory::go or memory::usdt, or declare probes"))
	}
	if c.Unwinding.Method != unwindAuto && c.Unwinding.Method != unwindFramePointer {
		errs = append(errs, fmt.Errorf("unwinding::method: want %s or %s, got %q", unwindAuto, unwindFramePointer, c.Unwinding.Method))
	}
	if c.Unwinding.TableMemoryMiB < 1 || c.Unwinding.TableMemoryMiB > maxTableMemoryMiB {
		errs = append(errs, fmt.Errorf("unwinding::table_memory_mib: must be 1..%d, got %d", maxTableMemoryMiB, c.Unwinding.TableMemoryMiB))
	}
	if c.PerfMaps.MaxSizeMiB < 1 || c.PerfMaps.MaxSizeMiB > maxPerfMapSizeMiB {
		errs = append(errs, fmt.Errorf("perf_maps::max_size_mib: must be 1..%d, got %d", maxPerfMapSizeMiB, c.PerfMaps.MaxSizeMiB))
	}
	for i, a := range c.ThreadAttributes {
		if a != attrkey.ThreadID && a != attrkey.ThreadName {
			errs = append(errs, fmt.Errorf("thread_attributes[%d]: want %s or %s, got %q", i, attrkey.ThreadID, attrkey.ThreadName, a))
		} else if slices.Index(c.ThreadAttributes, a) != i {
			errs = append(errs, fmt.Errorf("thread_attributes[%d]: %s is listed twice", i, a))
		}
	}
	for i, a := range c.ResourceAttributesOnSamples {
		if !slices.Contains(attrkey.ResourceKeys, a) {
			errs = append(errs, fmt.Errorf("resource_attributes_on_samples[%d]: want one of %s, got %q",
				i, strings.Join(attrkey.ResourceKeys, ", "), a))
		} else if slices.Index(c.ResourceAttributesOnSamples, a) != i {
			errs = append(errs, fmt.Errorf("resource_attributes_on_samples[%d]: %s is listed twice", i, a))
		}
	}
	if !filepath.IsAbs(c.Kubernetes.HostRoot) {
		errs = append(errs, fmt.Errorf("kubernetes::host_root: must be an absolute path, got %q", c.Kubernetes.HostRoot))
	}
	return errors.Join(errs...)
}

// probeSpecs turns probes into the specs of the probes package, in order
// (a record's probe index is its position here).
func (c *Config) probeSpecs() []probes.Spec {
	specs := make([]probes.Spec, 0, len(c.Probes))
	for _, p := range c.Probes {
		spec := probes.Spec{
			ID:             p.ID,
			FileMatch:      p.FileMatch,
			EntrySymbol:    p.EntrySymbol,
			ExitSymbol:     p.ExitSymbol,
			EntryUSDT:      p.USDTEntry,
			ExitUSDT:       p.USDTExit,
			Attributes:     p.Attributes,
			MainThreadOnly: p.MainThreadOnly,
			MinDuration:    p.MinDuration,
			MaxPerSecond:   probes.DefaultMaxPerSecond,
			LinkSamples:    p.linksSamples(),
			EntryStack:     p.Stacks,
		}
		if p.MaxPerSecond != nil {
			spec.MaxPerSecond = *p.MaxPerSecond
		}
		if p.Symbol != "" {
			spec.EntrySymbol, spec.Return = p.Symbol, true
		}
		specs = append(specs, spec)
	}
	return specs
}
