package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"
)

// PodNames are the Kubernetes names a container runtime keeps on the node
// for one container. Empty fields are unknown.
type PodNames struct {
	PodName       string
	Namespace     string
	PodUID        string
	ContainerName string // empty for the pod sandbox (pause) container
}

// maxRuntimeFile bounds what is read of one runtime file; OCI specs are a few
// tens of kilobytes.
const maxRuntimeFile = 8 << 20

// ociAnnotations is the part of an OCI runtime spec (containerd bundle and
// CRI-O config.json) that carries the CRI annotations.
type ociAnnotations struct {
	Annotations map[string]string `json:"annotations"`
}

// nameKeys are the annotation (or label) keys one runtime stores the pod
// names under, and the value of typeKey that marks the pod sandbox.
type nameKeys struct {
	pod, namespace, uid, container string
	typeKey, sandboxType           string
}

var (
	containerdKeys = nameKeys{
		pod: "io.kubernetes.cri.sandbox-name", namespace: "io.kubernetes.cri.sandbox-namespace",
		uid: "io.kubernetes.cri.sandbox-uid", container: "io.kubernetes.cri.container-name",
		typeKey: "io.kubernetes.cri.container-type", sandboxType: "sandbox",
	}
	crioKeys = nameKeys{
		pod: "io.kubernetes.pod.name", namespace: "io.kubernetes.pod.namespace",
		uid: "io.kubernetes.pod.uid", container: "io.kubernetes.container.name",
		typeKey: "io.kubernetes.cri-o.ContainerType", sandboxType: "sandbox",
	}
	dockerKeys = nameKeys{
		pod: "io.kubernetes.pod.name", namespace: "io.kubernetes.pod.namespace",
		uid: "io.kubernetes.pod.uid", container: "io.kubernetes.container.name",
		typeKey: "io.kubernetes.docker.type", sandboxType: "podsandbox",
	}
)

// names reads the pod names from a runtime's annotations or labels.
func (k nameKeys) names(a map[string]string) PodNames {
	n := PodNames{PodName: a[k.pod], Namespace: a[k.namespace], PodUID: a[k.uid], ContainerName: a[k.container]}
	if a[k.typeKey] == k.sandboxType {
		n.ContainerName = ""
	}
	return n
}

// ParseContainerdSpec reads the pod names from the annotations of a
// containerd bundle config.json.
func ParseContainerdSpec(r io.Reader) (PodNames, error) {
	var spec ociAnnotations
	if err := decodeJSON(r, &spec); err != nil {
		return PodNames{}, fmt.Errorf("containerd spec: %w", err)
	}
	return containerdKeys.names(spec.Annotations), nil
}

// ParseCRIOSpec reads the pod names from the annotations of a CRI-O
// config.json.
func ParseCRIOSpec(r io.Reader) (PodNames, error) {
	var spec ociAnnotations
	if err := decodeJSON(r, &spec); err != nil {
		return PodNames{}, fmt.Errorf("cri-o spec: %w", err)
	}
	return crioKeys.names(spec.Annotations), nil
}

// ParseDockerConfig reads the pod names from the labels of a docker
// config.v2.json (containers started by dockershim or cri-dockerd).
func ParseDockerConfig(r io.Reader) (PodNames, error) {
	var cfg struct {
		Config struct {
			Labels map[string]string `json:"Labels"`
		} `json:"Config"`
	}
	if err := decodeJSON(r, &cfg); err != nil {
		return PodNames{}, fmt.Errorf("docker config: %w", err)
	}
	return dockerKeys.names(cfg.Config.Labels), nil
}

func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, maxRuntimeFile))
	if err := dec.Decode(v); err != nil {
		return err
	}
	return nil
}

// runtimeFile says where a runtime keeps a container's spec on the node and
// how to read it.
type runtimeFile struct {
	runtime string
	dir     string // the runtime's state directory, relative to the host root
	file    string // the spec, relative to the container's directory in dir
	parse   func(io.Reader) (PodNames, error)
}

func (rf runtimeFile) path(id string) string { return filepath.Join(rf.dir, id, rf.file) }

