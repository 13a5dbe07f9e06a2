package identity

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

const (
	collectorPodUID = "c0ffee00-1111-4222-8333-944455556666"
	collectorCID    = "33bf6fbd7cd8379785a21e233d8e09f824e7bab459168a96312c1c882c1d7e1f"
	siblingCID      = "0a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20212223242526272829"
	otherPodUID     = "dddddddd-eeee-4fff-8000-111111111111"
)

type fakeProcess struct {
	exe     string // symlink target; "" for kernel threads
	comm    string
	cmdline string // NUL-separated arguments
	cgroup  string
	start   uint64
	kthread bool
}

// writeProc writes the files of process pid below root.
func writeProc(t *testing.T, root string, pid uint32, p fakeProcess) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	flags := 0x400100 // PF_RANDOMIZE|PF_FORKNOEXEC
	if p.kthread {
		flags = 0x208040 // PF_KTHREAD|PF_NOFREEZE|PF_WQ_WORKER
	}
	write("stat", fmt.Sprintf("%d (%s) S 2 0 0 0 -1 %d 1 2 3 4 5 6 7 8 20 0 1 0 %d 1000 100", pid, p.comm, flags, p.start))
	write("comm", p.comm+"\n")
	write("cmdline", p.cmdline)
	write("cgroup", p.cgroup)
	if p.exe != "" {
		_ = os.Remove(filepath.Join(dir, "exe"))
		require.NoError(t, os.Symlink(p.exe, filepath.Join(dir, "exe")))
	}
}

func podSlice(uid string) string {
	return "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscores(uid) + ".slice/"
}

