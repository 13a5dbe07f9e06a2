//go:build linux

package capabilities

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Effective matches the CapEff line of /proc/self/status: the same bits in
// the same places.
func TestEffectiveMatchesProcStatus(t *testing.T) {
	f, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer f.Close()
	var want uint64
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			want, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			found = true
		}
	}
	require.True(t, found, "no CapEff in /proc/self/status")
	got, err := Effective()
	require.NoError(t, err)
	require.Equal(t, Set(want), got, "capget %#x, CapEff %#x", uint64(got), want)
}
