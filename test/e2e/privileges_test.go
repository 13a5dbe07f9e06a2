//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The capability sets README.md ("Privileges") documents, as setpriv names
// them.
var (
	profileCaps = []string{"bpf", "perfmon", "sys_ptrace", "syslog"}
	probeCaps   = append(slices.Clone(profileCaps), "sys_admin")
	privateCaps = append(slices.Clone(profileCaps), "dac_read_search")
)

// nobody is the unprivileged uid and gid the collector runs as.
const nobody = "65534"

// asNobody returns a command running argv as uid/gid nobody with exactly caps
// (effective, permitted, inheritable and ambient, which survive the exec).
func asNobody(ctx context.Context, caps []string, argv ...string) *exec.Cmd {
	set := "-all"
	for _, c := range caps {
		set += ",+" + c
	}
	args := []string{"--reuid=" + nobody, "--regid=" + nobody, "--clear-groups",
		"--inh-caps=" + set, "--ambient-caps=" + set, "--"}
	return exec.CommandContext(ctx, "setpriv", append(args, argv...)...)
}

// unprivilegedSetup holds what every collector run as uid nobody needs: the
// collector and the workloads copied into a directory that uid may read, and
// a workload under a root-only directory, running as root like the others.
type unprivilegedSetup struct {
	dir, collector           string
	burner, syscalls, scopes string // in dir
	private                  string // cpuburn with secret_hot/secret_cold, under dir/private (0700)
}

func newUnprivilegedSetup(t *testing.T) *unprivilegedSetup {
	bin := collectorBinary(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testutil.SkipOrFail(t, "setpriv (util-linux) is needed: %v", err)
	}
	s := &unprivilegedSetup{dir: publicDir(t)}
	install := func(from string) string {
		to := filepath.Join(s.dir, filepath.Base(from))
		copyFile(t, from, to, 0o755)
		return to
	}
	s.collector = install(bin)
	s.burner = install(testutil.BuildC(t, "cpuburn.c"))
	s.syscalls = install(testutil.BuildC(t, "syscalls.c"))
	s.scopes = install(testutil.BuildC(t, "scopes.c"))
	private := filepath.Join(s.dir, "private")
	require.NoError(t, os.Mkdir(private, 0o700))
	s.private = filepath.Join(private, "secretburn")
	copyFile(t, testutil.BuildC(t, "cpuburn.c", "-Dburn_hot=secret_hot", "-Dburn_cold=secret_cold"), s.private, 0o755)
	return s
}

// start runs workload bin as root (uid nobody reads its maps and binary only
// with CAP_SYS_PTRACE) until the test ends, at a low priority: the burners
// must not starve the collector of the shared CPUs. It returns the pid.
func (s *unprivilegedSetup) start(t *testing.T, bin string) int {
	return testutil.StartWorkload(t, "nice", "-n", "10", bin, "120").Process.Pid
}

// publicDir returns a new directory every user may read and search
// (t.TempDir is private to root), removed at cleanup.
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bpfprofiler-public-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
}

// config writes a collector configuration readable by uid nobody: CPU and
// off-CPU profiles of pids and, with probes, a probe on scopes.c's
// timed_scope, all printed by the debug exporter.
// The container runtimes' state is looked for under s.dir, which holds none:
// what the host's runtimes left there (root-only /run/containerd) would
// need CAP_DAC_READ_SEARCH, which is not what these cases test.
func (s *unprivilegedSetup) config(t *testing.T, pids []int, probes bool) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `
receivers:
  bpfprofiler:
    report_interval: 1s
    targets: {pids: %s}
    cpu: {samples_per_second: 99}
    off_cpu: {enabled: true}
    kubernetes: {host_root: %s}
`, strings.Join(strings.Fields(fmt.Sprint(pids)), ", "), s.dir)
	if probes {
		fmt.Fprintf(&b, `    probes:
      - {id: app.timed, file_match: '^%s$', symbol: timed_scope, main_thread_only: true, min_duration: 10ms}
`, regexp.QuoteMeta(s.scopes))
	}
	b.WriteString(`exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
    logs: {receivers: [bpfprofiler], exporters: [debug]}
`)
	f, err := os.CreateTemp(s.dir, "collector-*.yaml")
	require.NoError(t, err)
	_, err = f.WriteString(b.String())
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chmod(f.Name(), 0o644))
	return f.Name()
}

func (s *unprivilegedSetup) collectorArgs(config string) []string {
	return []string{s.collector, "--config", config, "--feature-gates=service.profilesSupport"}
}

