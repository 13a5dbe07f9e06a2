//go:build linux

package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// containerPackages are Debian's container runtimes: containerd and runc,
// docker.io (dockerd; its client is /usr/bin/docker, where
// /usr/local/bin/docker may be another client), podman.
var containerPackages = []string{"containerd", "runc", "docker.io", "podman"}

// clientTimeout bounds each call of a runtime's client.
const clientTimeout = 60 * time.Second

// installContainerRuntimes installs the runtimes with apt when missing (make
// faults does it first: make container-tools). Their packages may start
// their services; the test uses its own daemons either way.
func installContainerRuntimes(t *testing.T) {
	t.Helper()
	var need []string
	for _, p := range containerPackages {
		if exec.Command("dpkg", "-s", p).Run() != nil {
			need = append(need, p)
		}
	}
	if len(need) == 0 {
		return
	}
	t.Logf("installing %v with apt", need)
	if out, err := testutil.RunWithin(exec.Command("apt-get", "update", "-qq"), 5*time.Minute); err != nil {
		t.Fatalf("apt-get update: %v\n%s", err, out)
	}
	cmd := exec.Command("apt-get", append([]string{"install", "-y", "-qq"}, need...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := testutil.RunWithin(cmd, 10*time.Minute); err != nil {
		t.Fatalf("apt-get install %v: %v\n%s", need, err, out)
	}
}

// cgroupV2Only reports whether /sys/fs/cgroup itself is a cgroup2 mount (a
// pure v2 host), as runc decides.
func cgroupV2Only() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// inV2 wraps argv to run in a private mount namespace whose /sys/fs/cgroup
// is the host's cgroup2 hierarchy alone: the runtimes in it see a pure v2
// host (runc tells by the mount's type) and put their containers in v2
// cgroups only. On a hybrid host the v1 controllers stay bound to v1, so
// those cgroups have no cpu, memory or pids controller.
func inV2(argv ...string) []string {
	return append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c",
		`umount -l /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"`, "sh"}, argv...)
}

// workload is a container the test started and what its samples must carry.
type workload struct {
	engine *engine
	id     string // the runtime's full id
	pid    int    // its process as the host sees it
	want   map[string]string
}

func (w workload) String() string {
	return fmt.Sprintf("%s (%s) container %s, pid %d", w.engine.name, w.engine.hierarchy(), w.id[:12], w.pid)
}

// engine is one container runtime with a state of its own below dir: a
// daemon the test started (containerd, dockerd) or podman's directories.
type engine struct {
	name  string // container.runtime.name
	v2    bool   // its containers are in cgroup v2 only (inV2)
	dir   string
	cli   []string // its client, with the flags that point it at dir
	specs string   // where it keeps the files the receiver reads, by container id ("" none)
}

func (e *engine) hierarchy() string {
	if e.v2 {
		return "cgroup v2"
	}
	return "hybrid"
}

func (e *engine) wrap(argv ...string) []string {
	if e.v2 && !cgroupV2Only() {
		return inV2(argv...)
	}
	return argv
}

