package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// build runs a compiler command in dir and fails the test on error.
func build(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := testutil.RunWithin(cmd, testutil.Patient(testutil.BuildTimeout))
	require.NoError(t, err, "%s %v: %s", name, args, out)
}

func buildC(t *testing.T, compiler, src string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath(compiler); err != nil {
		t.Skipf("%s not installed", compiler)
	}
	abs, err := filepath.Abs(filepath.Join("testdata", src))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(src, filepath.Ext(src)))
	args := append([]string{"-O0", "-fno-omit-frame-pointer", "-o", bin, abs}, flags...)
	build(t, ".", nil, compiler, args...)
	return bin
}

func buildGo(t *testing.T, flags ...string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("testdata", "goprog"))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "goprog")
	args := append([]string{"build", "-o", bin}, flags...)
	build(t, abs, []string{"GOWORK=off", "GOFLAGS=-buildvcs=false"}, "go", append(args, ".")...)
	return bin
}

// runFixture starts bin, reads its "name=0xaddr" lines up to "ready" and
// returns its pid and addresses. The process exits when the test ends.
func runFixture(t *testing.T, bin string) (uint32, map[string]uint64) {
	t.Helper()
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	c := testutil.StartChild(t, cmd)
	t.Cleanup(func() {
		stdin.Close()
		_ = c.Wait(t, testutil.Patient(time.Minute))
	})
	addrs := map[string]uint64{}
	lines := c.Until(t, testutil.Patient(time.Minute), func(line string) bool { return strings.HasPrefix(line, "ready") })
	for _, line := range lines[:len(lines)-1] {
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "unexpected fixture output %q", line)
		a, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
		require.NoError(t, err, line)
		addrs[k] = a
	}
	return uint32(c.Pid()), addrs
}

func testBinary() (string, error) { return os.Executable() }
