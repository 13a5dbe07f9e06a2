package pproffile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

var (
	t0 = time.Unix(1_700_000_000, 0)
	t1 = t0.Add(10 * time.Second)

	appMap  = &report.Mapping{Start: 0x400000, Limit: 0x800000, File: "/app/server", BuildIDGo: "go-build-id"}
	libcMap = &report.Mapping{Start: 0x7f0000000000, Limit: 0x7f0000200000, Offset: 0x28000, File: "/usr/lib/libc.so.6", BuildIDGNU: "c0ffee", BuildIDGo: "ignored"}
	anonMap = &report.Mapping{Start: 0x10000, Limit: 0x20000}
)

func hotStack() []report.Frame {
	return []report.Frame{
		{Address: 0xffffffff81000010, Function: "do_syscall_64", Type: report.FrameKernel},
		{Address: 0xffffffff81200020, Function: "entry_SYSCALL_64", Type: report.FrameKernel},
		{Address: 0x7f0000030000, Function: "write", File: "write.c", Line: 26, Type: report.FrameNative, Mapping: libcMap},
		{Address: 0x401000, Function: "main.inner", File: "main.go", Line: 10, Type: report.FrameGo, Inlined: true, Mapping: appMap},
		{Address: 0x401000, Function: "main.hot", File: "main.go", Line: 20, Type: report.FrameGo, Mapping: appMap},
		{Address: 0x402000, Function: "main.main", File: "main.go", Line: 30, Type: report.FrameGo, Mapping: appMap},
	}
}

func coldStack() []report.Frame {
	return []report.Frame{
		{Address: 0x403000, Function: "main.cold", File: "main.go", Line: 40, Type: report.FrameGo, Mapping: appMap},
		{Address: 0x402000, Function: "main.main", File: "main.go", Line: 30, Type: report.FrameGo, Mapping: appMap},
	}
}

func unsymbolizedStack() []report.Frame {
	return []report.Frame{
		{Address: 0x10010, Type: report.FrameNative, Mapping: anonMap},
		{Address: 0x999, Type: report.FrameNative},
		{Address: 0x402000, Function: "main.main", File: "main.go", Line: 30, Type: report.FrameGo, Mapping: appMap},
	}
}

func testProfile(kind report.Kind) report.Profile {
	period := int64(0)
	if kind == report.KindCPU {
		period = 10_000_000
	}
	return report.Profile{
		Kind: kind, Start: t0, End: t1, Period: period,
		Processes: []report.Process{
			{
				Identity: report.Identity{PID: 100, ExeName: "server", ExePath: "/app/server", Attributes: map[string]any{
					"process.pid": int64(100), "container.id": "abc123", "k8s.pod.name": "web-0", "host.name": "node-1",
				}},
				Samples: []report.Sample{
					{TID: 101, ThreadName: "worker", Frames: hotStack(), Value: 6},
					{TID: 100, ThreadName: "server", Frames: coldStack(), Value: 1},
				},
			},
			{
				Identity: report.Identity{PID: 200, ExeName: "server", ExePath: "/app/server"},
				Samples: []report.Sample{
					{TID: 200, Frames: hotStack(), Value: 2},
					{TID: 201, Frames: unsymbolizedStack(), Value: 1},
				},
			},
		},
	}
}

// stackNames renders a sample's stack as "leaf;...;root", locations with
// several lines as "inner+outer", unsymbolized ones as their address.
func stackNames(s *profile.Sample) string {
	var parts []string
	for _, loc := range s.Location {
		if len(loc.Line) == 0 {
			parts = append(parts, fmt.Sprintf("%#x", loc.Address))
			continue
		}
		var names []string
		for _, l := range loc.Line {
			names = append(names, l.Function.Name)
		}
		parts = append(parts, strings.Join(names, "+"))
	}
	return strings.Join(parts, ";")
}

type wantSample struct {
	stack    string
	values   []int64
	pid, tid int64
	labels   map[string][]string
}

