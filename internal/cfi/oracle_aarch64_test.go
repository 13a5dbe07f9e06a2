package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// debianARM64 are aarch64 files of Debian bookworm's arm64 packages.
var debianARM64 = []struct{ pkg, path string }{
	{"libc6", "lib/aarch64-linux-gnu/libc.so.6"},
	{"libc6", "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"},
	{"xz-utils", "usr/bin/xz"},
	{"libpython3.11", "usr/lib/aarch64-linux-gnu/libpython3.11.so.1.0"},
}

// TestReadelfOracleARM64 compares the tables of aarch64 files with what
// readelf (whose DWARF dump reads any machine's) makes of their CFI, row by
// row as TestReadelfOracle does, and checks their PLT rows.
func TestReadelfOracleARM64(t *testing.T) {
	readelf := requireReadelf(t)
	for _, file := range debianARM64 {
		t.Run(filepath.Base(file.path), func(t *testing.T) {
			path := filepath.Join(testutil.DebianPackage(t, "arm64", file.pkg), file.path)
			checkAgainstReadelf(t, readelf, path)
			checkPLT(t, path)
		})
	}
}

// TestBuildSeparateDebugFileARM64: an aarch64 debug file's .eh_frame and
// .plt are NOBITS; it gets no rows.
func TestBuildSeparateDebugFileARM64(t *testing.T) {
	debugFiles, err := filepath.Glob(filepath.Join(testutil.DebianPackage(t, "arm64", "libc6-dbg"), "usr/lib/debug/.build-id/*/*.debug"))
	require.NoError(t, err)
	checked := 0
	for _, path := range debugFiles {
		f, err := elf.Open(path)
		require.NoError(t, err)
		if plt := f.Section(".plt"); plt != nil {
			require.Equal(t, elf.SHT_NOBITS, plt.Type, path)
			table, err := Build(f)
			require.NoError(t, err, path)
			require.Empty(t, table.Rows, path)
			checked++
		}
		f.Close()
	}
	require.NotZero(t, checked, "no debug file with a .plt")
}

// checkPLT checks the rows of every instruction of the file's .plt: CFA =
// sp (sp+16 in the lazy header after its push), the return address in x30.
func checkPLT(t *testing.T, path string) {
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	table, err := Build(f)
	require.NoError(t, err)
	plt := f.Section(".plt")
	require.NotNil(t, plt, path)
	head := make([]byte, 4)
	_, err = plt.ReadAt(head, 0)
	require.NoError(t, err)
	require.Equal(t, []byte{0xf0, 0x7b, 0xbf, 0xa9}, head, "PLT0 starts with stp x16, x30, [sp, #-16]!")
	for pc := plt.Addr; pc < plt.Addr+plt.Size; pc += 4 {
		want := linkRow(0, 0)
		if pc > plt.Addr && pc < plt.Addr+plt0Size {
			want.CFAOffset = 16
		}
		got := table.Lookup(pc)
		got.PC = 0
		require.Equal(t, want, got, "%s: .plt+%#x", path, pc-plt.Addr)
	}
}

var (
	reRawAdvance   = regexp.MustCompile(`^\s+DW_CFA_(?:advance_loc\d?: \d+ to|set_loc:) ([0-9a-f]+)`)
	reRawUndefined = regexp.MustCompile(`^\s+DW_CFA_undefined: r30 `)
)

// markUndefinedRA sets raUndefined on the rows of fdes at and after a
// DW_CFA_undefined of x30 in readelf's dump of the raw instructions: in its
// interpreted rows, an undefined x30 and one no instruction has mentioned
// are both "u". (A later restore of x30 is not followed; real files do not
// have one.)
func markUndefinedRA(t *testing.T, readelf, path string, fdes []*readelfFDE) {
	out, err := testutil.OutputWithin(exec.Command(readelf, "--debug-dump=frames", "--debug-dump=no-follow-links", path), testutil.Patient(2*time.Minute))
	require.NoError(t, err)
	type key struct {
		section    string
		start, end uint64
	}
	undefinedAt := map[key]uint64{}
	var (
		section string
		cur     *key
		loc     uint64
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := reSection.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		if m := reEntry.FindStringSubmatch(line); m != nil {
			cur = nil
			if m[2] == "FDE" {
				start, _ := strconv.ParseUint(m[4], 16, 64)
				end, _ := strconv.ParseUint(m[5], 16, 64)
				cur, loc = &key{section, start, end}, start
			}
			continue
		}
		if cur == nil {
			continue
		}
		if m := reRawAdvance.FindStringSubmatch(line); m != nil {
			loc, _ = strconv.ParseUint(m[1], 16, 64)
		} else if reRawUndefined.MatchString(line) {
			if _, ok := undefinedAt[*cur]; !ok {
				undefinedAt[*cur] = loc
			}
		}
	}
	require.NoError(t, sc.Err())
	for _, fde := range fdes {
		at, ok := undefinedAt[key{fde.section, fde.start, fde.end}]
		for i := range fde.rows {
			fde.rows[i].raUndefined = ok && fde.rows[i].pc >= at
		}
	}
}