func underscores(uid string) string {
	b := []byte(uid)
	for i := range b {
		if b[i] == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

// fakeNode builds a proc root and a host root with processes of every kind.
func fakeNode(t *testing.T) (procfs.FS, string) {
	proc, host := t.TempDir(), t.TempDir()
	procs := map[uint32]fakeProcess{
		1:   {exe: "/otelcol", comm: "otelcol", cgroup: podSlice(collectorPodUID) + "cri-containerd-" + collectorCID + ".scope\n"},
		100: {exe: "/usr/bin/shop", comm: "shop", cgroup: podSlice(podUID1) + "cri-containerd-" + idCtrd + ".scope\n"},
		101: {exe: "/usr/sbin/nginx", comm: "nginx", cgroup: "0::/kubepods.slice/kubepods-pod" + underscores("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0") + ".slice/crio-" + idCRIO + ".scope\n"},
		102: {exe: "/app/api", comm: "api", cgroup: "1:name=systemd:/kubepods/besteffort/poda1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d/" + idDocker + "\n0::/\n"},
		103: {exe: "/usr/sbin/nginx", comm: "nginx", cgroup: "0::/system.slice/nginx.service\n"},
		104: {exe: "/usr/bin/bash", comm: "bash", cgroup: "0::/user.slice/user-1000.slice/session-3.scope\n"},
		105: {comm: "kworker/0:1-events", cgroup: "0::/\n", kthread: true},
		107: {exe: "/memfd:sealed-91173221a7ea (deleted)", comm: "memfd:sealed-91", cmdline: "tools/sandboxd\x00--uid\x000\x00", cgroup: "0::/\n"},
		106: {exe: "/usr/local/bin/redis-server", comm: "redis-server", cgroup: "0::/system.slice/docker-" + idBare + ".scope\n"},
		200: {exe: "/bin/agent", comm: "agent", cgroup: podSlice(collectorPodUID) + "cri-containerd-" + siblingCID + ".scope\n"},
		201: {exe: "/bin/sh", comm: "sh", cgroup: podSlice(collectorPodUID) + "cri-containerd-" + collectorCID + ".scope\n"},
		300: {exe: "/bin/other", comm: "other", cgroup: podSlice(otherPodUID) + "cri-containerd-" + idPodman + ".scope\n"},
	}
	for pid, p := range procs {
		p.start = uint64(pid) * 10
		writeProc(t, proc, pid, p)
	}
	installRuntimeFile(t, host, RuntimeContainerd, idCtrd, "containerd-config.json")
	installRuntimeFile(t, host, RuntimeCRIO, idCRIO, "crio-config.json")
	installRuntimeFile(t, host, RuntimeDocker, idDocker, "docker-config.v2.json")
	installRuntimeFile(t, host, RuntimeDocker, idBare, "docker-plain.config.v2.json")
	installRuntimeFile(t, host, RuntimeContainerd, idPodman, "truncated.json")
	return procfs.FS{Root: proc}, host
}

var collectorEnv = envOf(map[string]string{
	"POD_NAME": "otel-agent-x7k2p", "POD_NAMESPACE": "observability", "CONTAINER_NAME": "otelcol", "NODE_NAME": "n1",
})

func TestResolverEndToEnd(t *testing.T) {
	proc, host := fakeNode(t)
	r := New(Options{Proc: proc, HostName: "node-1", HostRoot: host, Env: collectorEnv, SelfPID: 1})

	tests := []struct {
		pid  uint32
		want map[string]any
	}{
		{100, map[string]any{
			attrkey.ProcessExecutablePath: "/usr/bin/shop", attrkey.ProcessExecutableName: "shop",
			attrkey.ContainerID: idCtrd, attrkey.ContainerRuntimeName: RuntimeContainerd, attrkey.K8sPodUID: podUID1,
			attrkey.K8sPodName: "shop-7d9c6b5f4-x2x9k", attrkey.K8sNamespaceName: "retail", attrkey.K8sContainerName: "shop",
			attrkey.ServiceName: "shop",
		}},
		{101, map[string]any{
			attrkey.ProcessExecutablePath: "/usr/sbin/nginx", attrkey.ProcessExecutableName: "nginx",
			attrkey.ContainerID: idCRIO, attrkey.ContainerRuntimeName: RuntimeCRIO, attrkey.K8sPodUID: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
			attrkey.K8sPodName: "web-0", attrkey.K8sNamespaceName: "frontend", attrkey.K8sContainerName: "web",
			attrkey.ServiceName: "web",
		}},
		{102, map[string]any{ // cgroupfs driver, hybrid: runtime found by its file
			attrkey.ProcessExecutablePath: "/app/api", attrkey.ProcessExecutableName: "api",
			attrkey.ContainerID: idDocker, attrkey.ContainerRuntimeName: RuntimeDocker, attrkey.K8sPodUID: "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
			attrkey.K8sPodName: "api-5f6d8-qwert", attrkey.K8sNamespaceName: "backend", attrkey.K8sContainerName: "api",
			attrkey.ServiceName: "api",
		}},
		{103, map[string]any{
			attrkey.ProcessExecutablePath: "/usr/sbin/nginx", attrkey.ProcessExecutableName: "nginx", attrkey.ServiceName: "nginx",
		}},
		{104, map[string]any{
			attrkey.ProcessExecutablePath: "/usr/bin/bash", attrkey.ProcessExecutableName: "bash", attrkey.ServiceName: "bash",
		}},
		{105, map[string]any{attrkey.ServiceName: attrkey.KernelServiceName}}, // its name stays in thread.name
		{107, map[string]any{ // run from a memfd: named as it was started
			attrkey.ProcessExecutablePath: "/memfd:sealed-91173221a7ea", attrkey.ProcessExecutableName: "sandboxd", attrkey.ServiceName: "sandboxd",
		}},
		{106, map[string]any{
			attrkey.ProcessExecutablePath: "/usr/local/bin/redis-server", attrkey.ProcessExecutableName: "redis-server",
			attrkey.ContainerID: idBare, attrkey.ContainerRuntimeName: RuntimeDocker, attrkey.ServiceName: "redis-server",
		}},
		{200, map[string]any{ // sibling container of the collector's pod: pod names only
			attrkey.ProcessExecutablePath: "/bin/agent", attrkey.ProcessExecutableName: "agent",
			attrkey.ContainerID: siblingCID, attrkey.ContainerRuntimeName: RuntimeContainerd, attrkey.K8sPodUID: collectorPodUID,
			attrkey.K8sPodName: "otel-agent-x7k2p", attrkey.K8sNamespaceName: "observability", attrkey.ServiceName: "agent",
		}},
		{201, map[string]any{ // the collector's own container
			attrkey.ProcessExecutablePath: "/bin/sh", attrkey.ProcessExecutableName: "sh",
			attrkey.ContainerID: collectorCID, attrkey.ContainerRuntimeName: RuntimeContainerd, attrkey.K8sPodUID: collectorPodUID,
			attrkey.K8sPodName: "otel-agent-x7k2p", attrkey.K8sNamespaceName: "observability", attrkey.K8sContainerName: "otelcol",
			attrkey.ServiceName: "otelcol",
		}},
		{300, map[string]any{ // another pod, malformed runtime file: never the collector's names
			attrkey.ProcessExecutablePath: "/bin/other", attrkey.ProcessExecutableName: "other",
			attrkey.ContainerID: idPodman, attrkey.ContainerRuntimeName: RuntimeContainerd, attrkey.K8sPodUID: otherPodUID,
			attrkey.ServiceName: "other",
		}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.pid), func(t *testing.T) {
			id, err := r.Resolve(tt.pid)
			require.NoError(t, err)
			tt.want[attrkey.ProcessPID] = int64(tt.pid)
			tt.want[attrkey.HostName] = "node-1"
			assert.Equal(t, tt.want, id.Attributes)
			assert.Equal(t, tt.pid, id.PID)
		})
	}
	assert.Equal(t, uint64(1), r.RuntimeFileErrors())
}

func TestResolverOwnPodFromEnv(t *testing.T) {
	// In a private cgroup namespace the collector's own cgroup is "/"; the
	// downward API's POD_UID still tells its pod.
	proc, host := fakeNode(t)
	writeProc(t, proc.Root, 1, fakeProcess{exe: "/otelcol", comm: "otelcol", cgroup: "0::/\n", start: 10})
	env := envOf(map[string]string{"POD_NAME": "otel-agent-x7k2p", "POD_NAMESPACE": "observability", "POD_UID": collectorPodUID})
	r := New(Options{Proc: proc, HostName: "node-1", HostRoot: host, Env: env, SelfPID: 1})
	id, err := r.Resolve(200)
	require.NoError(t, err)
	assert.Equal(t, "otel-agent-x7k2p", id.Attributes[attrkey.K8sPodName])
	id, err = r.Resolve(100)
	require.NoError(t, err)
	assert.Equal(t, "shop-7d9c6b5f4-x2x9k", id.Attributes[attrkey.K8sPodName])
}

func TestResolverNoOwnPod(t *testing.T) {
	// A collector outside Kubernetes with stray POD_NAME variables names
	// nobody's pod after itself.
	proc, host := fakeNode(t)
	r := New(Options{Proc: proc, HostRoot: host, Env: collectorEnv, SelfPID: 999})
	id, err := r.Resolve(200)
	require.NoError(t, err)
	assert.NotContains(t, id.Attributes, attrkey.K8sPodName)
	assert.Equal(t, collectorPodUID, id.Attributes[attrkey.K8sPodUID])
}

func TestResolverCachesByStartTime(t *testing.T) {
	proc, host := fakeNode(t)
	r := New(Options{Proc: proc, HostRoot: host, Env: envOf(nil), SelfPID: 1})
	id, err := r.Resolve(103)
	require.NoError(t, err)
	assert.Equal(t, "nginx", id.Attributes[attrkey.ServiceName])

	// Same start time: cached, even though the files changed.
	writeProc(t, proc.Root, 103, fakeProcess{exe: "/usr/bin/other", comm: "other", cgroup: "0::/\n", start: 1030})
	id, err = r.Resolve(103)
	require.NoError(t, err)
	assert.Equal(t, "nginx", id.Attributes[attrkey.ServiceName])

	// A new process with the same pid: read again.
	writeProc(t, proc.Root, 103, fakeProcess{exe: "/usr/bin/other", comm: "other", cgroup: "0::/\n", start: 5})
	id, err = r.Resolve(103)
	require.NoError(t, err)
	assert.Equal(t, "other", id.Attributes[attrkey.ServiceName])
	assert.Equal(t, []uint32(nil), r.Prune())
}

// Where the kernel announces processes, a cached identity is used without a
// read until its pid is announced again; then the start time decides.
func TestResolverAnnounced(t *testing.T) {
	proc, host := fakeNode(t)
	r := New(Options{Proc: proc, HostRoot: host, Env: envOf(nil), SelfPID: 1})
	r.TrustAnnouncements()
	steps := []struct {
		name     string
		rewrite  *fakeProcess // the process's files before Resolve
		announce bool
		want     string
	}{
		{name: "first read", want: "nginx"},
		{name: "cached: its files are not read", rewrite: &fakeProcess{exe: "/usr/bin/other", comm: "other", cgroup: "0::/\n", start: 5}, want: "nginx"},
		{name: "announced again: another start time, read", announce: true, want: "other"},
		{name: "announced again, same start time: cached", rewrite: &fakeProcess{exe: "/usr/bin/third", comm: "third", cgroup: "0::/\n", start: 5}, announce: true, want: "other"},
		{name: "checked once, then trusted", rewrite: &fakeProcess{exe: "/usr/bin/fourth", comm: "fourth", cgroup: "0::/\n", start: 9}, want: "other"},
	}
	for _, s := range steps {
		if s.rewrite != nil {
			writeProc(t, proc.Root, 103, *s.rewrite)
		}
		if s.announce {
			r.Announce(103)
		}
		id, err := r.Resolve(103)
		require.NoError(t, err, s.name)
		assert.Equal(t, s.want, id.Attributes[attrkey.ServiceName], s.name)
	}
	r.Announce(4242) // not cached: nothing to do
	assert.False(t, r.Known(4242))
}

func TestResolverGoneAndPrune(t *testing.T) {
	proc, host := fakeNode(t)
	r := New(Options{Proc: proc, HostRoot: host, Env: envOf(nil), SelfPID: 1})
	_, err := r.Resolve(100)
	require.NoError(t, err)
	_, err = r.Resolve(103)
	require.NoError(t, err)

	id, err := r.Resolve(4242)
	require.ErrorIs(t, err, ErrGone)
	assert.Equal(t, int64(4242), id.Attributes[attrkey.ProcessPID])

	require.NoError(t, os.RemoveAll(filepath.Join(proc.Root, "100")))
	// Cached: still resolvable until pruned.
	id, err = r.Resolve(100)
	require.NoError(t, err)
	assert.Equal(t, idCtrd, id.Attributes[attrkey.ContainerID])
	assert.Equal(t, []uint32{100}, r.Prune())
	_, err = r.Resolve(100)
	require.ErrorIs(t, err, ErrGone)
	assert.Empty(t, r.Prune())
}

// Exits announced by the kernel are forgotten one by one: only those that
// are gone (or whose pid a newer process took), never a live one.
func TestResolverForgetExited(t *testing.T) {
	proc, host := fakeNode(t)
	r := New(Options{Proc: proc, HostRoot: host, Env: envOf(nil), SelfPID: 1})
	for _, pid := range []uint32{100, 103} {
		_, err := r.Resolve(pid)
		require.NoError(t, err)
	}
	require.NoError(t, os.RemoveAll(filepath.Join(proc.Root, "100")))
	assert.True(t, r.Known(100))
	assert.False(t, r.Known(4242))
	assert.Equal(t, []uint32{100}, r.ForgetExited([]uint32{100, 103, 4242}), "103 lives; 4242 was never cached")
	assert.False(t, r.Known(100))
	assert.True(t, r.Known(103))
	_, err := r.Resolve(100)
	require.ErrorIs(t, err, ErrGone)

	// 103 exited and its pid was taken by a newer process before the report.
	writeProc(t, proc.Root, 103, fakeProcess{exe: "/usr/bin/other", comm: "other", cgroup: "0::/\n", start: 5})
	assert.Equal(t, []uint32{103}, r.ForgetExited([]uint32{103}))
	id, err := r.Resolve(103)
	require.NoError(t, err)
	assert.Equal(t, "other", id.Attributes[attrkey.ServiceName])
	assert.Empty(t, r.ForgetExited(nil))
}

func TestResolverNoCgroupFile(t *testing.T) {
	proc := t.TempDir()
	writeProc(t, proc, 7, fakeProcess{exe: "/bin/x", comm: "x", start: 1})
	require.NoError(t, os.Remove(filepath.Join(proc, "7", "cgroup")))
	r := NewResolver(procfs.FS{Root: proc}, "h")
	id, err := r.Resolve(7)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{attrkey.ProcessPID: int64(7), attrkey.HostName: "h",
		attrkey.ProcessExecutablePath: "/bin/x", attrkey.ProcessExecutableName: "x", attrkey.ServiceName: "x"}, id.Attributes)
}