func TestBuild(t *testing.T) {
	p100Labels := func(thread string) map[string][]string {
		return map[string][]string{
			"container.id": {"abc123"}, "k8s.pod.name": {"web-0"}, "host.name": {"node-1"},
			"process.executable.name": {"server"}, "thread.name": {thread},
		}
	}
	p200Labels := map[string][]string{"process.executable.name": {"server"}}
	const hot = "do_syscall_64;entry_SYSCALL_64;write;main.inner+main.hot;main.main"

	tests := []struct {
		name        string
		kind        report.Kind
		sampleTypes []string
		period      int64
		samples     []wantSample
	}{
		{
			name:        "cpu",
			kind:        report.KindCPU,
			sampleTypes: []string{"samples/count", "cpu/nanoseconds"},
			period:      10_000_000,
			samples: []wantSample{
				{stack: hot, values: []int64{6, 60_000_000}, pid: 100, tid: 101, labels: p100Labels("worker")},
				{stack: "main.cold;main.main", values: []int64{1, 10_000_000}, pid: 100, tid: 100, labels: p100Labels("server")},
				{stack: hot, values: []int64{2, 20_000_000}, pid: 200, tid: 200, labels: p200Labels},
				{stack: "0x10010;0x999;main.main", values: []int64{1, 10_000_000}, pid: 200, tid: 201, labels: p200Labels},
			},
		},
		{
			name:        "offcpu",
			kind:        report.KindOffCPU,
			sampleTypes: []string{"off_cpu/nanoseconds"},
			samples: []wantSample{
				{stack: hot, values: []int64{6}, pid: 100, tid: 101, labels: p100Labels("worker")},
				{stack: "main.cold;main.main", values: []int64{1}, pid: 100, tid: 100, labels: p100Labels("server")},
				{stack: hot, values: []int64{2}, pid: 200, tid: 200, labels: p200Labels},
				{stack: "0x10010;0x999;main.main", values: []int64{1}, pid: 200, tid: 201, labels: p200Labels},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prof, err := Build(testProfile(tt.kind))
			require.NoError(t, err)
			require.NoError(t, prof.CheckValid())

			var types []string
			for _, st := range prof.SampleType {
				types = append(types, st.Type+"/"+st.Unit)
			}
			assert.Equal(t, tt.sampleTypes, types)
			assert.Equal(t, tt.period, prof.Period)
			assert.Equal(t, t0.UnixNano(), prof.TimeNanos)
			assert.Equal(t, int64(10*time.Second), prof.DurationNanos)

			var got []wantSample
			for _, s := range prof.Sample {
				got = append(got, wantSample{
					stack: stackNames(s), values: s.Value, pid: s.NumLabel["pid"][0], tid: s.NumLabel["tid"][0], labels: s.Label,
				})
			}
			assert.Equal(t, tt.samples, got)

			// Survives serialization.
			var buf strings.Builder
			require.NoError(t, prof.Write(&buf))
			back, err := profile.ParseData([]byte(buf.String()))
			require.NoError(t, err)
			require.Len(t, back.Sample, len(tt.samples))
			for i, s := range back.Sample {
				assert.Equal(t, tt.samples[i].stack, stackNames(s))
			}
		})
	}
}

func TestBuildDictionary(t *testing.T) {
	prof, err := Build(testProfile(report.KindCPU))
	require.NoError(t, err)

	mappings := map[string]*profile.Mapping{}
	for _, m := range prof.Mapping {
		require.NotContains(t, mappings, m.File, "one mapping per file here")
		mappings[m.File] = m
	}
	require.Len(t, mappings, 4)
	assert.Equal(t, "/app/server", prof.Mapping[0].File, "executable first")
	assert.Equal(t, KernelMappingFile, prof.Mapping[3].File, "kernel last")
	for i, m := range prof.Mapping {
		assert.Equal(t, uint64(i+1), m.ID)
	}

	kernel := mappings[KernelMappingFile]
	assert.Equal(t, uint64(0xffffffff81000010), kernel.Start)
	assert.Equal(t, uint64(0xffffffff81200021), kernel.Limit)
	assert.True(t, kernel.HasFunctions)

	libc := mappings["/usr/lib/libc.so.6"]
	assert.Equal(t, "c0ffee", libc.BuildID, "GNU build id preferred")
	assert.Equal(t, [3]uint64{0x7f0000000000, 0x7f0000200000, 0x28000}, [3]uint64{libc.Start, libc.Limit, libc.Offset})
	assert.True(t, libc.HasFunctions && libc.HasFilenames && libc.HasLineNumbers)
	assert.False(t, libc.HasInlineFrames)

	app := mappings["/app/server"]
	assert.Equal(t, "go-build-id", app.BuildID)
	assert.True(t, app.HasFunctions && app.HasInlineFrames)

	assert.False(t, mappings[""].HasFunctions, "anonymous mapping has only unsymbolized frames")

	// Functions deduped by (name, file); locations shared between processes.
	names := map[string]bool{}
	for _, fn := range prof.Function {
		key := fn.Name + "@" + fn.Filename
		require.False(t, names[key], "duplicate function %s", key)
		names[key] = true
	}
	assert.Len(t, prof.Function, 7)
	// kernel x2, write, inner+hot, main, cold, anon, unmapped.
	assert.Len(t, prof.Location, 8)
	assert.Equal(t, prof.Sample[0].Location, prof.Sample[2].Location)
}

