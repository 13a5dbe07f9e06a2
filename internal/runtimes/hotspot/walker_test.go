package hotspot

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

// walkerProc is struct hotspot_proc as bpf2go generated it.
func TestWalkerProcLayout(t *testing.T) {
	require.Equal(t, binary.Size(bpf.CpuHotspotProc{}), binary.Size(walkerProc{}))
	p := walkerProc{HeapsN: 3, InterpSenderSP: -1, InterpMethod: -3, InterpBCP: -8, ConstMethodSize: 56, CodeIsOffset: 1}
	p.Heaps[2] = walkerHeap{Low: 1, High: 2, Segmap: 3, Log2Segment: 7}
	b, err := binary.Append(nil, binary.NativeEndian, &p)
	require.NoError(t, err)
	var got bpf.CpuHotspotProc
	_, err = binary.Decode(b, binary.NativeEndian, &got)
	require.NoError(t, err)
	require.Equal(t, uint32(3), got.HeapsN)
	require.Equal(t, uint64(3), got.Heaps[2].Segmap)
	require.Equal(t, uint32(7), got.Heaps[2].Log2Segment)
	require.Equal(t, []int16{-1, -3, -8}, []int16{got.InterpSenderSp, got.InterpMethod, got.InterpBcp})
	require.Equal(t, uint16(56), got.ConstMethodSize)
	require.Equal(t, uint8(1), got.CodeIsOffset)
}

// A walker entry's code ranges are its heaps' reserved ranges.
func TestCodeRanges(t *testing.T) {
	p := walkerProc{HeapsN: 2}
	p.Heaps[0] = walkerHeap{Low: 0x1000, High: 0x9000}
	p.Heaps[1] = walkerHeap{Low: 0x10000, High: 0x20000}
	b, err := binary.Append(nil, binary.NativeEndian, &p)
	require.NoError(t, err)
	require.Equal(t, [][2]uint64{{0x1000, 0x9000}, {0x10000, 0x20000}}, (&interpreter{}).CodeRanges(b))
	require.Nil(t, codeRanges([]byte{1, 2}), "not an entry")
}

// An interpreted frame's slots by machine: x86-64's and arm64's as
// frame_x86.hpp and frame_aarch64.hpp lay them out (arm64 keeps a padding
// word below the mdp), from the slots the JVM publishes (x86-64's) or the
// machine's known ones (arm64's VMStructs publish none).
func TestWalkerLayoutByMachine(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		machine               elf.Machine
		unpublished           bool
		senderSP, method, bcp int64
		err                   string
	}{
		{name: "x86-64", machine: elf.EM_X86_64, senderSP: -1, method: -3, bcp: -8},
		{name: "x86-64 unpublished", machine: elf.EM_X86_64, unpublished: true,
			err: "frame::interpreter_frame_sender_sp_offset, frame::interpreter_frame_last_sp_offset"},
		{name: "arm64 as its JVMs publish them", machine: elf.EM_AARCH64, unpublished: true, senderSP: -1, method: -3, bcp: -9},
		{name: "arm64 published", machine: elf.EM_AARCH64, senderSP: -1, method: -3, bcp: -9},
		{name: "riscv", machine: elf.EM_RISCV, err: "no interpreter frame layout for EM_RISCV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := jdk17Tables()
			vm.Fields["CodeBlob"]["_frame_complete_offset"] = Field{Offset: 24, Type: "int"}
			vm.Fields["AbstractInterpreter"] = map[string]Field{"_code": {Static: true, Address: 0x8000}}
			vm.Fields["StubQueue"] = map[string]Field{"_stub_buffer": {Offset: 16}, "_buffer_limit": {Offset: 28}}
			vm.Fields["VirtualSpace"]["_high_boundary"] = Field{Offset: 40}
			vm.Ints["frame::interpreter_frame_sender_sp_offset"] = -1
			if tc.unpublished {
				vm.Ints = map[string]int64{"frame::pc_return_offset": 0}
			}
			wl, err := NewWalkerLayout(vm, tc.machine)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []int64{tc.senderSP, tc.method, tc.bcp}, []int64{wl.FrameSenderSP, wl.FrameMethod, wl.FrameBCP})
		})
	}
}
