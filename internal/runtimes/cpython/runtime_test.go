package cpython

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// walkerProc is bpf.CpuPythonProc field by field (name, offset, size), so
// its bytes are the C struct's (bpf/layout_test.go checks that one).
func TestWalkerProcLayout(t *testing.T) {
	ours, theirs := reflect.TypeOf(walkerProc{}), reflect.TypeOf(bpf.CpuPythonProc{})
	require.Equal(t, theirs.Size(), ours.Size())
	var want []string
	for i := range theirs.NumField() {
		if f := theirs.Field(i); f.Name != "_" {
			want = append(want, f.Name)
			g, ok := ours.FieldByName(f.Name)
			require.True(t, ok, f.Name)
			require.Equal(t, f.Offset, g.Offset, f.Name)
			require.Equal(t, f.Type.Size(), g.Type.Size(), f.Name)
		}
	}
	require.Equal(t, len(want), ours.NumField())
	require.Equal(t, Runtime.ProcMap, bpf.CpuMapPythonProcs)
	require.Equal(t, string(capture.CPython.Name()), Runtime.Name)
}

// The python_procs entry carries _PyRuntime's address in the process and
// the offsets of the version.
func TestWalkerProc(t *testing.T) {
	o, ok := offsetsFor(Version{3, 12, 1})
	require.True(t, ok)
	in := &Interpreter{Version: o.Version, RuntimeAddr: 0x1000, Offsets: o}
	var got bpf.CpuPythonProc
	b, err := in.WalkerProc(nil, 0x7f00_0000_0000)
	require.NoError(t, err)
	require.NoError(t, binary.Read(bytes.NewReader(b), binary.NativeEndian, &got))
	require.Equal(t, bpf.CpuPythonProc{
		Runtime: 0x7f00_0000_1000, InterpretersHead: 40, ThreadsHead: 72, ThreadNext: 8, ThreadId: 136,
		ThreadFrame: 56, FramePrevious: 8, FrameInstruction: 56, FrameOwner: 70, CodeAdaptive: 192,
		ViaCframe: 1, InstructionKind: uint8(InstructionPointer), EntryKind: uint8(EntryShimFrame),
	}, got)
}

// A file without _PyRuntime is no runtime, not an error.
func TestRuntimeDetectNotPython(t *testing.T) {
	f := openELF(t, "/bin/true")
	in, err := Runtime.Detect(f)
	require.NoError(t, err)
	require.Nil(t, in)
}

// countingMemory counts the reads made of it.
type countingMemory struct {
	*fakeMemory
	reads int
}

func (m *countingMemory) ReadAt(p []byte, off int64) (int, error) {
	m.reads++
	return m.fakeMemory.ReadAt(p, off)
}

// A code object is read once, then served from the cache until its
// recheck, when only its first line is read again.
func TestProcessCachesCode(t *testing.T) {
	mem := &countingMemory{fakeMemory: fakeCode(12, nil)}
	o, _ := offsetsFor(Version{3, 12, 0})
	p := (&Interpreter{Offsets: o}).Process(mem, 0)
	now := time.Unix(1000, 0)
	_, ok := p.Cached(fakeBase, 0, now)
	require.False(t, ok, "not read yet")
	f, err := p.Read(fakeBase, 0, now)
	require.NoError(t, err)
	require.Equal(t, "C.fn", f.Function)
	reads := mem.reads
	cached, ok := p.Cached(fakeBase, 0, now.Add(time.Second))
	require.True(t, ok)
	require.Equal(t, f, cached)
	require.Equal(t, reads, mem.reads, "cached")
	_, ok = p.Cached(fakeBase, 0, now.Add(recheck))
	require.False(t, ok, "due for a recheck")
	_, err = p.Read(fakeBase, 0, now.Add(recheck))
	require.NoError(t, err)
	require.Equal(t, reads+1, mem.reads, "first line read again")
	_, err = p.Read(fakeBase+8, 0, now)
	require.Error(t, err, "no code object there")
}
