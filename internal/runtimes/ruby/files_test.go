package ruby

import (
	"debug/elf"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// debianLib opens Debian's libruby<version> of arch, unpacked from its
// package (a file of any arch is read, not run).
func debianLib(t *testing.T, arch, version string) *elf.File {
	t.Helper()
	suite := testutil.Bookworm
	for _, v := range testutil.RubyVersions {
		if v.Version == version {
			suite = v.Suite
		}
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	root := testutil.DebianRoot(t, suite, arch, "libruby"+version, "libruby"+version)
	f, err := elf.Open(filepath.Join(root, "usr/lib", triplet, "libruby-"+version+".so."+version))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// What the files of Debian's libruby 3.1 (bookworm 3.1.2-7+deb12u1) and
// 3.3 (sid 3.3.8-2.2), amd64 and arm64, give: vm_exec_core's range (the
// FDE objdump shows holding the handlers) and ruby_current_ec's TLS slot
// and offset (read in objdump -d of rb_thread_current and readelf -r),
// and ruby_global_symbols (objdump -d of rb_sym_immortal_count).
var debianFiles = []struct {
	arch, version        string
	entryStart, entryEnd uint64
	slot, offset         uint64
	symbols              uint64
}{
	{"amd64", "3.1", 0x24ebd0, 0x253047, 0x3aea48, 8, 0x3af1c0},
	{"amd64", "3.3", 0x27f860, 0x284a8c, 0x45fab8, 16, 0x460160},
	{"arm64", "3.1", 0x23f9e0, 0x244210, 0x37f3e8, 8, 0x380180},
	{"arm64", "3.3", 0x2726ac, 0x2779bc, 0x45f2d8, 8, 0x460148},
}

func TestSymbolsAddressDebian(t *testing.T) {
	for _, c := range debianFiles {
		t.Run(c.arch+"-"+c.version, func(t *testing.T) {
			f := debianLib(t, c.arch, c.version)
			addr, err := SymbolsAddress(f)
			require.NoError(t, err)
			require.Equal(t, c.symbols, addr)
			in, err := Detect(f)
			require.NoError(t, err)
			require.Equal(t, c.symbols, in.Symbols)
		})
	}
}

func TestEntryRangeDebian(t *testing.T) {
	for _, c := range debianFiles {
		t.Run(c.arch+"-"+c.version, func(t *testing.T) {
			f := debianLib(t, c.arch, c.version)
			start, end, err := EntryRange(f)
			require.NoError(t, err)
			t.Logf("vm_exec_core [%#x, %#x), %d bytes", start, end, end-start)
			require.Equal(t, [2]uint64{c.entryStart, c.entryEnd}, [2]uint64{start, end})
		})
	}
}

func TestECTLSOffsetDebian(t *testing.T) {
	for _, c := range debianFiles {
		t.Run(c.arch+"-"+c.version, func(t *testing.T) {
			f := debianLib(t, c.arch, c.version)
			got, err := ECTLSOffset(f)
			require.NoError(t, err)
			require.Equal(t, ECTLS{Offset: c.offset, Slot: c.slot}, got)
			var tls *elf.Prog
			for _, p := range f.Progs {
				if p.Type == elf.PT_TLS {
					tls = p
				}
			}
			require.NotNil(t, tls, "libruby has a TLS segment")
			require.Less(t, got.Offset+8, tls.Memsz+1, "ruby_current_ec lies in the TLS segment")
		})
	}
}

// handlerTable takes the one run of exactly n relocations into one
// function: not a shorter or longer run, not a run across functions, not
// two candidates.
func TestHandlerTable(t *testing.T) {
	fdes := []cfi.Range{{Start: 0x100, End: 0x200}, {Start: 0x200, End: 0x300}, {Start: 0x1000, End: 0x2000}}
	run := func(off uint64, addends ...uint64) []reloc {
		var out []reloc
		for i, a := range addends {
			out = append(out, reloc{off + uint64(i)*8, a})
		}
		return out
	}
	cat := func(rs ...[]reloc) []reloc {
		var out []reloc
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		relocs []reloc
		want   cfi.Range
		ok     bool
	}{
		{"exact", run(0x10, 0x1000, 0x1800, 0x1004), fdes[2], true},
		{"between others", cat(run(0x8, 0x150), run(0x10, 0x1000, 0x1800, 0x1004), run(0x28, 0x250)), fdes[2], true},
		{"short", run(0x10, 0x1000, 0x1800), cfi.Range{}, false},
		{"long", run(0x10, 0x1000, 0x1800, 0x1004, 0x1008), cfi.Range{}, false},
		{"two functions", run(0x10, 0x100, 0x1f0, 0x200), cfi.Range{}, false},
		{"gap", cat(run(0x10, 0x1000, 0x1800), run(0x30, 0x1004)), cfi.Range{}, false},
		{"outside code", run(0x10, 0x50, 0x60, 0x70), cfi.Range{}, false},
		{"two tables", cat(run(0x10, 0x100, 0x110, 0x120), run(0x100, 0x1000, 0x1800, 0x1004)), cfi.Range{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := handlerTable(c.relocs, fdes, 3)
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.want, got)
		})
	}
}

// Runtime.EntryCode: YJIT's code is a Ruby process's private anonymous
// executable memory; files, shared memory and data are not.
func TestEntryCode(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"7f0008000000-7f000c000000 r-xp 00000000 00:00 0 ", true},
		{"7f0008000000-7f000c000000 rwxp 00000000 00:00 0 ", true},
		{"7f0008000000-7f000c000000 rw-p 00000000 00:00 0 ", false},
		{"7f0008000000-7f000c000000 r-xs 00000000 00:01 1253 /dev/zero (deleted)", false},
		{"55f000000000-55f000100000 r-xp 00001000 08:01 42 /usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2", false},
		{"7ffd2d7f1000-7ffd2d7f3000 r-xp 00000000 00:00 0 [vdso]", false},
	} {
		maps, err := procfs.ParseMaps(strings.NewReader(c.line + "\n"))
		require.NoError(t, err)
		require.Len(t, maps, 1)
		require.Equal(t, c.want, Runtime.EntryCode(maps[0]), c.line)
	}
}
