//go:build linux

package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// A frame in a process's [vdso] mapping is named from the kernel's vDSO
// image (its .dynsym), as debug/elf reads the same image: this process's
// clock_gettime, at its start and inside it.
func TestUserVDSO(t *testing.T) {
	data, err := readOwnVDSO()
	require.NoError(t, err)
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err)
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var fn elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && strings.HasSuffix(s.Name, "clock_gettime") && s.Size > 8 {
			fn = s
		}
	}
	require.NotEmpty(t, fn.Name, "the vDSO exports a clock_gettime")
	var names []string // its aliases (clock_gettime, __vdso_clock_gettime)
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value == fn.Value {
			names = append(names, s.Name)
		}
	}
	var base uint64 // the image's first loaded address, at the mapping's start
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			base = p.Vaddr - p.Off
			break
		}
	}
	pid := uint32(os.Getpid())
	maps, err := procfs.FS{Root: "/proc"}.Maps(pid)
	require.NoError(t, err)
	var start uint64
	for _, m := range maps {
		if m.Path == "[vdso]" {
			start = m.Start
		}
	}
	require.NotZero(t, start)

	s := New(Options{Proc: procfs.FS{Root: "/proc"}})
	defer s.Close()
	for _, off := range []uint64{0, 4} {
		frames := s.User(pid, []uint64{start + fn.Value - base + off})
		require.Len(t, frames, 1)
		require.Contains(t, names, frames[0].Function)
		require.Equal(t, report.FrameNative, frames[0].Type)
		require.Equal(t, "[vdso]", frames[0].Mapping.File)
	}
	// Past the image's functions: no name, the address kept.
	frames := s.User(pid, []uint64{start})
	require.Empty(t, frames[0].Function)
}
