package identity

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

const (
	idCtrd   = "b23cae9ee7d0ff3785e6f02489e96eb145cc68a84c28b3e5c49859884798fe42"
	idCRIO   = "c64064614423cb790e88b3e5492ff5ccf673b25ae823089f7a60c65cda24d809"
	idDocker = "d548c5b83fa61d8e3bd86ad42a7ffea9b7c86e3f9d8095c1577d3e1270bb9420"
	idPodman = "2f259bab93aaaaa2542ba43ef33eb990d0999ee1b9924b557b7be53c0b7a1bb9"
	idNode   = "545ea538461003efdc8c81c244531b003f6f26cfccf6c0073b3239fdedf49446"
	idBare   = "9b828d53402d6e332ef05a2fe03063b359192571ba99fcd3b85074f46a72fd7e"

	podUID1      = "7f3c9a2e-1b4d-4e8f-9a6c-2d5e8f1b3a7c"
	podUID1Under = "7f3c9a2e_1b4d_4e8f_9a6c_2d5e8f1b3a7c"
	staticPodUID = "5b9d2a1e3f2c4b5a8c2d1e0f9a8b7c6d"
)

// cgroupCases are /proc/<pid>/cgroup contents of the shapes kubelets,
// container runtimes and systemd produce.
var cgroupCases = []struct {
	name string
	file string
	want Cgroup
}{
	{
		name: "systemd driver burstable containerd",
		file: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podUID1Under + ".slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd, PodUID: podUID1},
	},
	{
		name: "systemd driver besteffort containerd",
		file: "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podUID1Under + ".slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd, PodUID: podUID1},
	},
	{
		name: "systemd driver guaranteed containerd (no qos segment)",
		file: "0::/kubepods.slice/kubepods-pod" + podUID1Under + ".slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd, PodUID: podUID1},
	},
	{
		name: "systemd driver static pod hash uid",
		file: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticPodUID + ".slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd, PodUID: staticPodUID},
	},
	{
		name: "systemd driver cri-o",
		file: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podUID1Under + ".slice/crio-" + idCRIO + ".scope\n",
		want: Cgroup{ContainerID: idCRIO, Runtime: RuntimeCRIO, PodUID: podUID1},
	},
	{
		name: "cri-o with crun systemd subgroup",
		file: "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podUID1Under + ".slice/crio-" + idCRIO + ".scope/container\n",
		want: Cgroup{ContainerID: idCRIO, Runtime: RuntimeCRIO, PodUID: podUID1},
	},
	{
		name: "cri-o conmon is not the workload",
		file: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podUID1Under + ".slice/crio-conmon-" + idCRIO + ".scope\n",
		want: Cgroup{PodUID: podUID1},
	},
	{
		name: "cgroupfs driver burstable containerd (v1 hybrid)",
		file: "12:pids:/kubepods/burstable/pod" + podUID1 + "/" + idBare + "\n" +
			"4:memory:/kubepods/burstable/pod" + podUID1 + "/" + idBare + "\n" +
			"1:name=systemd:/kubepods/burstable/pod" + podUID1 + "/" + idBare + "\n" +
			"0::/\n",
		want: Cgroup{ContainerID: idBare, PodUID: podUID1},
	},
	{
		name: "cgroupfs driver guaranteed (no qos segment)",
		file: "0::/kubepods/pod" + podUID1 + "/" + idBare + "\n",
		want: Cgroup{ContainerID: idBare, PodUID: podUID1},
	},
	{
		name: "cgroupfs driver besteffort cri-o",
		file: "0::/kubepods/besteffort/pod" + podUID1 + "/crio-" + idCRIO + "\n",
		want: Cgroup{ContainerID: idCRIO, Runtime: RuntimeCRIO, PodUID: podUID1},
	},
	{
		name: "cgroupfs cri-o conmon",
		file: "0::/kubepods/besteffort/pod" + podUID1 + "/crio-conmon-" + idCRIO + "\n",
		want: Cgroup{PodUID: podUID1},
	},
	{
		name: "plain docker systemd driver",
		file: "0::/system.slice/docker-" + idDocker + ".scope\n",
		want: Cgroup{ContainerID: idDocker, Runtime: RuntimeDocker},
	},
	{
		name: "plain docker cgroupfs (v1 hybrid, v2 unused)",
		file: "11:devices:/docker/" + idDocker + "\n" +
			"10:memory:/docker/" + idDocker + "\n" +
			"1:name=systemd:/docker/" + idDocker + "\n" +
			"0::/\n",
		want: Cgroup{ContainerID: idDocker, Runtime: RuntimeDocker},
	},
	{
		name: "podman rootful",
		file: "0::/machine.slice/libpod-" + idPodman + ".scope\n",
		want: Cgroup{ContainerID: idPodman, Runtime: RuntimePodman},
	},
	{
		name: "podman cgroupfs",
		file: "0::/libpod_parent/libpod-" + idPodman + "\n",
		want: Cgroup{ContainerID: idPodman, Runtime: RuntimePodman},
	},
	{
		name: "podman rootless under the user manager",
		file: "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + idPodman + ".scope/container\n",
		want: Cgroup{ContainerID: idPodman, Runtime: RuntimePodman},
	},
	{
		name: "kind node systemd: innermost container, not the node",
		file: "0::/system.slice/docker-" + idNode + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + podUID1Under + ".slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd, PodUID: podUID1},
	},
	{
		name: "kind node systemd guaranteed",
		file: "0::/system.slice/docker-" + idNode + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + podUID1Under + ".slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd, PodUID: podUID1},
	},
	{
		name: "kind node cgroupfs",
		file: "0::/docker/" + idNode + "/kubepods/besteffort/pod" + podUID1 + "/" + idBare + "\n",
		want: Cgroup{ContainerID: idBare, PodUID: podUID1},
	},
	{
		name: "kind node pod-level cgroup: never the node id",
		file: "0::/system.slice/docker-" + idNode + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + podUID1Under + ".slice/crio-conmon-" + idCRIO + ".scope\n",
		want: Cgroup{PodUID: podUID1},
	},
	{
		name: "kind node's own kubelet",
		file: "0::/system.slice/docker-" + idNode + ".scope/system.slice/kubelet.service\n",
		want: Cgroup{ContainerID: idNode, Runtime: RuntimeDocker, SystemdUnit: "kubelet.service"},
	},
	{
		name: "systemd service",
		file: "0::/system.slice/nginx.service\n",
		want: Cgroup{SystemdUnit: "nginx.service"},
	},
	{
		name: "systemd template service (v1 named hierarchy)",
		file: "5:cpu,cpuacct:/\n1:name=systemd:/system.slice/system-getty.slice/getty@tty1.service\n0::/\n",
		want: Cgroup{SystemdUnit: "getty@tty1.service"},
	},
	{
		name: "user session matches nothing",
		file: "0::/user.slice/user-1000.slice/session-3.scope\n",
		want: Cgroup{},
	},
	{
		name: "user manager service matches nothing",
		file: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/dbus.service\n",
		want: Cgroup{},
	},
	{
		name: "user app scope matches nothing",
		file: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1c2d.scope\n",
		want: Cgroup{},
	},
	{
		name: "init scope",
		file: "0::/init.scope\n",
		want: Cgroup{},
	},
	{
		name: "root cgroup",
		file: "0::/\n",
		want: Cgroup{},
	},
	{
		name: "cgroup namespace view of another pod (systemd driver)",
		file: "0::/../../kubepods-besteffort-pod" + podUID1Under + ".slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd, PodUID: podUID1},
	},
	{
		name: "cgroup namespace view of a sibling container",
		file: "0::/../cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd},
	},
	{
		name: "short or uppercase ids are not containers",
		file: "0::/system.slice/docker-" + idDocker[:12] + ".scope\n1:name=systemd:/docker/" + strings.ToUpper(idDocker) + "\n",
		want: Cgroup{},
	},
	{
		name: "bare id outside a pod or docker parent",
		file: "0::/custom/" + idBare + "\n",
		want: Cgroup{},
	},
	{
		name: "malformed pod uid",
		file: "0::/kubepods.slice/kubepods-podnot_a_uid.slice/cri-containerd-" + idCtrd + ".scope\n",
		want: Cgroup{ContainerID: idCtrd, Runtime: RuntimeContainerd},
	},
	// As the runtimes of test/e2e TestFaultContainerRuntimes write them on
	// a hybrid host (runc's cgroupfs manager, every hierarchy), and from a
	// mount namespace where /sys/fs/cgroup is cgroup2 alone (v2 only; the
	// v1 lines stay the parent's).
	{
		name: "containerd CRI cgroupfs besteffort, hybrid",
		file: "9:name=systemd:/kubepods/besteffort/pod" + podUID1 + "/" + idBare + "\n" +
			"4:memory:/kubepods/besteffort/pod" + podUID1 + "/" + idBare + "\n" +
			"1:cpu:/kubepods/besteffort/pod" + podUID1 + "/" + idBare + "\n" +
			"0::/kubepods/besteffort/pod" + podUID1 + "/" + idBare + "\n",
		want: Cgroup{ContainerID: idBare, PodUID: podUID1},
	},
	{
		name: "containerd CRI cgroupfs besteffort, v2 only",
		file: "9:name=systemd:/\n4:memory:/process_api/de7fd388248a30412ba49adb2f6a9503\n1:cpu:/\n" +
			"0::/kubepods/besteffort/pod" + podUID1 + "/" + idBare + "\n",
		want: Cgroup{ContainerID: idBare, PodUID: podUID1},
	},
	{
		name: "docker cgroupfs, v2 only",
		file: "9:name=systemd:/\n4:memory:/process_api/de7fd388248a30412ba49adb2f6a9503\n0::/docker/" + idDocker + "\n",
		want: Cgroup{ContainerID: idDocker, Runtime: RuntimeDocker},
	},
	{
		name: "podman cgroupfs, hybrid",
		file: "9:name=systemd:/libpod_parent/libpod-" + idPodman + "\n1:cpu:/libpod_parent/libpod-" + idPodman + "\n" +
			"0::/libpod_parent/libpod-" + idPodman + "\n",
		want: Cgroup{ContainerID: idPodman, Runtime: RuntimePodman},
	},
	{
		name: "podman cgroupfs, v2 only",
		file: "9:name=systemd:/\n4:memory:/process_api/de7fd388248a30412ba49adb2f6a9503\n0::/libpod_parent/libpod-" + idPodman + "\n",
		want: Cgroup{ContainerID: idPodman, Runtime: RuntimePodman},
	},
	{
		name: "this machine's memory cgroup",
		file: "9:name=systemd:/\n4:memory:/process_api/de7fd388248a30412ba49adb2f6a9503\n0::/\n",
		want: Cgroup{},
	},
}

