package symbolize

import (
	"debug/elf"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// debugFixture is debugprog.c built with -g, its debug file split off with
// objcopy --only-keep-debug and the binary stripped of every symbol table
// but .dynsym (-rdynamic exports main there, never the static hidden_func).
type debugFixture struct {
	bin     string // stripped binary
	debug   string // its debug file, outside every place it is looked for
	buildID string
}

// otherBuildID is the build id of the "other build" fixture: the same code
// with another build id, whose debug file would name the functions right
// but must not be used.
const otherBuildID = "0123456789abcdef0123456789abcdef01234567"

func buildDebugFixture(t *testing.T, flags ...string) debugFixture {
	t.Helper()
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy not installed")
	}
	bin := buildC(t, "cc", "debugprog.c", append([]string{"-g", "-pthread", "-rdynamic"}, flags...)...)
	debug := filepath.Join(t.TempDir(), "debugprog.debug")
	build(t, ".", nil, "objcopy", "--only-keep-debug", bin, debug)
	build(t, ".", nil, "objcopy", "--strip-all", bin)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	require.Nil(t, f.Section(".symtab"), "stripped")
	dyn, err := f.DynamicSymbols()
	require.NoError(t, err)
	for _, s := range dyn {
		require.NotEqual(t, "hidden_func", s.Name, "a static function is in no dynamic symbol table")
	}
	id := gnuBuildID(f)
	require.NotEmpty(t, id, "gcc on Debian emits a GNU build id")
	return debugFixture{bin: bin, debug: debug, buildID: id}
}

// place copies src to dst, creating dst's directory.
func place(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, b, 0o644))
}

func buildIDPath(root, id string) string {
	return filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
}

func TestParseDebugLink(t *testing.T) {
	fx := buildDebugFixture(t)
	build(t, ".", nil, "objcopy", "--add-gnu-debuglink="+fx.debug, fx.bin)
	data, err := os.ReadFile(fx.bin)
	require.NoError(t, err)
	f, _, err := newELF(data)
	require.NoError(t, err)
	dl, ok := parseDebugLink(f, data)
	require.True(t, ok)
	assert.Equal(t, "debugprog.debug", dl.name)
	debug, err := os.ReadFile(fx.debug)
	require.NoError(t, err)
	assert.Equal(t, crc32.ChecksumIEEE(debug), dl.crc)
}

func TestDebugCandidates(t *testing.T) {
	link := debugLink{name: "libfoo.so.debug", crc: 1}
	tests := []struct {
		name    string
		buildID string
		bin     string
		hasLink bool
		dirs    []string
		want    []debugCandidate
	}{
		{name: "nothing to go by", bin: "/usr/lib/libfoo.so"},
		{
			name: "build id and debuglink", buildID: "abcdef12", bin: "/usr/lib/libfoo.so", hasLink: true,
			dirs: []string{"/usr/lib/debug", "/opt/debug"},
			want: []debugCandidate{
				{path: "/usr/lib/debug/.build-id/ab/cdef12.debug"},
				{path: "/opt/debug/.build-id/ab/cdef12.debug"},
				{path: "/usr/lib/libfoo.so.debug", link: true},
				{path: "/usr/lib/.debug/libfoo.so.debug", link: true},
				{path: "/usr/lib/debug/usr/lib/libfoo.so.debug", link: true},
				{path: "/opt/debug/usr/lib/libfoo.so.debug", link: true},
			},
		},
		{
			name: "debuglink naming the binary itself", bin: "/usr/lib/libfoo.so.debug", hasLink: true,
			want: []debugCandidate{{path: "/usr/lib/.debug/libfoo.so.debug", link: true}},
		},
		{name: "build id too short", buildID: "ab", bin: "/x", dirs: []string{"/usr/lib/debug"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, debugCandidates(tt.buildID, tt.bin, link, tt.hasLink, tt.dirs))
		})
	}
}

// smallDebugFile returns the debug file of testdata/dynlib.c built with -g.
func smallDebugFile(tb testing.TB) ([]byte, error) {
	dir := tb.TempDir()
	lib, debug := filepath.Join(dir, "libdyn.so"), filepath.Join(dir, "libdyn.debug")
	src, err := filepath.Abs(filepath.Join("testdata", "dynlib.c"))
	if err != nil {
		return nil, err
	}
	for _, cmd := range [][]string{
		{"cc", "-shared", "-fPIC", "-O0", "-g", "-o", lib, src},
		{"objcopy", "--only-keep-debug", lib, debug},
	} {
		if _, err := testutil.RunWithin(exec.Command(cmd[0], cmd[1:]...), testutil.Patient(testutil.BuildTimeout)); err != nil {
			return nil, err
		}
	}
	return os.ReadFile(debug)
}

func FuzzDebugFile(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	if seed, err := smallDebugFile(f); err == nil {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ef *elf.File
		func() {
			defer func() { _ = recover() }() // debug/elf's own panics are not ours
			ef, _, _ = newELF(data)
		}()
		if ef == nil {
			return
		}
		parseDebugLink(ef, data)
		raw, err := parseDebugFile(data, nil, debugCandidate{link: true}, "", debugLink{crc: crc32.ChecksumIEEE(data)})
		if err != nil {
			return
		}
		tab := functionTable(raw)
		for _, e := range tab.entries[:min(len(tab.entries), 16)] {
			tab.lookup(e.addr)
		}
	})
}

func TestChecksumByChunks(t *testing.T) {
	for _, n := range []int{0, 1, crcChunk - 1, crcChunk, crcChunk + 1, 3*crcChunk - 5} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + i>>9)
		}
		var released int
		got := checksum(data, func(b []byte) {
			if len(b) > crcChunk {
				t.Errorf("%d bytes: a chunk of %d released", n, len(b))
			}
			released += len(b)
		})
		if want := crc32.ChecksumIEEE(data); got != want {
			t.Errorf("%d bytes: CRC %08x, want %08x", n, got, want)
		}
		if released != n {
			t.Errorf("%d bytes: %d released", n, released)
		}
	}
}