// run runs the engine's client with args and returns its output.
func (e *engine) run(args ...string) (string, error) {
	argv := e.wrap(append(append([]string(nil), e.cli...), args...)...)
	out, err := testutil.OutputWithin(exec.Command(argv[0], argv[1:]...), clientTimeout)
	if err != nil {
		return "", fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func (e *engine) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.run(args...)
	require.NoError(t, err)
	return out
}

// startDaemon runs argv (wrapped) as a child of the test until cleanup, which
// sends it SIGTERM and kills its process group 15 s later; ready says when it
// answers.
func (e *engine) startDaemon(t *testing.T, ready func() error, argv ...string) {
	t.Helper()
	argv = e.wrap(argv...)
	c := testutil.StartChild(t, exec.Command(argv[0], argv[1:]...))
	t.Cleanup(func() {
		_ = c.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.Exited():
		case <-time.After(15 * time.Second):
			t.Logf("%s did not exit within 15 s of SIGTERM", argv)
		}
	})
	deadline := time.Now().Add(testutil.Patient(60 * time.Second))
	for {
		err := ready()
		if err == nil {
			return
		}
		select {
		case <-c.Exited():
			t.Fatalf("%s exited before answering: %v\n%s", e.name, err, strings.Join(c.Pending(), "\n"))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within %v: %v", e.name, testutil.Patient(60*time.Second), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startContainerd runs a containerd of its own (no CRI plugin: the test
// sets the CRI's annotations itself) with root, state and socket below dir.
func startContainerd(t *testing.T, dir string, v2 bool) *engine {
	t.Helper()
	e := &engine{name: identity.RuntimeContainerd, v2: v2, dir: dir,
		specs: filepath.Join(dir, "state", "io.containerd.runtime.v2.task", "k8s.io")}
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = "%s.ttrpc"
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock)
	cfg := filepath.Join(dir, "config.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(config), 0o600))
	e.cli = []string{"ctr", "--address", sock, "--namespace", "k8s.io"}
	e.startDaemon(t, func() error { _, err := e.run("version"); return err }, "containerd", "--config", cfg)
	return e
}

// startDockerd runs a dockerd of its own (it starts its own containerd):
// no bridge and no iptables rules, containers on the host's network or none.
func startDockerd(t *testing.T, dir string, v2 bool) *engine {
	t.Helper()
	data := filepath.Join(dir, "data")
	e := &engine{name: identity.RuntimeDocker, v2: v2, dir: dir, specs: filepath.Join(data, "containers")}
	sock := "unix://" + filepath.Join(dir, "docker.sock")
	e.cli = []string{"/usr/bin/docker", "--host", sock}
	t.Cleanup(func() { removeCgroups(t, "docker") })
	e.startDaemon(t, func() error { _, err := e.run("version"); return err },
		"dockerd", "--data-root", data, "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "--host", sock,
		"--bridge=none", "--iptables=false", "--ip-masq=false", "--userland-proxy=false")
	return e
}

// newPodman returns podman with its storage below dir; without systemd's
// help, cgroupfs cgroups and file events.
func newPodman(t *testing.T, dir string, v2 bool) *engine {
	t.Cleanup(func() {
		removeCgroups(t, "libpod_parent/conmon", "libpod_parent")
		// Its overlay driver mounts its own directory on itself (in the
		// private mount namespace where v2 is mounted, that one's).
		if err := unix.Unmount(filepath.Join(dir, "root", "overlay"), unix.MNT_DETACH); err != nil && err != unix.EINVAL && !os.IsNotExist(err) {
			t.Logf("unmount podman's overlay: %v", err)
		}
	})
	return &engine{name: identity.RuntimePodman, v2: v2, dir: dir, cli: []string{"podman",
		"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--cgroup-manager=cgroupfs", "--events-backend=file"}}
}

// podNames are the Kubernetes names of one workload container.
type podNames struct{ pod, namespace, uid, container string }

func newPodNames(pod string) podNames {
	return podNames{pod: pod, namespace: "faults", uid: newUUID(), container: "burner"}
}

func (p podNames) want(id, runtime string) map[string]string {
	return map[string]string{attrkey.ContainerID: id, attrkey.ContainerRuntimeName: runtime,
		attrkey.K8sPodName: p.pod, attrkey.K8sNamespaceName: p.namespace, attrkey.K8sPodUID: p.uid,
		attrkey.K8sContainerName: p.container}
}

// criAnnotations are the annotations containerd's CRI plugin sets on a pod's
// container in its OCI spec, and criLabels the labels on its container record.
func (p podNames) criAnnotations(sandbox, image string) []string {
	return []string{
		"io.kubernetes.cri.container-type=container",
		"io.kubernetes.cri.container-name=" + p.container,
		"io.kubernetes.cri.image-name=" + image,
		"io.kubernetes.cri.sandbox-id=" + sandbox,
		"io.kubernetes.cri.sandbox-name=" + p.pod,
		"io.kubernetes.cri.sandbox-namespace=" + p.namespace,
		"io.kubernetes.cri.sandbox-uid=" + p.uid,
	}
}

func (p podNames) criLabels() []string {
	return []string{
		"io.cri-containerd.kind=container",
		"io.kubernetes.container.name=" + p.container,
		"io.kubernetes.pod.name=" + p.pod,
		"io.kubernetes.pod.namespace=" + p.namespace,
		"io.kubernetes.pod.uid=" + p.uid,
	}
}

// dockerLabels are the labels cri-dockerd (formerly dockershim) sets on a
// pod's container, which the receiver reads from config.v2.json.
func (p podNames) dockerLabels() []string {
	return []string{
		"io.kubernetes.docker.type=container",
		"io.kubernetes.container.name=" + p.container,
		"io.kubernetes.pod.name=" + p.pod,
		"io.kubernetes.pod.namespace=" + p.namespace,
		"io.kubernetes.pod.uid=" + p.uid,
	}
}

// kubepodsCgroup is where the CRI plugin puts a best-effort pod's container
// under kubelet's cgroupfs driver (systemd is not running here).
func (p podNames) kubepodsCgroup(id string) string {
	return fmt.Sprintf("/kubepods/besteffort/pod%s/%s", p.uid, id)
}

// removeCgroups removes the (empty) cgroups the runtimes left in every
// hierarchy: rel are relative to a hierarchy's root, innermost first.
func removeCgroups(t *testing.T, rel ...string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		for _, d := range rel {
			err := os.Remove(filepath.Join(root, d))
			if err != nil && !os.IsNotExist(err) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTDIR) {
				t.Logf("remove cgroup %s: %v", filepath.Join(root, d), err)
			}
		}
	}
}

// podCgroups are the cgroups of a pod of uid, innermost first.
func podCgroups(uid string) []string {
	return []string{"kubepods/besteffort/pod" + uid, "kubepods/besteffort", "kubepods/burstable/pod" + uid, "kubepods/burstable", "kubepods"}
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func newContainerID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// layerTar is an uncompressed image layer holding the files of root (name
// in the image → path on this machine), each executable.
func layerTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, path := range files {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err = tw.Write(b)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// ociArchive writes an OCI image layout of one image of layer, tagged tag,
// as a tar containerd imports (ctr image import --base-name).
func ociArchive(t *testing.T, out, tag string, layer []byte) {
	t.Helper()
	blobs := map[string][]byte{}
	desc := func(mediaType string, b []byte) map[string]any {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return b
	}
	layerDesc := desc("application/vnd.oci.image.layer.v1.tar", layer)
	config := mustJSON(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc["digest"].(string)}}})
	manifest := mustJSON(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc("application/vnd.oci.image.config.v1+json", config), "layers": []any{layerDesc}})
	m := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	m["annotations"] = map[string]string{"org.opencontainers.image.ref.name": tag}
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": mustJSON(map[string]any{"schemaVersion": 2, "manifests": []any{m}}),
	}
	for d, b := range blobs {
		files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] = b
	}
	f, err := os.Create(out)
	require.NoError(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	for name, b := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(b)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
}