// stringTableEntry matches a name the debug exporter prints in a profile's
// string table (one per line).
func stringTableEntry(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `$`)
}

// The collector runs as an unprivileged uid with the capability sets the
// README documents, and each set does what it is documented for.
func TestCollectorWithLeastPrivilege(t *testing.T) {
	s := newUnprivilegedSetup(t)

	t.Run("profiles with CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_SYSLOG", func(t *testing.T) {
		cfg := s.config(t, []int{s.start(t, s.burner), s.start(t, s.syscalls), s.start(t, s.private)}, true)
		out := runCollector(t, asNobody(context.Background(), profileCaps, s.collectorArgs(cfg)...))
		require.Eventually(t, func() bool {
			text := out.String()
			return stringTableEntry("burn_hot").MatchString(text) && // user frames: CAP_SYS_PTRACE
				stringTableEntry("do_syscall_64").MatchString(text) && // kernel frames: CAP_SYSLOG
				strings.Contains(text, "process.executable.name: Str(secretburn)")
		}, 30*time.Second, 200*time.Millisecond, "profiles with symbolized user and kernel frames")
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "probes attached") },
			10*time.Second, 100*time.Millisecond)
		b, err := testutil.RunWithin(exec.Command(s.scopes, filepath.Join(t.TempDir(), "measured"), "0"), testutil.Patient(time.Minute))
		require.NoError(t, err, "%s", b)
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "the collector lacks CAP_SYS_ADMIN") },
			10*time.Second, 100*time.Millisecond, "a probe attach refused for want of CAP_SYS_ADMIN says so")
		text := out.String()
		assert.Contains(t, text, `"off_cpu": true`, "the off-CPU program loaded")
		assert.NotRegexp(t, stringTableEntry("secret_hot"), text, "a binary under a root-only directory needs CAP_DAC_READ_SEARCH")
		assert.NotContains(t, text, "probe.duration_ns")
	})

	t.Run("probes with CAP_SYS_ADMIN added", func(t *testing.T) {
		cfg := s.config(t, []int{s.start(t, s.burner)}, true)
		out := runCollector(t, asNobody(context.Background(), probeCaps, s.collectorArgs(cfg)...))
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "probes attached") },
			30*time.Second, 100*time.Millisecond)
		// Started now, as root: attached through its exec event, within the
		// second scopes waits before its first call.
		b, err := testutil.RunWithin(exec.Command(s.scopes, filepath.Join(t.TempDir(), "measured"), "1000"), testutil.Patient(time.Minute))
		require.NoError(t, err, "%s", b)
		durations := regexp.MustCompile(`probe\.duration_ns: Int\(\d+\)`)
		// scopes.c's main thread runs timed_scope 5 times for at least 10 ms
		// (and an 8 ms call may last 10 on a loaded machine).
		require.Eventually(t, func() bool { return len(durations.FindAllString(out.String(), -1)) >= 5 },
			30*time.Second, 100*time.Millisecond, "probe records")
		require.Eventually(t, func() bool { return stringTableEntry("burn_hot").MatchString(out.String()) },
			30*time.Second, 200*time.Millisecond, "profiles too")
		assert.NotContains(t, out.String(), "lacks CAP_")
	})

	t.Run("binaries under root-only directories with CAP_DAC_READ_SEARCH added", func(t *testing.T) {
		cfg := s.config(t, []int{s.start(t, s.private)}, false)
		out := runCollector(t, asNobody(context.Background(), privateCaps, s.collectorArgs(cfg)...))
		require.Eventually(t, func() bool { return stringTableEntry("secret_hot").MatchString(out.String()) },
			30*time.Second, 200*time.Millisecond, "the private binary's frames")
	})

	for _, missing := range []string{"bpf", "perfmon"} {
		name := "CAP_" + strings.ToUpper(missing)
		t.Run("without "+name+" Start names it", func(t *testing.T) {
			var caps []string
			for _, c := range profileCaps {
				if c != missing {
					caps = append(caps, c)
				}
			}
			b, err := testutil.RunWithin(asNobody(context.Background(), caps, s.collectorArgs(s.config(t, []int{os.Getpid()}, false))...), testutil.Patient(time.Minute))
			out := string(b)
			require.Error(t, err, "the collector must not start")
			assert.Contains(t, out, `failed to start "bpfprofiler" receiver`)
			assert.Contains(t, out, "the collector lacks "+name+"; run as root or grant it", out)
			assert.NotContains(t, out, "MEMLOCK")
		})
	}
}
