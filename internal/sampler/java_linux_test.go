//go:build linux

package sampler

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A JVM started with no flag (no perf map, no frame pointers): the
// compiled Java method burning the CPU is named in its samples' leaf
// frame, with its source file, under OpenJDK 17 and Temurin 25.
func TestJavaLeafNamed(t *testing.T) {
	testutil.RequireBPF(t)
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaBurn.java")
			cmd := testutil.StartWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx64m", src, "30")
			pid := uint32(cmd.Process.Pid)
			time.Sleep(4 * time.Second) // compiled by then
			s := openSampler(t, Options{SamplesPerSecond: 99, TargetPIDs: []uint32{pid}})
			samples, _, _ := sampleFor(t, s, 5*time.Second)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			var total, named, withFile int
			for _, st := range samples {
				if st.PID != pid {
					continue
				}
				frames := sym.User(st.PID, st.Addresses(capture.UserFrame))
				total += int(st.Value)
				if len(frames) > 0 && frames[0].Function == "JavaBurn.spin" {
					named += int(st.Value)
					if frames[0].File == "JavaBurn.java" && frames[0].Type == "jvm" {
						withFile += int(st.Value)
					}
				}
			}
			t.Logf("JavaBurn.spin named in the leaf of %d of %d samples (%d with its file)", named, total, withFile)
			require.GreaterOrEqual(t, total, 100)
			assert.GreaterOrEqual(t, float64(named)/float64(total), 0.9)
			assert.Equal(t, named, withFile)
		})
	}
}
