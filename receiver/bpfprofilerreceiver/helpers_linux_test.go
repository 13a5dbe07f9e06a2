//go:build linux

package bpfprofilerreceiver

import (
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

func itoa(n int) string { return strconv.Itoa(n) }

func readSysctl(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_sample_rate")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sampleValue(s pprofile.Sample) int64 {
	var v int64
	for i := 0; i < s.Values().Len(); i++ {
		v += s.Values().At(i)
	}
	return v
}

// kernelFrames returns the function names of the sample's kernel locations.
func kernelFrames(dict pprofile.ProfilesDictionary, s pprofile.Sample) []string {
	var names []string
	stack := dict.StackTable().At(int(s.StackIndex()))
	for i := 0; i < stack.LocationIndices().Len(); i++ {
		loc := dict.LocationTable().At(int(stack.LocationIndices().At(i)))
		if !isKernel(dict, loc) {
			continue
		}
		for l := 0; l < loc.Lines().Len(); l++ {
			fn := dict.FunctionTable().At(int(loc.Lines().At(l).FunctionIndex()))
			names = append(names, dict.StringTable().At(int(fn.NameStrindex())))
		}
	}
	return names
}

func isKernel(dict pprofile.ProfilesDictionary, loc pprofile.Location) bool {
	for i := 0; i < loc.AttributeIndices().Len(); i++ {
		kv := dict.AttributeTable().At(int(loc.AttributeIndices().At(i)))
		if dict.StringTable().At(int(kv.KeyStrindex())) == "profile.frame.type" && kv.Value().Str() == "kernel" {
			return true
		}
	}
	return false
}

func fmtSscanf(s, format string, args ...any) (int, error) { return fmt.Sscanf(s, format, args...) }

// libcDebugInstalled reports whether the debug file of the libc that process
// pid maps is installed under /usr/lib/debug/.build-id; without it (and
// BPFPROFILER_REQUIRE_BPF=1) the test fails, else it is only logged.
func libcDebugInstalled(t *testing.T, pid int) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/" + itoa(pid) + "/maps")
	if err != nil {
		t.Logf("no maps: %v", err)
		return false
	}
	var libc string
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) == 6 && strings.HasPrefix(filepath.Base(f[5]), "libc.so") {
			libc = f[5]
		}
	}
	id := ""
	if f, err := elf.Open(libc); err == nil {
		if s := f.Section(".note.gnu.build-id"); s != nil {
			if b, err := s.Data(); err == nil && len(b) > 16 {
				id = hex.EncodeToString(b[16:]) // namesz, descsz, type, "GNU\0", then the id
			}
		}
		f.Close()
	}
	if len(id) > 2 {
		if _, err := os.Stat(filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")); err == nil {
			return true
		}
	}
	msg := fmt.Sprintf("libc %q (build id %q) has no debug file installed (apt-get install libc6-dbg)", libc, id)
	if os.Getenv(testutil.RequireBPFEnv) == "1" {
		t.Error(msg)
	} else {
		t.Log(msg)
	}
	return false
}
