package symbolize

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

const kallsymsFixture = `0000000000000000 A fixed_percpu_data
ffffffff81000000 T _text
ffffffff81000000 T startup_64
ffffffff81001000 T do_syscall_64
ffffffff81001200 t handle_irq
ffffffff81002000 D some_data
ffffffff81003000 T _etext
ffffffffc0a00000 t nft_do_chain	[nf_tables]
ffffffffc0a00400 t nft_lookup_eval	[nf_tables]
ffffffffc0b00000 t ext4_readpage	[ext4]
`

func writeKallsyms(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kallsyms")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestKernel(t *testing.T) {
	s := New(Options{KallsymsPath: writeKallsyms(t, kallsymsFixture)})
	tests := []struct {
		name     string
		stack    []uint64
		wantFunc []string
		wantFile []string
	}{
		{
			name:     "leaf exact, callers use addr-1",
			stack:    []uint64{0xffffffff81001000, 0xffffffff81001200, 0xffffffff81001201},
			wantFunc: []string{"do_syscall_64", "do_syscall_64", "handle_irq"},
			wantFile: []string{kernelMappingFile, kernelMappingFile, kernelMappingFile},
		},
		{
			name:     "modules",
			stack:    []uint64{0xffffffffc0a00410, 0xffffffffc0a00010, 0xffffffffc0b00100},
			wantFunc: []string{"nft_lookup_eval", "nft_do_chain", "ext4_readpage"},
			wantFile: []string{"[nf_tables]", "[nf_tables]", "[ext4]"},
		},
		{
			name:     "unknown addresses keep their address",
			stack:    []uint64{0x1000, 0xffffffff90000000, 0xffffffffc0f00000},
			wantFunc: []string{"", "", ""},
			wantFile: []string{"", "", ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames := s.Kernel(tt.stack)
			require.Len(t, frames, len(tt.stack))
			for i, f := range frames {
				assert.Equal(t, tt.stack[i], f.Address)
				assert.Equal(t, report.FrameKernel, f.Type)
				assert.Equal(t, tt.wantFunc[i], f.Function, i)
				file := ""
				if f.Mapping != nil {
					file = f.Mapping.File
				}
				assert.Equal(t, tt.wantFile[i], file, i)
			}
		})
	}
	st := s.Stats()
	assert.EqualValues(t, 6, st.FramesResolved)
	assert.EqualValues(t, 3, st.FramesUnsymbolized)
}

func TestKernelRefreshOnNewModule(t *testing.T) {
	path := writeKallsyms(t, kallsymsFixture)
	s := New(Options{KallsymsPath: path})
	s.kernelRefresh = 0
	frames := s.Kernel([]uint64{0xffffffffc0c00010})
	assert.Empty(t, frames[0].Function)
	require.NoError(t, os.WriteFile(path, []byte(kallsymsFixture+"ffffffffc0c00000 t xt_match\t[x_tables]\n"), 0o644))
	frames = s.Kernel([]uint64{0xffffffffc0c00010})
	assert.Equal(t, "xt_match", frames[0].Function)
	assert.Equal(t, "[x_tables]", frames[0].Mapping.File)
}

func TestKernelUnreadable(t *testing.T) {
	for name, path := range map[string]string{
		"missing": filepath.Join(t.TempDir(), "nope"),
		"hidden":  writeKallsyms(t, strings.ReplaceAll(kallsymsFixture, "ffffffff", "00000000")),
	} {
		t.Run(name, func(t *testing.T) {
			s := New(Options{KallsymsPath: path})
			frames := s.Kernel([]uint64{0xffffffff81001000, 0xffffffff81001200})
			require.Len(t, frames, 2)
			assert.Empty(t, frames[0].Function)
			assert.EqualValues(t, 2, s.Stats().FramesUnsymbolized)
		})
	}
}

func TestParseKallsymsErrors(t *testing.T) {
	for _, in := range []string{"ffffffff81000000 T\n", "zzzz T foo\n"} {
		_, err := parseKallsyms(strings.NewReader(in))
		assert.Error(t, err, in)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := New(Options{KallsymsPath: writeKallsyms(t, kallsymsFixture)})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				s.Kernel([]uint64{0xffffffff81001000})
				s.User(uint32(os.Getpid()), []uint64{0x1000})
				s.ForgetProcess(uint32(i))
				_ = s.Stats()
			}
		}()
	}
	wg.Wait()
}

func FuzzParseKallsyms(f *testing.F) {
	f.Add(kallsymsFixture)
	f.Add("ffffffffc0a00000 t x\t[\n")
	f.Fuzz(func(t *testing.T, s string) {
		ks, err := parseKallsyms(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, a := range []uint64{0, 1, 0xffffffff81001000, ^uint64(0)} {
			ks.lookup(a)
		}
		for _, sym := range ks.syms {
			if _, _, ok := ks.lookup(sym.addr); !ok {
				t.Fatalf("symbol %q at %#x not found", ks.name(sym), sym.addr)
			}
		}
	})
}

// TestKernelHost resolves a symbol of the running kernel when /proc/kallsyms
// shows addresses (root or kptr_restrict=0).
func TestKernelHost(t *testing.T) {
	f, err := os.Open(DefaultKallsymsPath)
	if err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	ks, err := parseKallsyms(f)
	f.Close()
	require.NoError(t, err)
	if len(ks.syms) == 0 {
		testutil.SkipOrFail(t, "kallsyms addresses hidden (not root?)")
	}
	var addr uint64
	for _, sym := range ks.syms {
		if ks.name(sym) == "schedule" {
			addr = sym.addr
		}
	}
	require.NotZero(t, addr)
	s := New(Options{})
	frames := s.Kernel([]uint64{addr + 1, addr + 5})
	assert.Equal(t, "schedule", frames[0].Function)
	assert.Equal(t, "schedule", frames[1].Function)
	assert.Equal(t, kernelMappingFile, frames[0].Mapping.File)
}