// tarDir writes the regular files below dir as a tar (an OCI layout).
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	require.NoError(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	require.NoError(t, filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}))
	require.NoError(t, tw.Close())
}

// specDirs are where the receiver looks for each runtime's container files
// below its host root, as the DaemonSet mounts them.
var specDirs = map[string]string{
	identity.RuntimeContainerd: "run/containerd/io.containerd.runtime.v2.task/k8s.io",
	identity.RuntimeDocker:     "var/lib/docker/containers",
}

// startBurner starts cpuburn (/cpuburn of image) in a container of e for a
// pod p, as the runtime's Kubernetes integration would, and removes it at
// cleanup. hostRoot gets a link to its files where the receiver looks.
func (e *engine) startBurner(t *testing.T, image string, p podNames, hostRoot string) workload {
	t.Helper()
	seconds := fmt.Sprint(int(testutil.Patient(10 * time.Minute).Seconds()))
	w := workload{engine: e}
	switch e.name {
	case identity.RuntimeContainerd:
		w.id = newContainerID()
		args := []string{"run", "-d", "--cgroup", p.kubepodsCgroup(w.id)}
		if e.v2 && !cgroupV2Only() {
			args = append(args, "--cpu-shares", "0") // no cpu controller in v2 here
		}
		for _, a := range p.criAnnotations(newContainerID(), image) {
			args = append(args, "--annotation", a)
		}
		for _, l := range p.criLabels() {
			args = append(args, "--label", l)
		}
		t.Cleanup(func() {
			for _, args := range [][]string{{"task", "delete", "--force", w.id}, {"container", "delete", w.id}} {
				if _, err := e.run(args...); err != nil {
					t.Logf("remove the workload: %v", err)
				}
			}
			removeCgroups(t, podCgroups(p.uid)...)
		})
		linkSpecs(t, e, hostRoot, w.id)
		e.must(t, append(args, image, w.id, "/cpuburn", seconds)...)
		w.pid = containerdPID(t, e, w.id)
		w.want = p.want(w.id, e.name)
	case identity.RuntimeDocker:
		args := []string{"create", "--network=none", "--name",
			fmt.Sprintf("k8s_%s_%s_%s_%s_0", p.container, p.pod, p.namespace, p.uid)}
		for _, l := range p.dockerLabels() {
			args = append(args, "--label", l)
		}
		w.id = e.must(t, append(args, image, "/cpuburn", seconds)...)
		t.Cleanup(func() {
			if _, err := e.run("rm", "--force", w.id); err != nil {
				t.Logf("remove the workload: %v", err)
			}
		})
		linkSpecs(t, e, hostRoot, w.id)
		e.must(t, "start", w.id)
		w.pid = inspectPID(t, e, w.id)
		w.want = p.want(w.id, e.name)
	case identity.RuntimePodman:
		// Podman raises the rlimits of its containers, which a process
		// without CAP_SYS_RESOURCE (this machine's root) may not: lower
		// ones (root's processes are exempt from the nproc limit). No pids
		// limit: on a hybrid host's v2 hierarchy there is no pids controller.
		w.id = e.must(t, "run", "-d", "--network=host", "--pids-limit=-1",
			"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			image, "/cpuburn", seconds)
		t.Cleanup(func() {
			if _, err := e.run("rm", "--force", "--time", "0", w.id); err != nil {
				t.Logf("remove the workload: %v", err)
			}
		})
		w.pid = inspectPID(t, e, w.id)
		// Podman keeps no pod names the receiver reads: the id and runtime.
		w.want = map[string]string{attrkey.ContainerID: w.id, attrkey.ContainerRuntimeName: e.name}
	}
	require.Regexp(t, `^[0-9a-f]{64}$`, w.id, "%s's container id", e.name)
	return w
}

// linkSpecs links where the receiver looks below hostRoot for container
// id's files to where e keeps them, before the container starts: the
// receiver remembers a container whose files it did not find.
func linkSpecs(t *testing.T, e *engine, hostRoot, id string) {
	t.Helper()
	link := filepath.Join(hostRoot, specDirs[e.name], id)
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(e.specs, id), link))
}

// containerdPID is the host pid of task id, from ctr task ls.
func containerdPID(t *testing.T, e *engine, id string) int {
	t.Helper()
	out := e.must(t, "task", "ls")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id {
			var pid int
			_, err := fmt.Sscan(f[1], &pid)
			require.NoError(t, err, "ctr task ls: %q", line)
			return pid
		}
	}
	t.Fatalf("ctr task ls does not list %s:\n%s", id, out)
	return 0
}

// inspectPID is the host pid of a docker or podman container, and checks
// that the runtime's own id is the one run printed.
func inspectPID(t *testing.T, e *engine, id string) int {
	t.Helper()
	out := e.must(t, "inspect", "--format", "{{.Id}} {{.State.Pid}}", id)
	var gotID string
	var pid int
	_, err := fmt.Sscan(out, &gotID, &pid)
	require.NoError(t, err, "%s inspect: %q", e.name, out)
	require.Equal(t, id, gotID, "%s inspect's id", e.name)
	require.Positive(t, pid, "%s inspect's pid of %s", e.name, id)
	return pid
}
