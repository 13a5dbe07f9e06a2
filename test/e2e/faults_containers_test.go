//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Real container runtimes (issue 46): a CPU-bound container started through
// Debian's containerd (k8s.io namespace, the CRI plugin's annotations and
// cgroup), docker (cri-dockerd's labels) and podman, on this host's
// hierarchy and again in a mount namespace where /sys/fs/cgroup is cgroup2
// alone; the collector host-wide, and the collector from the DaemonSet's
// OCI image in a containerd container with the DaemonSet's mounts,
// capabilities and memory limit. Each container's samples must carry the
// runtime's own id and the pod names the runtime keeps.
func TestFaultContainerRuntimes(t *testing.T) {
	bin, full := faultLength(t)
	began := time.Now()
	installContainerRuntimes(t)
	removeRuntimeLeftovers(t)

	// Samples of each workload the collectors must have: the share's
	// standard error at 99% is 0.6 points with 300, 0.2 with 2000.
	perWorkload, perWorkloadImage := int64(300), int64(60)
	if full {
		perWorkload, perWorkloadImage = 2000, 400
	}

	base, err := os.MkdirTemp("", "bpfct-") // short: unix socket paths
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := os.RemoveAll(base); err != nil {
			t.Logf("remove %s: %v", base, err)
		}
	})
	burner := testutil.BuildC(t, "cpuburn.c", "-static")
	layer := layerTar(t, map[string]string{"cpuburn": burner})
	rootfs, archive := filepath.Join(base, "rootfs.tar"), filepath.Join(base, "cpuburn-oci.tar")
	require.NoError(t, os.WriteFile(rootfs, layer, 0o644))
	ociArchive(t, archive, "test", layer)
	hostRoot := filepath.Join(base, "hostroot") // links to the runtimes' files
	for _, dir := range specDirs {
		require.NoError(t, os.MkdirAll(filepath.Join(hostRoot, dir), 0o755))
	}

	// This host's hierarchy, then pure cgroup v2 (on a v2 host, once).
	hierarchies := []bool{false, true}
	if cgroupV2Only() {
		hierarchies = []bool{true}
	}
	var engines []*engine
	for _, v2 := range hierarchies {
		dir := func(name string) string {
			d := filepath.Join(base, fmt.Sprintf("%s-v2-%v", name, v2))
			require.NoError(t, os.MkdirAll(d, 0o755))
			return d
		}
		ctd := startContainerd(t, dir("containerd"), v2)
		ctd.must(t, "image", "import", "--base-name", "docker.io/library/cpuburn", archive)
		dk := startDockerd(t, dir("docker"), v2)
		dk.must(t, "import", rootfs, "cpuburn:test")
		pm := newPodman(t, dir("podman"), v2)
		pm.must(t, "import", rootfs, "localhost/cpuburn:test")
		engines = append(engines, ctd, dk, pm)
	}
	images := map[string]string{"containerd": "docker.io/library/cpuburn:test", "docker": "cpuburn:test", "podman": "localhost/cpuburn:test"}
	t.Logf("%d runtimes ready after %v", len(engines), time.Since(began).Round(100*time.Millisecond))

	// The collector on the host, as other tests run it, at 99 Hz.
	otlp, addr := startOTLPServer(t)
	out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    cpu: {samples_per_second: 99}
    kubernetes: {host_root: %s}
    resource_attributes_on_samples: [k8s.namespace.name, k8s.pod.name, k8s.container.name, container.id, host.name]