func TestServiceNamePrecedence(t *testing.T) {
	tests := []struct {
		name  string
		attrs map[string]any
		unit  string
		exe   string
		want  string
	}{
		{"container name first", map[string]any{attrkey.K8sContainerName: "web"}, "nginx.service", "nginx", "web"},
		{"then systemd unit", map[string]any{}, "nginx.service", "nginx-bin", "nginx"},
		{"template unit", map[string]any{}, "getty@tty1.service", "agetty", "getty@tty1"},
		{"then executable", map[string]any{}, "", "redis-server", "redis-server"},
		{"empty container name skipped", map[string]any{attrkey.K8sContainerName: ""}, "", "x", "x"},
		{"nothing", map[string]any{}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, serviceName(tt.attrs, tt.unit, tt.exe))
		})
	}
}

func TestResolverSelf(t *testing.T) {
	// The real /proc and environment: must not fail, whatever the machine.
	r := New(Options{Proc: procfs.FS{}, HostName: "h"})
	id, err := r.Resolve(uint32(os.Getpid()))
	require.NoError(t, err)
	assert.NotEmpty(t, id.Attributes[attrkey.ServiceName])
}

func TestHostNamePrecedence(t *testing.T) {
	proc := t.TempDir()
	writeProc(t, proc, 7, fakeProcess{exe: "/bin/x", comm: "x", start: 1})
	hostname, err := os.Hostname()
	require.NoError(t, err)
	tests := []struct {
		name   string
		option string
		env    map[string]string
		want   string
	}{
		{"option first", "opt", map[string]string{"NODE_NAME": "node-1"}, "opt"},
		{"then the downward API", "", map[string]string{"NODE_NAME": "node-1"}, "node-1"},
		{"then the hostname", "", nil, hostname},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Options{Proc: procfs.FS{Root: proc}, HostName: tt.option, Env: envOf(tt.env), SelfPID: 1})
			id, err := r.Resolve(7)
			require.NoError(t, err)
			assert.Equal(t, tt.want, id.Attributes[attrkey.HostName])
		})
	}
}
