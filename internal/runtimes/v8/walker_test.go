package v8

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

// The value written is bpf/v8.h's v8_proc, field by field.
func TestWalkerProcIsTheBPFStruct(t *testing.T) {
	require.Equal(t, binary.Size(bpf.CpuV8Proc{}), binary.Size(walkerProcValue{}))
	l := &Layout{
		FPMarker: -8, FPFunction: -16, FPBytecodeArray: -32, FPBytecodeOffset: -40,
		FunctionShared: 24, MapInstanceType: 12, BytecodeArrayHeader: 56,
		TypeSharedFunctionInfo: 257, TypeBytecodeArray: 195,
	}
	b, err := walkerProc(l, 0x5555_0000_0000)
	require.NoError(t, err)
	var got bpf.CpuV8Proc
	_, err = binary.Decode(b, binary.NativeEndian, &got)
	require.NoError(t, err)
	require.Equal(t, bpf.CpuV8Proc{
		FpMarker: -8, FpFunction: -16, FpBytecodeArray: -32, FpBytecodeOffset: -40,
		FunctionShared: 24, MapInstanceType: 12, BytecodeHeader: 56,
		TypeSharedFunctionInfo: 257, TypeBytecodeArray: 195,
	}, got)

	_, err = walkerProc(&Layout{}, 0)
	require.ErrorIs(t, err, errNoFrameLayout)
}