func TestBuildSeparatesAnonymousMappingsPerProcess(t *testing.T) {
	anon := func(pid uint32, fn string) report.Process {
		return report.Process{Identity: report.Identity{PID: pid}, Samples: []report.Sample{{
			TID: pid, Value: 1, Frames: []report.Frame{{Address: 0x10010, Function: fn, Type: report.FrameV8JS, Mapping: anonMap}},
		}}}
	}
	prof, err := Build(report.Profile{Kind: report.KindOffCPU, Processes: []report.Process{anon(1, "jsA"), anon(2, "jsB")}})
	require.NoError(t, err)
	assert.Len(t, prof.Mapping, 2)
	assert.Equal(t, "jsA", stackNames(prof.Sample[0]))
	assert.Equal(t, "jsB", stackNames(prof.Sample[1]))
}

func TestBuildErrors(t *testing.T) {
	_, err := Build(report.Profile{Kind: "wall"})
	require.ErrorContains(t, err, `unknown profile kind "wall"`)
}

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "pprof")
	cpu := testProfile(report.KindCPU)
	off := testProfile(report.KindOffCPU)
	durations := testProfile(report.KindProbeDuration)
	durations.ProbeID = "node/callback"

	tests := []struct {
		name string
		p    report.Profile
		want string
	}{
		{"creates directory", cpu, "cpu-1700000010.pb.gz"},
		{"name taken", cpu, "cpu-1700000010-1.pb.gz"},
		{"name taken twice", cpu, "cpu-1700000010-2.pb.gz"},
		{"other kind", off, "offcpu-1700000010.pb.gz"},
		{"probe durations", durations, "probe_duration-node_callback-1700000010.pb.gz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, err := Write(dir, tt.p)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(dir, tt.want), path)

			st, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			prof, err := profile.Parse(f)
			require.NoError(t, err)
			require.NoError(t, prof.CheckValid())
			assert.Len(t, prof.Sample, 4)
		})
	}

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{
		"cpu-1700000010.pb.gz", "cpu-1700000010-1.pb.gz", "cpu-1700000010-2.pb.gz", "offcpu-1700000010.pb.gz",
		"probe_duration-node_callback-1700000010.pb.gz",
	}, names, "no temporary files left behind")

}

func TestWriteErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := Write(filepath.Join(file, "sub"), testProfile(report.KindCPU))
	require.ErrorContains(t, err, "create pprof directory")

	_, err = Write(t.TempDir(), report.Profile{Kind: "wall"})
	require.ErrorContains(t, err, "unknown profile kind")
}

func TestGoToolPprof(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	tests := []struct {
		kind report.Kind
		want []string
	}{
		{report.KindCPU, []string{"main.inner", "do_syscall_64", "main.cold", "Type: cpu"}},
		{report.KindOffCPU, []string{"main.inner", "do_syscall_64", "main.cold", "Type: off_cpu"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			path, err := Write(t.TempDir(), testProfile(tt.kind))
			require.NoError(t, err)
			cmd := exec.Command(goBin, "tool", "pprof", "-top", path)
			cmd.Env = append(os.Environ(), "PPROF_BINARY_PATH="+t.TempDir())
			out, err := testutil.RunWithin(cmd, testutil.Patient(2*time.Minute))
			require.NoError(t, err, "go tool pprof -top: %s", out)
			for _, w := range tt.want {
				assert.Contains(t, string(out), w)
			}
		})
	}
}

// Samples taken inside a probe scope carry its span id and probe; a probe's
// duration profile names its probe on every sample.
func TestBuildScopeLabels(t *testing.T) {
	p := testProfile(report.KindCPU)
	p.Processes[0].Samples[0].Link = &report.ScopeLink{SpanID: [8]byte{0xab, 0xcd, 1, 2, 3, 4, 5, 6}, ProbeID: "handler"}
	prof, err := Build(p)
	require.NoError(t, err)
	var labels []map[string][]string
	for _, s := range prof.Sample {
		labels = append(labels, map[string][]string{"span_id": s.Label["span_id"], "probe.id": s.Label["probe.id"]})
	}
	assert.Equal(t, map[string][]string{"span_id": {"abcd010203040506"}, "probe.id": {"handler"}}, labels[0])
	for _, l := range labels[1:] {
		assert.Equal(t, map[string][]string{"span_id": nil, "probe.id": nil}, l)
	}

	d := testProfile(report.KindProbeDuration)
	d.ProbeID = "handler"
	prof, err = Build(d)
	require.NoError(t, err)
	assert.Equal(t, "probe_duration", prof.SampleType[0].Type)
	assert.Equal(t, "nanoseconds", prof.SampleType[0].Unit)
	for _, s := range prof.Sample {
		assert.Equal(t, []string{"handler"}, s.Label["probe.id"])
	}
}
