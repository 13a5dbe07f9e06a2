package php

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestJITFrame reads the JIT row of Debian's php and php-fpm, amd64 and
// arm64: the rule of execute_ex's body (docs/php-layouts.md, "Unwinding
// JIT code"; amd64's checked live by TestJITFrameLive).
func TestJITFrame(t *testing.T) {
	for _, c := range []struct {
		arch, version string
		want          cfi.Row // PC aside
	}{
		// push 4; sub $0x78: CFA = rsp+160, rbp saved at CFA-32.
		{"amd64", "8.2", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 160, FPOffset: -32, RAOffset: -8}},
		// push %rbp; mov %rsp,%rbp: CFA = rbp+16 (JIT code keeps rbp).
		{"amd64", "8.4", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegFP, CFAOffset: 16, FPOffset: -16, RAOffset: -8}},
		// sub sp, sp, #0x90; stp x29, x30, [sp, #64]; add x29, sp, #0x40:
		// CFA = sp+144 = x29+80 (JIT code moves sp, keeps x29).
		{"arm64", "8.2", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegFP, CFAOffset: 80, FPOffset: -80, RAOffset: -72}},
		// sub sp, sp, #0xd0; stp x29, x30, [sp, #64]; add x29, sp, #0x40.
		{"arm64", "8.4", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegFP, CFAOffset: 144, FPOffset: -144, RAOffset: -136}},
	} {
		t.Run(c.arch+"/"+c.version, func(t *testing.T) {
			p, err := testutil.DebianPHPOf(c.arch, c.version)
			if err != nil {
				testutil.SkipOrFail(t, "Debian's PHP %s (%s): %v", c.version, c.arch, err)
			}
			root := filepath.Dir(filepath.Dir(filepath.Dir(p.Path)))
			for _, path := range []string{p.Path, filepath.Join(root, "usr/sbin/php-fpm"+c.version)} {
				f, err := elf.Open(path)
				require.NoError(t, err)
				defer f.Close()
				row, err := jitFrameOf(f)
				require.NoError(t, err, path)
				require.NotZero(t, row.PC)
				row.PC = 0
				require.Equal(t, c.want, row, path)
			}
		})
	}
}

// jitFrameOf is JITFrame of f with its rows.
func jitFrameOf(f *elf.File) (cfi.Row, error) {
	rows, err := cfi.BuildRows(f)
	if err != nil {
		return cfi.Row{}, err
	}
	return JITFrame(f, rows.All())
}

// TestBodyRow picks the rule covering most of a function's bytes.
func TestBodyRow(t *testing.T) {
	sp := func(pc uint64, off int32) cfi.Row {
		return cfi.Row{PC: pc, Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: off, RAOffset: -8}
	}
	for _, c := range []struct {
		name   string
		rows   []cfi.Row
		lo, hi uint64
		want   cfi.Row
		err    bool
	}{
		{"prologue, body, epilogue, body", []cfi.Row{sp(0x100, 8), sp(0x104, 160), sp(0x200, 8), sp(0x201, 160), {PC: 0x400}},
			0x100, 0x400, sp(0x104, 160), false},
		{"rows before and after", []cfi.Row{sp(0x0, 16), sp(0x100, 8), sp(0x108, 48), sp(0x300, 32)},
			0x100, 0x200, sp(0x108, 48), false},
		{"function in the middle of a row", []cfi.Row{sp(0x0, 24), {PC: 0x1000}}, 0x100, 0x200, sp(0x100, 24), false},
		{"no CFI", []cfi.Row{{PC: 0x0}}, 0x100, 0x200, cfi.Row{}, true},
		{"unsupported only", []cfi.Row{{PC: 0x100, Kind: cfi.KindUnsupported}}, 0x100, 0x200, cfi.Row{}, true},
		{"no rows", nil, 0x100, 0x200, cfi.Row{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := bodyRow(slices.Values(c.rows), c.lo, c.hi)
			if c.err {
				require.ErrorIs(t, err, errNoBodyRow)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

// TestJITBuffers finds the JIT buffer in mappings as /proc/PID/maps shows
// them.
func TestJITBuffers(t *testing.T) {
	const (
		cache = "7f0000000000-7f0008000000 rw-s 00000000 00:01 1253 /dev/zero (deleted)\n"
		jit   = "7f0008000000-7f000c000000 r-xs 08000000 00:01 1253 /dev/zero (deleted)\n"
		php   = "55f000000000-55f000100000 r-xp 00000000 08:01 42 /usr/bin/php8.2\n"
	)
	for _, c := range []struct {
		name, maps string
		want       []string // start-end
	}{
		{"jit", php + cache + jit, []string{"7f0008000000-7f000c000000"}},
		{"no jit", php + cache, nil},
		{"no opcache", php, nil},
		{"jit split by mprotect", php + cache +
			"7f0008000000-7f0009000000 r-xs 08000000 00:01 1253 /dev/zero (deleted)\n" +
			"7f0009000000-7f000c000000 r-xs 09000000 00:01 1253 /dev/zero (deleted)\n", []string{"7f0008000000-7f000c000000"}},
		{"jit being written", php + cache + strings.Replace(jit, "r-xs", "rw-s", 1), nil},
		{"no cache mapped at offset 0", php + jit, nil},
		{"executable cache (offset 0)", strings.Replace(cache, "rw-s", "rwxs", 1), nil},
		{"private /dev/zero", php + cache + strings.Replace(jit, "r-xs", "r-xp", 1), nil},
		{"other segment's inode", php + cache + strings.Replace(jit, " 1253 ", " 1254 ", 1), nil},
		{"two segments", php + cache + jit +
			"7f1000000000-7f1008000000 rw-s 00000000 00:01 2000 /dev/zero (deleted)\n" +
			"7f1008000000-7f100c000000 r-xs 08000000 00:01 2000 /dev/zero (deleted)\n",
			[]string{"7f0008000000-7f000c000000", "7f1008000000-7f100c000000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			maps, err := procfs.ParseMaps(strings.NewReader(c.maps))
			require.NoError(t, err)
			var got []string
			for _, m := range JITBuffers(maps) {
				got = append(got, fmt.Sprintf("%x-%x", m.Start, m.End))
				// Runtime.EntryCode: the buffer runs on execute_ex's frame.
				require.True(t, Runtime.EntryCode(m))
			}
			require.Equal(t, c.want, got)
		})
	}
}

// Runtime.EntryCode tells the JIT buffer from a PHP process's other
// executable mappings by the mapping alone (the symbolizer keeps only
// executable ones): shared anonymous memory past its segment's start.
func TestEntryCode(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"7f0008000000-7f000c000000 r-xs 08000000 00:01 1253 /dev/zero (deleted)", true},
		{"7f0000000000-7f0008000000 r-xs 00000000 00:01 1253 /dev/zero (deleted)", false}, // the segment's start: the cache
		{"7f0008000000-7f000c000000 rw-s 08000000 00:01 1253 /dev/zero (deleted)", false}, // being written
		{"7f0008000000-7f000c000000 r-xp 08000000 00:01 1253 /dev/zero (deleted)", false}, // private
		{"55f000000000-55f000100000 r-xp 00001000 08:01 42 /usr/bin/php8.2", false},
		{"7f0008000000-7f000c000000 r-xp 00000000 00:00 0 ", false},
	} {
		maps, err := procfs.ParseMaps(strings.NewReader(c.line + "\n"))
		require.NoError(t, err)
		require.Len(t, maps, 1)
		require.Equal(t, c.want, Runtime.EntryCode(maps[0]), c.line)
	}
}
