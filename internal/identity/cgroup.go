package identity

import (
	"regexp"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// Container runtime names, the values of container.runtime.name.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimeDocker     = "docker"
	RuntimePodman     = "podman"
)

// Cgroup is what a cgroup path says about a process. Empty fields are unknown.
type Cgroup struct {
	ContainerID string // 64 lowercase hex digits
	Runtime     string // one of the Runtime* constants; "" when the path does not tell (cgroupfs driver)
	PodUID      string // with dashes, as the Kubernetes API writes it
	SystemdUnit string // e.g. "nginx.service", for system services outside containers
}

var (
	// Leaves naming the runtime: cri-containerd-<id>.scope, crio-<id>.scope,
	// docker-<id>.scope, libpod-<id>.scope (systemd driver) and crio-<id>,
	// libpod-<id> (cgroupfs driver). crio-conmon-<id> does not match: conmon
	// is CRI-O's monitor, not the workload.
	runtimeLeaf = regexp.MustCompile(`^(cri-containerd|crio|docker|libpod)-([0-9a-f]{64})(?:\.scope)?$`)
	bareID      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// systemd driver: kubepods[-<qos>]-pod<uid_with_underscores>.slice, with a
	// prefix when nested (kind: kubelet-kubepods-burstable-pod<uid>.slice).
	systemdPod = regexp.MustCompile(`^(?:[a-z0-9.]+-)*kubepods(?:-[a-z]+)?-pod([0-9a-f_]{32,36})\.slice$`)
	// cgroupfs driver: /kubepods[/<qos>]/pod<uid>/<id>.
	cgroupfsPod = regexp.MustCompile(`^pod([0-9a-f-]{32,36})$`)
	podUID      = regexp.MustCompile(`^(?:[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)
)

var runtimeOfLeaf = map[string]string{
	"cri-containerd": RuntimeContainerd,
	"crio":           RuntimeCRIO,
	"docker":         RuntimeDocker,
	"libpod":         RuntimePodman,
}

// ParseCgroupPath interprets one cgroup path. The container is the innermost
// container segment; an outer one followed by Kubernetes pod segments is the
// node of a nested cluster (kind), not the container of the process. Pod
// uids are static pod hashes (32 hex) or UUIDs; anything else is ignored.
func ParseCgroupPath(path string) Cgroup {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var c Cgroup
	containerAt := -1
	for i := len(segs) - 1; i >= 0; i-- {
		if id, rt, ok := containerSegment(segs, i); ok {
			c.ContainerID, c.Runtime, containerAt = id, rt, i
			break
		}
	}
	for i := len(segs) - 1; i >= 0; i-- {
		if uid, ok := podSegment(segs[i]); ok {
			c.PodUID = uid
			break
		}
	}
	if containerAt >= 0 && containsKubepods(segs[containerAt+1:]) {
		// The container holds a kubelet's pods: it is the node, and the
		// process is in a pod's cgroup without a workload container leaf
		// (crio-conmon, or a pod-level cgroup).
		c.ContainerID, c.Runtime, containerAt = "", "", -1
	}
	c.SystemdUnit = systemUnit(segs[containerAt+1:])
	return c
}

// containerSegment reports whether segs[i] names a container.
func containerSegment(segs []string, i int) (id, runtime string, ok bool) {
	if m := runtimeLeaf.FindStringSubmatch(segs[i]); m != nil {
		return m[2], runtimeOfLeaf[m[1]], true
	}
	if !bareID.MatchString(segs[i]) || i == 0 {
		return "", "", false
	}
	// A bare id is a container under docker's cgroupfs parent (/docker/<id>)
	// or under a pod (cgroupfs driver; the runtime files tell which runtime).
	parent := segs[i-1]
	if parent == "docker" {
		return segs[i], RuntimeDocker, true
	}
	if _, isPod := podSegment(parent); isPod {
		return segs[i], "", true
	}
	return "", "", false
}

func podSegment(seg string) (string, bool) {
	m := systemdPod.FindStringSubmatch(seg)
	if m == nil {
		m = cgroupfsPod.FindStringSubmatch(seg)
	}
	if m == nil {
		return "", false
	}
	uid := strings.ReplaceAll(m[1], "_", "-")
	if !podUID.MatchString(uid) {
		return "", false
	}
	return uid, true
}

func containsKubepods(segs []string) bool {
	for _, s := range segs {
		if strings.Contains(s, "kubepods") {
			return true
		}
	}
	return false
}

// systemUnit returns the innermost *.service segment of a system (not user)
// hierarchy: user sessions and user managers (user.slice, user@1000.service)
// name no service.
func systemUnit(segs []string) string {
	for _, s := range segs {
		if s == "user.slice" || strings.HasPrefix(s, "user@") || containsKubepods([]string{s}) {
			return ""
		}
	}
	for i := len(segs) - 1; i >= 0; i-- {
		if strings.HasSuffix(segs[i], ".service") && len(segs[i]) > len(".service") {
			return segs[i]
		}
	}
	return ""
}

// score ranks what a parsed path tells: a container beats a pod beats a unit.
func (c Cgroup) score() int {
	s := 0
	if c.ContainerID != "" {
		s += 4
	}
	if c.PodUID != "" {
		s += 2
	}
	if c.SystemdUnit != "" {
		s++
	}
	return s
}

// CgroupFromLines interprets the cgroup file of a process: the v2 line
// first, the v1 lines of a hybrid host when the v2 path says less (container
// runtimes on hybrid hosts often leave the v2 path at "/").
func CgroupFromLines(lines []procfs.CgroupLine) Cgroup {
	var best Cgroup
	bestScore := -1
	consider := func(l procfs.CgroupLine) {
		c := ParseCgroupPath(l.Path)
		if s := c.score(); s > bestScore {
			best, bestScore = c, s
		}
	}
	for _, l := range lines {
		if l.V2() {
			consider(l)
		}
	}
	for _, l := range lines {
		if !l.V2() {
			consider(l)
		}
	}
	return best
}
