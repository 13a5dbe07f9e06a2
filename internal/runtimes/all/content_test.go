package all

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The runtimes are recognised in the real files of this machine by what
// they are, whatever their names: each runtime's own files may hold it (and
// Detect finds it where its walker runs), nobody else's do, nor native
// programs and libraries (the test's own Go binary has no dynamic symbols).
func TestRecognisedByContent(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	files := map[string][]string{
		"":     {"/usr/bin/xz", "/usr/bin/gzip", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6", self},
		"v8js": {"/usr/bin/node", testutil.Node(t, 24)},
	}
	for _, jdk := range testutil.JDKs(t) {
		files["jvm"] = append(files["jvm"], filepath.Join(jdk, "lib", "server", "libjvm.so"))
		files[""] = append(files[""], filepath.Join(jdk, "bin", "java")) // the launcher: libjvm comes by dlopen
	}
	for _, in := range testutil.Interpreters(t) {
		// pyenv's are linked to their libpython, which holds CPython;
		// Debian's holds it in the executable.
		libs, _ := filepath.Glob(filepath.Join(filepath.Dir(in.Path), "..", "lib", "libpython3.*.so.1.0"))
		if len(libs) > 0 {
			files["cpython"] = append(files["cpython"], libs...)
			files[""] = append(files[""], in.Path)
		} else {
			files["cpython"] = append(files["cpython"], in.Path)
		}
	}
	walks := map[string]bool{"cpython": true, "v8js": runtime.GOARCH == "amd64", "jvm": runtime.GOARCH == "amd64"}
	for holder, paths := range files {
		tested := 0
		for _, path := range paths {
			f, err := elf.Open(path)
			if err != nil {
				continue // not on this machine (another architecture's libc)
			}
			tested++
			for _, rt := range Runtimes {
				mine := rt.Name == holder
				assert.Equal(t, mine, rt.MayHold(f), "%s may hold %s", path, rt.Name)
				if mine && walks[rt.Name] {
					in, err := rt.Detect(f)
					assert.NoError(t, err, path)
					assert.NotNil(t, in, "%s in %s", rt.Name, path)
				}
			}
			f.Close()
		}
		require.NotZero(t, tested, "none of %q here", paths)
		t.Logf("%q: %d files", holder, tested)
	}
}