var runtimeFiles = []runtimeFile{
	{RuntimeContainerd, "run/containerd/io.containerd.runtime.v2.task/k8s.io", "config.json", ParseContainerdSpec},
	{RuntimeCRIO, "run/containers/storage/overlay-containers", "userdata/config.json", ParseCRIOSpec},
	{RuntimeDocker, "var/lib/docker/containers", "config.v2.json", ParseDockerConfig},
}

// RuntimeStateDirs returns the directories below hostRoot ("/" when empty)
// whose container specs name pods and containers, one per runtime.
func RuntimeStateDirs(hostRoot string) []string {
	if hostRoot == "" {
		hostRoot = "/"
	}
	dirs := make([]string, len(runtimeFiles))
	for i, rf := range runtimeFiles {
		dirs[i] = filepath.Join(hostRoot, rf.dir)
	}
	return dirs
}

// RuntimeNames finds the pod names of containers in the runtimes' files
// below a host root, caching by container id (hits and misses alike: the
// spec is written before the container starts and does not change).
type RuntimeNames struct {
	hostRoot string
	logger   *zap.Logger

	mu     sync.Mutex
	cache  map[string]runtimeEntry
	errors uint64
}

type runtimeEntry struct {
	runtime string
	names   PodNames
}

// NewRuntimeNames returns a RuntimeNames reading below hostRoot ("/" when
// empty). logger may be nil.
func NewRuntimeNames(hostRoot string, logger *zap.Logger) *RuntimeNames {
	if hostRoot == "" {
		hostRoot = "/"
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &RuntimeNames{hostRoot: hostRoot, logger: logger, cache: map[string]runtimeEntry{}}
}

// Lookup returns the pod names of container id and the runtime whose file
// held them. runtime is the runtime the cgroup path named, or "" to try each
// runtime's file in turn (cgroupfs driver). Missing or malformed files give
// empty names: they are logged once per container and counted, never fatal.
func (n *RuntimeNames) Lookup(id, runtime string) (PodNames, string) {
	if !bareID.MatchString(id) {
		return PodNames{}, runtime
	}
	n.mu.Lock()
	e, ok := n.cache[id]
	n.mu.Unlock()
	if ok {
		return e.names, e.runtime
	}
	e = n.read(id, runtime)
	n.mu.Lock()
	n.cache[id] = e
	n.mu.Unlock()
	return e.names, e.runtime
}

func (n *RuntimeNames) read(id, runtime string) runtimeEntry {
	var missing []string
	for _, rf := range runtimeFiles {
		if runtime != "" && rf.runtime != runtime {
			continue
		}
		name := filepath.Join(n.hostRoot, rf.path(id))
		names, err := parseFile(name, rf.parse)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			n.countError()
			n.logger.Warn("Cannot read container runtime file; pod names left out",
				zap.String("container.id", id), zap.String("file", name), zap.Error(err))
			return runtimeEntry{runtime: rf.runtime}
		}
		return runtimeEntry{runtime: rf.runtime, names: names}
	}
	if len(missing) > 0 {
		n.logger.Debug("No container runtime file; pod names left out",
			zap.String("container.id", id), zap.Strings("tried", missing))
	}
	return runtimeEntry{runtime: runtime}
}

func parseFile(name string, parse func(io.Reader) (PodNames, error)) (PodNames, error) {
	f, err := os.Open(name)
	if err != nil {
		return PodNames{}, err
	}
	defer f.Close()
	names, err := parse(f)
	if err != nil {
		return PodNames{}, fmt.Errorf("parse %s: %w", name, err)
	}
	return names, nil
}

func (n *RuntimeNames) countError() {
	n.mu.Lock()
	n.errors++
	n.mu.Unlock()
}

// Errors returns how many runtime files could not be read or parsed.
func (n *RuntimeNames) Errors() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.errors
}

// Forget drops the cached names of containers for which keep returns false.
func (n *RuntimeNames) Forget(keep func(id string) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id := range n.cache {
		if !keep(id) {
			delete(n.cache, id)
		}
	}
}
