//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// spansTrace is the trace id spans.c gives span first (0x10: A, 0x20: B).
func spansTrace(first byte) [16]byte {
	var id [16]byte
	for i := range id {
		id[i] = first + byte(i)
	}
	return id
}

// spansProgram builds spans.c as an executable defining the variable
// (local-exec) or as a program linking the SDK library built with dialect
// (TLS descriptors: gnu2).
func spansProgram(t *testing.T, dialect string) string {
	t.Helper()
	if dialect == "" {
		return testutil.BuildC(t, "spans.c")
	}
	src, dir := testutil.Workload(t, "spans.c"), t.TempDir()
	lib, prog := filepath.Join(dir, "libspans.so"), filepath.Join(dir, "spans")
	for _, args := range [][]string{
		{"-O1", "-shared", "-fPIC", "-mtls-dialect=" + dialect, "-DSPANS_SDK_ONLY", "-o", lib, src},
		{"-O1", "-DSPANS_PROGRAM_ONLY", "-o", prog, src, "-L" + dir, "-lspans", "-Wl,-rpath," + dir},
	} {
		if out, err := testutil.RunWithin(exec.Command("cc", args...), testutil.Patient(testutil.BuildTimeout)); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	return prog
}

// A program whose SDK publishes its thread context (OTEP 4947) burns 3 ms
// in span A, 1 ms in span B and 1 ms outside any span, in turn: its
// samples link to their span (A's 75% ± 5 of the linked ones), none outside
// a span is linked, span A's samples carry its http.route attribute (named
// by the process context's key map), a thread's waits in span C link to C
// off CPU, and the process is named by its process context; through OTLP and pprof labels, with the variable in the
// executable and in a library reached by TLS descriptors or by the legacy
// general dynamic model (the dynamic thread vector).
func TestCollectorLinksSamplesToThreadContext(t *testing.T) {
	testThreadContextLinks(t, []threadCtxBuild{{"executable", ""}})
}

// The same with the variable in a library (built here: the kernel matrix
// runs the executable's check alone, its guests having no C compiler).
func TestCollectorLinksSamplesToThreadContextInLibraries(t *testing.T) {
	testThreadContextLinks(t, []threadCtxBuild{{"library with TLS descriptors", "gnu2"}, {"library with the general dynamic model", "gnu"}})
}

// threadCtxBuild is how spans.c is built: as an executable (no dialect),
// or as a program linking its SDK library built with dialect.
type threadCtxBuild struct{ name, dialect string }

func testThreadContextLinks(t *testing.T, builds []threadCtxBuild) {
	bin := collectorBinary(t)
	for _, tt := range builds {
		t.Run(tt.name, func(t *testing.T) {
			prog := spansProgram(t, tt.dialect)
			// It outlives the collector's start and every wait below.
			work := testutil.StartWorkload(t, prog, fmt.Sprint(testutil.Patient(5*time.Minute).Seconds()))
			pid := work.Process.Pid
			pprofDir := t.TempDir()
			otlp, addr := startOTLPServer(t)
			out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 99}
    off_cpu: {enabled: true, min_block: 1ms}
    pprof: {directory: %s}
`, pid, pprofDir), addr))
			waitReady(t, out)

			var a, b, gap, gapLinked, wrong, routed int64
			count := func(received []pprofile.Profiles) {
				a, b, gap, gapLinked, wrong, routed = 0, 0, 0, 0, 0, 0
				for _, p := range received {
					for _, st := range pdata.Stacks(pdata.OfType(pdata.OfPID(p, pid), "samples")) {
						if len(st.Functions) == 0 {
							continue
						}
						linked := st.Link.TraceID != [16]byte{}
						switch leaf := strings.Join(st.Functions, " "); {
						case strings.Contains(leaf, "span_a_work"):
							if st.Link.TraceID == spansTrace(0x10) {
								a += st.Value
								if st.Attributes["http.route"] == "/checkout" {
									routed += st.Value
								}
							} else {
								wrong += st.Value
							}
						case strings.Contains(leaf, "span_b_work"):
							if st.Link.TraceID == spansTrace(0x20) {
								b += st.Value
							} else {
								wrong += st.Value
							}
						case strings.Contains(leaf, "gap_work"):
							gap += st.Value
							if linked {
								gapLinked += st.Value
							}
						}
					}
				}
			}
			var waited, waitedLinked int64
			countWaits := func(received []pprofile.Profiles) {
				waited, waitedLinked = 0, 0
				for _, p := range received {
					for _, st := range pdata.Stacks(pdata.OfType(pdata.OfPID(p, pid), "off_cpu")) {
						if !slices.Contains(st.Functions, "waiter_sleep") {
							continue
						}
						waited += st.Value
						if st.Link.TraceID == spansTrace(0x30) {
							waitedLinked += st.Value
						}
					}
				}
			}
			if !assert.Eventually(t, func() bool {
				count(otlp.all())
				countWaits(otlp.all())
				return a+b >= 400 && gap >= 50 && waited >= int64(time.Second)
			}, testutil.Patient(60*time.Second), 500*time.Millisecond) {
				t.Fatalf("too few samples: span A %d, span B %d, gap %d, off CPU in span C %v", a, b, gap, time.Duration(waited))
			}
			count(otlp.all())
			share := float64(a) / float64(a+b)
			t.Logf("span A %d, span B %d, gap %d (linked %d), unlinked or wrong in a span %d, A with http.route %d", a, b, gap, gapLinked, wrong, routed)
			matrixFigure(t, "span A %.3f of linked samples, gap linked %d of %d", share, gapLinked, gap)
			assert.InDelta(t, 0.75, share, 0.05, "span A's share of the linked samples")
			assert.Zero(t, gapLinked, "samples outside any span linked")
			assert.LessOrEqual(t, float64(wrong), 0.05*float64(a+b), "samples in a span not linked to it")
			assert.Equal(t, a, routed, "span A's samples with its http.route")
			countWaits(otlp.all())
			t.Logf("off CPU in waiter_sleep %v, linked to span C %v", time.Duration(waited), time.Duration(waitedLinked))
			assert.GreaterOrEqual(t, float64(waitedLinked), 0.95*float64(waited), "off-CPU time in span C linked to it")
			for _, p := range otlp.all() {
				if attrs, ok := pdata.ProcessAttributes(p)[int64(pid)]; ok {
					assert.Equal(t, "spans-checkout", attrs[attrkey.ServiceName], "the process context's service.name")
					break
				}
			}

			// pprof: trace_id, span_id and the attributes as labels.
			files, err := filepath.Glob(filepath.Join(pprofDir, "cpu-*.pb.gz"))
			require.NoError(t, err)
			require.NotEmpty(t, files)
			var labelled int64
			for _, f := range files {
				r, err := os.Open(f)
				require.NoError(t, err)
				prof, err := profile.Parse(r)
				r.Close()
				require.NoError(t, err)
				for _, s := range prof.Sample {
					if slices.Equal(s.Label["trace_id"], []string{fmt.Sprintf("%x", spansTrace(0x10))}) &&
						slices.Equal(s.Label["span_id"], []string{"9091929394959697"}) && slices.Equal(s.Label["http.route"], []string{"/checkout"}) {
						labelled += s.Value[0]
					}
				}
			}
			assert.Positive(t, labelled, "no pprof sample labelled with span A's trace_id, span_id and http.route")
		})
	}
}

// A record rewritten in place between two spans, invalid while it is
// written (spans.c flip): under sampling no sample carries a mix of the
// two spans' ids, a span's work links to that span only, and a sample taken
// mid-write links to none.
func TestCollectorNeverLinksATornRecord(t *testing.T) {
	bin := collectorBinary(t)
	work := testutil.StartWorkload(t, testutil.BuildC(t, "spans.c"), fmt.Sprint(testutil.Patient(60*time.Second).Seconds()), "flip")
	pid := work.Process.Pid
	otlp, addr := startOTLPServer(t)
	startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 999}
`, pid), addr))

	x, y := spansTrace(0x50), spansTrace(0x60)
	var right, wrong, midWrite, midWriteLinked int64
	var example string
	count := func() {
		right, wrong, midWrite, midWriteLinked = 0, 0, 0, 0
		for _, p := range otlp.all() {
			for _, st := range pdata.Stacks(pdata.OfPID(p, pid)) {
				id, linked := st.Link.TraceID, st.Link.TraceID != [16]byte{}
				switch {
				case slices.Contains(st.Functions, "rewrite"):
					midWrite += st.Value
					if linked && slices.Contains(st.Functions, "burn") {
						midWriteLinked += st.Value
					}
				case slices.Contains(st.Functions, "flip_x_work") && id == x, slices.Contains(st.Functions, "flip_y_work") && id == y:
					right += st.Value
				case linked && (id != x && id != y || slices.Contains(st.Functions, "flip_x_work") || slices.Contains(st.Functions, "flip_y_work")):
					wrong += st.Value
					example = fmt.Sprintf("%x in %v", id[:], st.Functions)
				}
			}
		}
	}
	if !assert.Eventually(t, func() bool { count(); return right >= 2000 && midWrite >= 20 }, testutil.Patient(60*time.Second), 500*time.Millisecond) {
		t.Fatalf("too few samples: %d linked right, %d mid-write", right, midWrite)
	}
	count()
	t.Logf("%d samples linked to their span, %d wrong, %d mid-write (%d of them linked)", right, wrong, midWrite, midWriteLinked)
	assert.Zero(t, wrong, "samples linked to another span or a torn id, e.g. %s", example)
	assert.Zero(t, midWriteLinked, "samples taken while the record was invalid, linked")
}
