package main

import (
	"strings"
	"testing"
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

func TestNewestKernelPackage(t *testing.T) {
	names := []string{
		"linux-image-6.1.0-0.deb11.52-amd64", "linux-image-6.1.0-9-amd64", "linux-image-6.1.0-56-amd64",
		"linux-image-6.1.0-56-cloud-amd64", "linux-image-6.1.0-56-rt-amd64", "linux-image-6.1-amd64",
		"linux-image-6.12.117+deb12-amd64", "linux-image-6.12.95+deb12-amd64", "linux-image-6.12.117+deb12-amd64-dbg",
		"linux-image-5.10.0-46-amd64", "linux-image-5.10.0-9-amd64",
	}
	for series, want := range map[string]string{
		"6.1":  "linux-image-6.1.0-56-amd64",
		"6.12": "linux-image-6.12.117+deb12-amd64",
		"5.10": "linux-image-5.10.0-46-amd64",
	} {
		got, err := newestKernelPackage(series, names)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", series, got, err, want)
		}
	}
	if _, err := newestKernelPackage("4.19", names); err == nil {
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
