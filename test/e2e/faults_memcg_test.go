//go:build linux

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// newMemoryCgroup is a memory cgroup with limit (testutil.MemoryCgroup),
// removed at the test's cleanup.
func newMemoryCgroup(t *testing.T, limit uint64) *testutil.MemoryCgroup {
	t.Helper()
	cg, err := testutil.NewMemoryCgroup(fmt.Sprintf("bpfprofiler-fault-%d", time.Now().UnixNano()), limit)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := cg.Remove(10 * time.Second); err != nil {
			t.Log(err)
		}
	})
	return cg
}
