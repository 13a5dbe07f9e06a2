//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
)

// readPprof parses every <kind>-*.pb.gz file in dir.
func readPprof(t *testing.T, dir, kind string) []*profile.Profile {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, kind+"-*.pb.gz"))
	require.NoError(t, err)
	var out []*profile.Profile
	for _, f := range files {
		r, err := os.Open(f)
		require.NoError(t, err)
		p, err := profile.Parse(r)
		_ = r.Close()
		require.NoError(t, err, f)
		require.NoError(t, p.CheckValid(), f)
		out = append(out, p)
	}
	return out
}

// pprofTotals sums, over the kind's files in dir, the first value of the
// samples whose stack contains each function (once per sample).
func pprofTotals(t *testing.T, dir, kind string) map[string]int64 {
	t.Helper()
	totals := map[string]int64{}
	for _, p := range readPprof(t, dir, kind) {
		for _, s := range p.Sample {
			seen := map[string]bool{}
			for _, loc := range s.Location {
				for _, l := range loc.Line {
					if l.Function != nil && !seen[l.Function.Name] {
						seen[l.Function.Name] = true
						totals[l.Function.Name] += s.Value[0]
					}
				}
			}
		}
	}
	return totals
}

// pprofSampleTotal sums the first value of every sample in the kind's files
// in dir.
func pprofSampleTotal(t *testing.T, dir, kind string) int64 {
	t.Helper()
	var total int64
	for _, p := range readPprof(t, dir, kind) {
		for _, s := range p.Sample {
			total += s.Value[0]
		}
	}
	return total
}
