package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

func TestParseRun(t *testing.T) {
	log := "\x1b[2J@@matrix kernel 6.1.0-56-amd64\n" +
		"@@matrix check TestStackStoreHelpers\n" +
		"=== RUN   TestStackStoreHelpers\n" +
		"    selftest_linux_test.go:50: matrix: id 5 twice\n" +
		"--- PASS: TestStackStoreHelpers (0.36s)\n" +
		"@@matrix exit TestStackStoreHelpers 0\n" +
		"@@matrix check TestCollectorEndToEnd\n" +
		"=== RUN   TestCollectorEndToEnd\n" +
		"    e2e_test.go:136: \n" +
		"        \tError Trace:\t/x/e2e_test.go:136\n" +
		"        \tError:      \tCondition never satisfied\n" +
		"        \tMessages:   \tthe OTLP endpoint received too few samples\n" +
		"    e2e_test.go:150: matrix: hot 0.500\n" +
		"--- FAIL: TestCollectorEndToEnd (60.08s)\n" +
		"@@matrix exit TestCollectorEndToEnd 1\n" +
		"@@matrix check TestCollectorOffCPUProfile\n" +
		"        \t" + strings.Repeat("verifier log ", 200_000) + "\n" + // one line of 2.6 MB
		"=== RUN   TestCollectorOffCPUProfile\n" +
		"--- PASS: TestCollectorOffCPUProfile (1s)\n" +
		"@@matrix exit TestCollectorOffCPUProfile 2\n" +
		"@@matrix check TestCollectorProbeLogs\n"
	var r kernelResult
	parseRun(&r, log)
	if r.uname != "6.1.0-56-amd64" || r.done {
		t.Errorf("uname %q done %v", r.uname, r.done)
	}
	tests := []struct {
		test            string
		ran, passed     bool
		figure, failure string
	}{
		{"TestStackStoreHelpers", true, true, "id 5 twice", ""},
		{"TestCollectorEndToEnd", true, false, "hot 0.500", "the OTLP endpoint received too few samples"},
		{"TestCollectorOffCPUProfile", true, false, "", ""}, // a PASS line but a non-zero exit
		{"TestCollectorProbeLogs", false, false, "", ""},    // cut off
	}
	for _, tt := range tests {
		got := r.checks[tt.test]
		if got.ran != tt.ran || got.passed != tt.passed || got.figure != tt.figure || got.failure != tt.failure {
			t.Errorf("%s: got %+v, want ran %v passed %v figure %q failure %q", tt.test, got, tt.ran, tt.passed, tt.figure, tt.failure)
		}
	}
	if !r.failed() {
		t.Error("a failed run reads as passed")
	}
	table := renderTable([]kernelResult{r})
	for _, want := range []string{"| 6.1.0-56-amd64 |", "✔ id 5 twice", "✗ the OTLP endpoint received too few samples; hot 0.500", "✗ not run"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestKernelPackages(t *testing.T) {
	names := []string{
		"linux-image-6.1.0-0.deb11.52-amd64", "linux-image-6.1.0-9-amd64", "linux-image-6.1.0-56-amd64",
		"linux-image-6.1.0-56-cloud-amd64", "linux-image-6.1.0-56-rt-amd64", "linux-image-6.1-amd64",
		"linux-image-6.12.117+deb12-amd64", "linux-image-6.12.95+deb12-amd64", "linux-image-6.12.117+deb12-amd64-dbg",
		"linux-image-5.10.0-46-amd64", "linux-image-5.10.0-9-amd64",
		"linux-image-6.1.0-50-arm64", "linux-image-6.1.0-50-arm64-unsigned", "linux-image-6.1.0-50-cloud-arm64",
		"linux-image-6.12.117+deb12-arm64", "linux-image-6.12.117+deb12-arm64-16k", "linux-image-6.12.117+deb12-rt-arm64",
	}
	for spec, want := range map[string]string{
		"amd64/6.1":  "linux-image-6.1.0-56-amd64",
		"amd64/6.12": "linux-image-6.12.117+deb12-amd64",
		"amd64/5.10": "linux-image-5.10.0-46-amd64",
		"arm64/6.1":  "linux-image-6.1.0-50-arm64",
		"arm64/6.12": "linux-image-6.12.117+deb12-arm64",
	} {
		arch, series, _ := strings.Cut(spec, "/")
		got, err := kernelPackages(arch, series, names)
		if err != nil || got[0] != want {
			t.Errorf("%s: got %q, %v; want %q first", spec, got, err, want)
		}
	}
	if got, _ := kernelPackages("amd64", "6.1", names); !slices.Equal(got, []string{"linux-image-6.1.0-56-amd64", "linux-image-6.1.0-9-amd64", "linux-image-6.1.0-0.deb11.52-amd64"}) {
		t.Errorf("6.1: got %q, want 56, 9, then bullseye's backport", got)
	}
	if _, err := kernelPackages("arm64", "5.10", names); err == nil {
		t.Error("no error for a series without arm64 packages")
	}
	if _, err := kernelPackages("amd64", "4.19", names); err == nil {
		t.Error("no error for a series without packages")
	}
}

func TestParseLDD(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
	got := strings.Join(parseLDD([]byte(out)), ",")
	if got != "/lib/x86_64-linux-gnu/libc.so.6,/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("got %s", got)
	}
}

func TestParseKernel(t *testing.T) {
	for in, want := range map[string]string{"6.1": "6.1", "amd64/6.1": "6.1", "arm64/6.12": "arm64/6.12", "host": "host"} {
		k, err := parseKernel(in)
		if err != nil || k.String() != want {
			t.Errorf("%s: got %v, %v; want %s", in, k, err, want)
		}
	}
	for _, bad := range []string{"riscv64/6.1", "arm64/", "arm64/host"} {
		if _, err := parseKernel(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// A check that does not run on an architecture reads n/a there, and does
// not fail the row; the boot's and the checks' times come from the markers.
func TestArchOnlyCheck(t *testing.T) {
	log := "@@matrix kernel 6.1.0-50-arm64\n@@matrix check TestStackStoreHelpers\n" +
		"--- PASS: TestStackStoreHelpers (0.36s)\n@@matrix exit TestStackStoreHelpers 0\n@@matrix done\n"
	saved := checks
	defer func() { checks = saved }()
	checks = []check{{"stack store", "bpf.test", "TestStackStoreHelpers", nil}, {"java", "e2e.test", "TestCollectorJavaFrames", []string{"amd64"}}}
	r := kernelResult{arch: "arm64"}
	parseRun(&r, log)
	var l timedLog
	for i, line := range strings.SplitAfter(log, "\n") {
		l.marks = append(l.marks, mark{strings.TrimSpace(line), time.Duration(i) * time.Second})
	}
	r.setTimes(l.marks)
	if r.failed() || r.summary() != "1 of 1 checks passed" {
		t.Errorf("failed %v, %s", r.failed(), r.summary())
	}
	if r.boot != 0 || r.times["TestStackStoreHelpers"] != 2*time.Second {
		t.Errorf("boot %v, times %v", r.boot, r.times)
	}
	table := renderTable([]kernelResult{r})
	if !strings.HasSuffix(table, "| n/a |\n") {
		t.Errorf("no n/a cell:\n%s", table)
	}
	r.arch = "amd64"
	if !r.failed() {
		t.Error("the java check did not run on amd64, yet the row passed")
	}
}

// timedLog finds the markers in output written in pieces, past long lines.
func TestTimedLogMarks(t *testing.T) {
	l := timedLog{start: time.Now()}
	out := "\x1b[2J@@matrix kernel 6.1\r\n" + strings.Repeat("x", 3*maxMarkLine) + "\n@@matrix check T\n@@matrix exit T 0\n@@matrix done"
	for i := 0; i < len(out); i += 1000 {
		_, _ = l.Write([]byte(out[i:min(i+1000, len(out))]))
	}
	var got []string
	for _, m := range l.marks {
		got = append(got, m.line)
	}
	if want := []string{"@@matrix kernel 6.1", "@@matrix check T", "@@matrix exit T 0"}; !slices.Equal(got, want) {
		t.Errorf("marks %q, want %q", got, want)
	}
	if l.buf.String() != out {
		t.Error("the log is not what was written")
	}
}

func TestSelectChecks(t *testing.T) {
	saved := checks
	defer func() { checks = saved }()
	if err := selectChecks([]string{"programs load", "cpu 75/25", "TestCollectorJavaFrames", "detach"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range checks {
		got = append(got, c.name)
	}
	if want := []string{"programs load", "cpu 75/25, chains", "java", "detach stress"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := selectChecks([]string{"load"}); err == nil {
		t.Error("no error for a name that is no check's")
	}
}

// Each check's go test timeout in the guest is its own, times the
// architecture's patience.
func TestInitScriptTimeouts(t *testing.T) {
	for _, tc := range []struct {
		patience int
		test     string
		want     string
	}{
		{1, "TestProgramsLoad", "-test.timeout=5m -test.run '^TestProgramsLoad$'"},
		{1, "TestCollectorCarriesGoLabels", "-test.timeout=8m -test.run '^TestCollectorCarriesGoLabels$'"},
		{3, "TestCollectorCarriesGoLabels", "-test.timeout=24m -test.run '^TestCollectorCarriesGoLabels$'"},
	} {
		script := initScript(&arch{name: "amd64", patience: tc.patience}, checks, testutil.Interpreter{Name: "sid-3.14", Path: "/sid/python3.14"})
		if !strings.Contains(script, tc.want) {
			t.Errorf("patience %d: the init script has no %q", tc.patience, tc.want)
		}
	}
}
