//go:build linux

package bpfprofilerreceiver

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
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