`, hostRoot), addr))
	// The collector of the DaemonSet's image in this host's containerd.
	imageOTLP, imageAddr := startOTLPServer(t)
	imageOut := startImageCollector(t, engines[0], base, full, imageAddr, engines)
	waitReady(t, out)
	waitReady(t, imageOut)

	host := testutil.StartChild(t, exec.Command(testutil.BuildC(t, "cpuburn.c"), fmt.Sprint(testutil.Patient(10*time.Minute).Seconds())))
	var workloads []workload
	for _, e := range engines {
		p := newPodNames(fmt.Sprintf("checkout-%s-%s", e.name, map[bool]string{false: "hybrid", true: "v2"}[e.v2]))
		workloads = append(workloads, e.startBurner(t, images[e.name], p, hostRoot))
	}
	for _, w := range workloads {
		t.Logf("%v: %s", w, strings.Join(cgroupLines(w.pid), " "))
	}

	enough := func(s *otlpProfilesServer, n int64) func() bool {
		return func() bool {
			for _, w := range workloads {
				if all, _, _ := identityShare(s, w.pid, w.want); all < n {
					return false
				}
			}
			return samplesOf(s, host.Pid()) >= n
		}
	}
	wait := testutil.Patient(3 * time.Minute)
	if full {
		wait = testutil.Patient(10 * time.Minute)
	}
	require.Eventually(t, enough(otlp, perWorkload), wait, time.Second,
		"want %d samples of each workload from the collector: %s", perWorkload, counts(otlp, workloads))
	require.Eventually(t, enough(imageOTLP, perWorkloadImage), wait, time.Second,
		"want %d samples of each workload from the image's collector: %s", perWorkloadImage, counts(imageOTLP, workloads))

	for _, c := range []struct {
		name string
		srv  *otlpProfilesServer
		want func(workload) map[string]string
	}{
		{"collector", otlp, func(w workload) map[string]string { return w.want }},
		// The image's collector reads the files of this host's
		// containerd and docker (the DaemonSet's mounts): the pure v2
		// ones' are elsewhere, it has their containers' ids from their
		// cgroups, and the runtime where the path names it (kubelet's
		// cgroupfs driver does not: /kubepods/<qos>/pod<uid>/<id>).
		{"image", imageOTLP, func(w workload) map[string]string {
			if !w.engine.v2 || len(hierarchies) == 1 {
				return w.want
			}
			want := map[string]string{attrkey.ContainerID: w.id}
			if w.engine.name != identity.RuntimeContainerd {
				want[attrkey.ContainerRuntimeName] = w.engine.name
			}
			return want
		}},
	} {
		for _, w := range workloads {
			all, good, wrong := identityShare(c.srv, w.pid, c.want(w))
			share := ratio(good, all)
			faultFigure(t, "%s: %v: %d of %d samples (%.2f%%) with container.id and the names", c.name, w, good, all, 100*share)
			assert.GreaterOrEqual(t, share, 0.99,
				"%s: %v: want ≥ 99%% of its samples with %v, got %d of %d; the commonest other: %s", c.name, w, c.want(w), good, all, wrong)
		}
	}
	st := burnStacksOf(imageOTLP, host.Pid())
	faultFigure(t, "image: host process pid %d: %d samples, %.1f%% naming burn_hot or burn_cold, %.1f%% of those called from run",
		host.Pid(), st.all, 100*st.named(), 100*st.chains())
	assert.GreaterOrEqual(t, st.named(), 0.95, "image: share of the host process's %d samples naming burn_hot or burn_cold", st.all)
	assert.GreaterOrEqual(t, st.chains(), 0.95, "image: share of the host process's burn_* samples whose caller is run")
	faultFigure(t, "%d runtimes (%d hierarchies), %d workloads, %v in all", len(engines), len(hierarchies), len(workloads), time.Since(began).Round(time.Second))
}

// cgroupLines is /proc/<pid>/cgroup, for the log.
func cgroupLines(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return strings.Fields(string(b))
}

// identityShare counts the CPU samples of process pid the server received
// and those whose resource and sample attributes carry every attribute of
// want; wrong describes the commonest identity of the others.
func identityShare(s *otlpProfilesServer, pid int, want map[string]string) (all, good int64, wrong string) {
	others := map[string]int64{}
	for _, pd := range s.all() {
		p := pdata.OfPID(pd, pid)
		dict := p.Dictionary()
		for _, rp := range p.ResourceProfiles().All() {
			res := rp.Resource().Attributes()
			for _, sp := range rp.ScopeProfiles().All() {
				for _, prof := range sp.Profiles().All() {
					for _, smp := range prof.Samples().All() {
						if smp.Values().Len() == 0 {
							continue
						}
						v := smp.Values().At(0)
						attrs, _ := pprofile.FromAttributeIndices(dict.AttributeTable(), smp, dict)
						all += v
						if miss := missing(want, res, attrs); miss == "" {
							good += v
						} else {
							others[miss] += v
						}
					}
				}
			}
		}
	}
	var most int64
	for k, n := range others {
		if n > most {
			wrong, most = fmt.Sprintf("%s (%d samples)", k, n), n
		}
	}
	return all, good, wrong
}

// missing names the attributes of want a sample lacks ("" none); sample
// attributes win over the resource's.
func missing(want map[string]string, res, sample pcommon.Map) string {
	var miss []string
	for k, w := range want {
		v, ok := sample.Get(k)
		if !ok {
			v, ok = res.Get(k)
		}
		if !ok {
			miss = append(miss, k+" missing")
		} else if got := v.AsString(); got != w {
			miss = append(miss, fmt.Sprintf("%s=%q", k, got))
		}
	}
	return strings.Join(miss, " ")
}

func samplesOf(s *otlpProfilesServer, pid int) int64 {
	all, _, _ := identityShare(s, pid, nil)
	return all
}

func counts(s *otlpProfilesServer, ws []workload) string {
	var c []string
	for _, w := range ws {
		all, good, _ := identityShare(s, w.pid, w.want)
		c = append(c, fmt.Sprintf("%v: %d (%d named)", w, all, good))
	}
	return strings.Join(c, "; ")
}

// daemonSetCaps are the capabilities deploy/kubernetes/daemonset.yaml adds
// after dropping all; ctrDefaultCaps are those containerd's default spec
// grants (ctr has no --cap-drop ALL).
var (
	daemonSetCaps  = []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_SYSLOG", "CAP_DAC_READ_SEARCH"}
	ctrDefaultCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
		"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
)

// startImageCollector runs the collector of the DaemonSet's OCI image in
// ctd (this host's containerd) as the DaemonSet does: host pids and network,
// the runtimes' files and the cgroup tree read-only below /host, only the
// DaemonSet's capabilities, no seccomp profile, a read-only root and 512 MiB;
// the ConfigMap's configuration with OTLP to addr. Its output goes to the
// returned buffer. full builds the image with make image (both platforms);
// otherwise tools/image builds it for this platform from the collector
// under test.
func startImageCollector(t *testing.T, ctd *engine, base string, full bool, addr string, engines []*engine) *syncBuffer {
	t.Helper()
	root := testutil.RepoRoot(t)
	layout := filepath.Join(base, "image")
	if full {
		cmd := exec.Command("make", "image")
		cmd.Dir = root
		out, err := testutil.RunWithin(cmd, 20*time.Minute)
		require.NoError(t, err, "make image:\n%s", out)
		layout = filepath.Join(root, "_build", "image")
	} else {
		cmd := exec.Command("go", "run", ".", "-out", layout, "-config", filepath.Join(root, "deploy", "collector.yaml"),
			"-version", "test", "linux/amd64="+collectorBinary(t))
		cmd.Dir = filepath.Join(root, "tools", "image")
		out, err := testutil.RunWithin(cmd, 10*time.Minute)
		require.NoError(t, err, "tools/image:\n%s", out)
	}
	archive := filepath.Join(base, "collector-oci.tar")
	tarDir(t, layout, archive)
	const repo = "ghcr.io/example/otelcol-bpfprofiler"
	imported := ctd.must(t, "image", "import", "--platform", "linux/amd64", "--base-name", repo, archive)
	var image string
	for _, f := range strings.Fields(imported) {
		if strings.HasPrefix(f, repo+":") {
			image = f
		}
	}
	require.NotEmpty(t, image, "ctr image import named no %s image: %s", repo, imported)

	conf := filepath.Join(base, "conf")
	require.NoError(t, os.MkdirAll(conf, 0o755))
	cfg := testutil.ShippedCollectorYAML(t)
	require.Contains(t, cfg, "host: 0.0.0.0\n", "the ConfigMap's metrics endpoint")
	require.Contains(t, cfg, "port: 8888\n", "the ConfigMap's metrics endpoint")
	// Host network: its metrics on a free loopback port, not 8888.
	cfg = strings.Replace(strings.Replace(cfg, "host: 0.0.0.0\n", "host: 127.0.0.1\n", 1),
		"port: 8888\n", fmt.Sprintf("port: %d\n", freePort(t)), 1)
	require.NoError(t, os.WriteFile(filepath.Join(conf, "collector.yaml"), []byte(cfg), 0o644))

	// The DaemonSet's mounts, from this host's runtimes (CRI-O: none here).
	crio := filepath.Join(base, "crio-containers")
	require.NoError(t, os.MkdirAll(crio, 0o755))
	sources := map[string]string{"run/containers/storage/overlay-containers": crio}
	for _, e := range engines {
		if dir, ok := specDirs[e.name]; ok && e.v2 == engines[0].v2 {
			require.NoError(t, os.MkdirAll(e.specs, 0o755))
			sources[dir] = e.specs
		}
	}
	mount := func(src, dst string) []string {
		return []string{"--mount", fmt.Sprintf("type=bind,src=%s,dst=%s,options=rbind:ro", src, dst)}
	}
	pod := podNames{pod: "bpfprofiler-" + newUUID()[:5], namespace: "observability", uid: newUUID(), container: "otelcol"}
	id := newContainerID()
	hostname, _ := os.Hostname()
	log := filepath.Join(base, "collector.log")
	ds := testutil.ShippedDaemonSetMemory(t)
	args := []string{"run", "-d", "--net-host", "--with-ns", fmt.Sprintf("pid:/proc/%d/ns/pid", os.Getpid()),
		"--read-only", "--memory-limit", fmt.Sprint(ds.Limit), "--log-uri", "file://" + log,
		"--cgroup", fmt.Sprintf("/kubepods/burstable/pod%s/%s", pod.uid, id)}
	for _, c := range ctrDefaultCaps {
		args = append(args, "--cap-drop", c)
	}
	for _, c := range daemonSetCaps {
		args = append(args, "--cap-add", c)
	}
	args = append(args, mount(conf, "/conf")...)
	for dir, src := range sources {
		args = append(args, mount(src, "/host/"+dir)...)
	}
	args = append(args, mount("/sys/fs/cgroup", "/host/sys/fs/cgroup")...)
	for _, a := range pod.criAnnotations(newContainerID(), image) {
		args = append(args, "--annotation", a)
	}
	for _, env := range []string{"OTLP_ENDPOINT=" + addr, "POD_NAME=" + pod.pod, "POD_NAMESPACE=" + pod.namespace,
		"POD_UID=" + pod.uid, "CONTAINER_NAME=" + pod.container, "NODE_NAME=" + hostname,
		"GOMEMLIMIT=" + ds.GoMemLimit} {
		args = append(args, "--env", env)
	}
	args = append(args, image, id, "/otelcol-bpfprofiler", "--config=/conf/collector.yaml", "--feature-gates=service.profilesSupport")

	out := &syncBuffer{}
	done := make(chan struct{})
	t.Cleanup(func() {
		_, _ = ctd.run("task", "kill", "--signal", "SIGTERM", id)
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if ls, err := ctd.run("task", "ls"); err != nil || !strings.Contains(ls, id) || strings.Contains(ls, "STOPPED") && !strings.Contains(ls, "RUNNING") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, a := range [][]string{{"task", "delete", "--force", id}, {"container", "delete", id}} {
			if _, err := ctd.run(a...); err != nil {
				t.Logf("remove the image's collector: %v", err)
			}
		}
		close(done)
		removeCgroups(t, podCgroups(pod.uid)...)
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("the image's collector's output:\n%s", b)
		}
	})
	ctd.must(t, args...)
	// What the DaemonSet asks for is what containerd handed runc.
	spec := ctd.must(t, "container", "info", "--spec", id)
	for _, c := range daemonSetCaps {
		require.Contains(t, spec, `"`+c+`"`, "the image's collector's spec")
	}
	for _, c := range ctrDefaultCaps {
		require.NotContains(t, spec, `"`+c+`"`, "the image's collector's spec")
	}
	go func() { // the log file into out, for waitReady
		var n int
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if b, err := os.ReadFile(log); err == nil && len(b) > n {
				_, _ = out.Write(b[n:])
				n = len(b)
			}
		}
	}()
	return out
}

// runtimeLeftovers are directories the runtimes make whatever their state
// directories (shims' sockets, runc's and podman's defaults): removed after
// the test where they were not there before, so that a node's later tests
// (or the next CI run on a machine kept) meet the host they met before.
var runtimeLeftovers = []string{"/run/containerd", "/run/containers", "/run/docker", "/run/runc", "/run/crun",
	"/run/libpod", "/var/lib/containers"}

func removeRuntimeLeftovers(t *testing.T) {
	t.Helper()
	for _, dir := range runtimeLeftovers {
		if _, err := os.Lstat(dir); err == nil {
			continue
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Logf("remove %s: %v", dir, err)
			}
		})
	}
}
