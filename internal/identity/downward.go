package identity

import (
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
)

// Downward is what the Kubernetes downward API told the collector about its
// own pod through its environment. It describes the collector's pod only and
// is applied to processes of that pod alone (the sidecar case), never to
// other pods.
type Downward struct {
	PodName       string
	Namespace     string
	PodUID        string
	ContainerName string
	// NodeName names the node (spec.nodeName), since the pod's own
	// hostname is the pod name.
	NodeName string
}

// Environment variable names read for each field, first non-empty wins.
var (
	envPodName       = []string{"POD_NAME", "K8S_POD_NAME"}
	envNamespace     = []string{"POD_NAMESPACE", "K8S_NAMESPACE_NAME", "K8S_POD_NAMESPACE"}
	envPodUID        = []string{"POD_UID", "K8S_POD_UID"}
	envContainerName = []string{"CONTAINER_NAME", "K8S_CONTAINER_NAME"}
	envNodeName      = []string{"NODE_NAME", "K8S_NODE_NAME"}
)

// DownwardFromEnv reads the downward API variables through getenv.
func DownwardFromEnv(getenv func(string) string) Downward {
	first := func(keys []string) string {
		for _, k := range keys {
			if v := strings.TrimSpace(getenv(k)); v != "" {
				return v
			}
		}
		return ""
	}
	return Downward{
		PodName:       first(envPodName),
		Namespace:     first(envNamespace),
		PodUID:        first(envPodUID),
		ContainerName: first(envContainerName),
		NodeName:      first(envNodeName),
	}
}

// self is the collector's own place: its pod (from its cgroup, else the
// downward API's POD_UID) and container, and the downward API names.
type self struct {
	podUID      string
	containerID string
	names       Downward
}

// apply fills what the downward API knows into attrs of a process in pod
// podUID and container containerID. Pod names go to every process of the
// collector's pod; the container name only to the collector's own
// container. Names the runtime files gave are kept.
func (s self) apply(attrs map[string]any, podUID, containerID string) {
	if s.podUID == "" || podUID != s.podUID {
		return
	}
	setIfMissing(attrs, attrkey.K8sPodName, s.names.PodName)
	setIfMissing(attrs, attrkey.K8sNamespaceName, s.names.Namespace)
	if s.containerID != "" && containerID == s.containerID {
		setIfMissing(attrs, attrkey.K8sContainerName, s.names.ContainerName)
	}
}

func setIfMissing(attrs map[string]any, key, value string) {
	if value == "" {
		return
	}
	if _, ok := attrs[key]; !ok {
		attrs[key] = value
	}
}
