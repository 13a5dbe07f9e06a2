// Package attrkey names every attribute bpfprofiler emits, in one place: the
// OpenTelemetry semantic conventions' keys where they exist, and the
// receiver's own (probe.*).
package attrkey

import semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

// Process, host, container and Kubernetes attributes.
const (
	ProcessPID            = string(semconv.ProcessPIDKey)
	ProcessExecutableName = string(semconv.ProcessExecutableNameKey)
	ProcessExecutablePath = string(semconv.ProcessExecutablePathKey)
	HostName              = string(semconv.HostNameKey)
	ServiceName           = string(semconv.ServiceNameKey)
	ContainerID           = string(semconv.ContainerIDKey)
	ContainerRuntimeName  = string(semconv.ContainerRuntimeNameKey)
	K8sPodUID             = string(semconv.K8SPodUIDKey)
	K8sPodName            = string(semconv.K8SPodNameKey)
	K8sNamespaceName      = string(semconv.K8SNamespaceNameKey)
	K8sContainerName      = string(semconv.K8SContainerNameKey)
)

// ResourceKeys are the attributes a profile's resource may carry: its host,
// and for a container its runtime and Kubernetes names.
var ResourceKeys = []string{
	HostName, ContainerID, ContainerRuntimeName, K8sPodUID, K8sPodName, K8sNamespaceName, K8sContainerName,
}

// Thread attributes of samples and probe records.
const (
	ThreadID   = string(semconv.ThreadIDKey)
	ThreadName = string(semconv.ThreadNameKey)
)

// Profile locations and mappings.
const (
	ProfileFrameType = string(semconv.ProfileFrameTypeKey)
	BuildIDGNU       = string(semconv.ProcessExecutableBuildIDGNUKey)
	BuildIDGo        = string(semconv.ProcessExecutableBuildIDGoKey)
)

// Probe log records (the receiver's own).
const (
	ProbeID         = "probe.id"
	ProbeDurationNS = "probe.duration_ns"
	ProbeStartTime  = "probe.start_time_unix_nano"
	ProbeMainThread = "probe.main_thread"
	ProbeEntry      = "probe.entry_symbol"
	ProbeExit       = "probe.exit_symbol"
	ProbeUSDTEntry  = "probe.usdt_entry"
	ProbeUSDTExit   = "probe.usdt_exit"
	// ProbeScopeSpanID names a sample's probe scope (its log record's span
	// id, hex) when the sample's link is its thread context's span.
	ProbeScopeSpanID = "probe.scope.span_id"
)

// KernelServiceName is the service.name of every kernel thread: their own
// names (in thread.name) change with their work (kworker/0:1-events).
const KernelServiceName = "kernel"
