//go:build linux

package hotspot

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// startJVM runs testdata/Spin.java under jdk and returns its pid.
func startJVM(t *testing.T, jdk string) int {
	t.Helper()
	src, err := filepath.Abs("testdata/Spin.java")
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(jdk, "bin", "java"), "-Xmx64m", src)
	cmd.Dir = t.TempDir()
	return testutil.StartChild(t, cmd).Pid()
}

// libjvmOf finds pid's libjvm mapping: its file and load bias.
func libjvmOf(t *testing.T, pid int) (*elf.File, uint64, bool) {
	t.Helper()
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, 0, false
	}
	defer maps.Close()
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || filepath.Base(f[5]) != "libjvm.so" {
			continue
		}
		start, _ := strconv.ParseUint(strings.Split(f[0], "-")[0], 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		ef, err := elf.Open(f[5])
		require.NoError(t, err)
		t.Cleanup(func() { ef.Close() })
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD && off >= p.Off&^0xfff && off < p.Off+p.Filesz {
				return ef, start - off + p.Off - p.Vaddr, true
			}
		}
	}
	return nil, 0, false
}

// readJVM waits for the JVM of pid to publish its tables and reads them.
func readJVM(t *testing.T, pid int) *VMStructs {
	t.Helper()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	// While ld.so is still mapping libjvm, its data reads as the file's
	// bytes at the wrong offsets (a stride of 15154384 was seen): any error
	// is retried, as the loader retries at its next sweeps, and the last
	// one is reported.
	// ld.so's first mapping of libjvm already gives its load bias: the
	// file is opened once.
	var (
		vm   *VMStructs
		ef   *elf.File
		bias uint64
	)
	lastErr := errors.New("no libjvm mapped")
	assert.Eventually(t, func() bool {
		if ef == nil {
			var ok bool
			if ef, bias, ok = libjvmOf(t, pid); !ok {
				return false
			}
		}
		vm, lastErr = ReadProcess(mem, ef, bias)
		return lastErr == nil
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, lastErr)
	return vm
}

// Both JDKs publish the types, fields and constants the walker and namer
// use, with plausible values.
func TestReadRealJVMs(t *testing.T) {
	testutil.RequireBPF(t) // root: reads another process's memory
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			vm := readJVM(t, startJVM(t, jdk))
			nFields := 0
			for _, fs := range vm.Fields {
				nFields += len(fs)
			}
			t.Logf("%d fields of %d types, %d types, %d int and %d long constants", nFields, len(vm.Fields), len(vm.Types), len(vm.Ints), len(vm.Longs))
			if os.Getenv("HOTSPOT_DUMP") != "" {
				dump(t, vm)
			}
			assert.Greater(t, nFields, 500)
			assert.Greater(t, len(vm.Types), 300)
			assert.Equal(t, uint64(8), vm.Types["intptr_t"].Size)
			_, inherited := vm.FieldOf("nmethod", "_method")
			assert.True(t, inherited, "nmethod::_method, its own or CompiledMethod's")

			_, err := NewLayout(vm)
			require.NoError(t, err)
			wl, err := NewWalkerLayout(vm, elf.EM_X86_64)
			require.NoError(t, err)
			assert.Equal(t, []int64{-1, -3, -8}, []int64{wl.FrameSenderSP, wl.FrameMethod, wl.FrameBCP}, "x86-64 interpreter frames")
		})
	}
}

// The code cache of a running JVM is found and walked: its heaps, the
// blobs in them, and the compiled method that burns the CPU named from the
// nmethod found through the segment map, under both JDKs.
func TestCodeCacheOfRealJVMs(t *testing.T) {
	testutil.RequireBPF(t)
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			pid := startJVM(t, jdk)
			vm := readJVM(t, pid)
			l, err := NewLayout(vm)
			require.NoError(t, err)
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			require.NoError(t, err)
			defer mem.Close()
			// Spin.spin is compiled within seconds (C1, then C2).
			var names map[string]int
			var methods map[string]bool
			var cc *CodeCache
			require.Eventually(t, func() bool {
				// The code cache is set up after the tables are published.
				if cc, err = ReadCodeCache(mem, l); err != nil {
					return false
				}
				names, methods = blobsOf(t, mem, l, cc)
				return methods["Spin.spin (J)J"]
			}, 30*time.Second, 500*time.Millisecond, "Spin.spin compiled; methods %v, last error %v", &methods, &err)
			require.NotEmpty(t, cc.Heaps)
			t.Logf("blobs by name: %v; %d compiled methods", names, len(methods))
			assert.Positive(t, names["Interpreter"], "the template interpreter is a blob")
			assert.Greater(t, names["nmethod"], 10)
			assert.True(t, methods["Spin.main ([Ljava/lang/String;)V"] || len(methods) > 20, "other methods named too")

			// The walker's entry: every heap, up to its reserved end, and
			// the interpreter's code inside one of them.
			b, err := WalkerProc(mem, jvmAddr(t, pid), elf.EM_X86_64)
			require.NoError(t, err)
			var p walkerProc
			_, err = binary.Decode(b, binary.NativeEndian, &p)
			require.NoError(t, err)
			require.Equal(t, uint32(len(cc.Heaps)), p.HeapsN)
			inHeap := false
			for _, h := range p.Heaps[:p.HeapsN] {
				committed, ok := cc.Heap(h.Low)
				require.True(t, ok, "heap at %#x", h.Low)
				assert.GreaterOrEqual(t, h.High, committed.High)
				inHeap = inHeap || p.InterpLow >= h.Low && p.InterpHigh <= h.High
			}
			assert.True(t, inHeap, "interpreter [%#x, %#x) in a heap", p.InterpLow, p.InterpHigh)
			assert.Equal(t, []int16{-1, -3, -8}, []int16{p.InterpSenderSP, p.InterpMethod, p.InterpBCP}, "interpreter frame slots (frame_x86.hpp)")
		})
	}
}