func TestCgroupFromLines(t *testing.T) {
	for _, tt := range cgroupCases {
		t.Run(tt.name, func(t *testing.T) {
			lines, err := procfs.ParseCgroup(strings.NewReader(tt.file))
			require.NoError(t, err)
			assert.Equal(t, tt.want, CgroupFromLines(lines))
		})
	}
}

func TestCgroupFromLinesPrefersV2(t *testing.T) {
	file := "1:name=systemd:/docker/" + idDocker + "\n0::/system.slice/docker-" + idNode + ".scope\n"
	lines, err := procfs.ParseCgroup(strings.NewReader(file))
	require.NoError(t, err)
	assert.Equal(t, idNode, CgroupFromLines(lines).ContainerID)
}

func TestCgroupFromLinesEmpty(t *testing.T) {
	assert.Equal(t, Cgroup{}, CgroupFromLines(nil))
}

func FuzzParseCgroupPath(f *testing.F) {
	for _, tt := range cgroupCases {
		f.Add(tt.file)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := procfs.ParseCgroup(strings.NewReader(s))
		if err != nil {
			return
		}
		c := CgroupFromLines(lines)
		if c.ContainerID != "" && !bareID.MatchString(c.ContainerID) {
			t.Fatalf("bad container id %q from %q", c.ContainerID, s)
		}
		if c.PodUID != "" && !podUID.MatchString(c.PodUID) {
			t.Fatalf("bad pod uid %q from %q", c.PodUID, s)
		}
		if c.Runtime != "" && c.ContainerID == "" {
			t.Fatalf("runtime without container from %q", s)
		}
	})
}