// eachBlob calls fn with every blob of the code cache (at each block
// start of each heap's segment map): an address 16 bytes into its block,
// its name, and for an nmethod its method.
func eachBlob(t *testing.T, mem *os.File, l *Layout, cc *CodeCache, fn func(pc uint64, name string, m *Method)) {
	for _, h := range cc.Heaps {
		segs := make([]byte, (h.High-h.Low)>>h.Log2Segment)
		_, err := mem.ReadAt(segs, int64(h.Segmap))
		require.NoError(t, err)
		for i, b := range segs {
			if b != 0 {
				continue
			}
			pc := h.Low + uint64(i)<<h.Log2Segment
			blob, err := BlobAt(mem, l, h, pc)
			if err != nil {
				// The JVM freed or merged the block since segs was read
				// (seen on OpenJDK 17: "in no block").
				continue
			}
			name, err := BlobName(mem, l, blob)
			if err != nil {
				continue // freed meanwhile
			}
			var m *Method
			if name == "nmethod" {
				if method, err := MethodOf(mem, l, blob); err == nil {
					if read, err := ReadMethod(mem, l, method); err == nil {
						m = &read
					}
				}
			}
			fn(pc+l.BlockHeaderSize+16, name, m)
		}
	}
}

// blobsOf counts the blobs by name and names the compiled methods.
func blobsOf(t *testing.T, mem *os.File, l *Layout, cc *CodeCache) (map[string]int, map[string]bool) {
	names, methods := map[string]int{}, map[string]bool{}
	eachBlob(t, mem, l, cc, func(_ uint64, name string, m *Method) {
		names[name]++
		if m != nil {
			methods[m.String()+" "+m.Signature] = true
		}
	})
	return names, methods
}

func dump(t *testing.T, vm *VMStructs) {
	for typ, fs := range vm.Fields {
		for name, f := range fs {
			t.Logf("F %s::%s %s static=%v off=%d addr=%#x", typ, name, f.Type, f.Static, f.Offset, f.Address)
		}
	}
	for name, ty := range vm.Types {
		t.Logf("T %s : %s size %d", name, ty.Super, ty.Size)
	}
	for name, v := range vm.Ints {
		t.Logf("I %s = %d", name, v)
	}
	for name, v := range vm.Longs {
		t.Logf("L %s = %d", name, v)
	}
}

// A Namer names addresses inside blobs of a running JVM: inside the code
// of the compiled Spin.spin as it, with its source file, inside the
// interpreter as "Interpreter"; an address outside the code cache is not
// code.
func TestNamerOfRealJVMs(t *testing.T) {
	testutil.RequireBPF(t)
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			pid := startJVM(t, jdk)
			vm := readJVM(t, pid)
			l, err := NewLayout(vm)
			require.NoError(t, err)
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			require.NoError(t, err)
			defer mem.Close()
			ef, bias, ok := libjvmOf(t, pid)
			require.True(t, ok)
			syms, err := ExportedSymbols(ef)
			require.NoError(t, err)
			n := NewNamer(mem, func(s string) (uint64, bool) { v, ok := syms[s]; return v + bias, ok })

			want := map[string]uint64{} // a pc inside the blob of each name
			require.Eventually(t, func() bool {
				cc, err := ReadCodeCache(mem, l)
				if err != nil {
					return false
				}
				for k, v := range blobStarts(t, mem, l, cc) {
					want[k] = v
				}
				return want["Spin.spin"] != 0 && want["Interpreter"] != 0
			}, 30*time.Second, 500*time.Millisecond)
			now := time.Now()
			spin, err := n.At(want["Spin.spin"], now)
			require.NoError(t, err)
			assert.Equal(t, "Spin.spin", spin.Name())
			assert.Equal(t, Method{Class: "Spin", Name: "spin", Signature: "(J)J", SourceFile: "Spin.java"}, spin.Method)
			interp, err := n.At(want["Interpreter"], now)
			require.NoError(t, err)
			assert.Equal(t, "Interpreter", interp.Name())
			_, err = n.At(0x1000, now)
			assert.ErrorIs(t, err, ErrNotCode)
		})
	}
}

// blobStarts returns, for each blob name and compiled method (by
// Class.method), an address inside one of its blobs.
func blobStarts(t *testing.T, mem *os.File, l *Layout, cc *CodeCache) map[string]uint64 {
	out := map[string]uint64{}
	eachBlob(t, mem, l, cc, func(pc uint64, name string, m *Method) {
		if m != nil {
			name = m.String()
		}
		out[name] = pc
	})
	return out
}

// jvmAddr gives the run-time addresses of pid's libjvm exports.
func jvmAddr(t *testing.T, pid int) func(string) (uint64, bool) {
	t.Helper()
	ef, bias, ok := libjvmOf(t, pid)
	require.True(t, ok)
	syms, err := ExportedSymbols(ef)
	require.NoError(t, err)
	return func(s string) (uint64, bool) {
		v, ok := syms[s]
		return v + bias, ok
	}
}
