package v8

import (
	"encoding/binary"
	"errors"
)

// walkerProcValue is v8_proc of bpf/v8.h (bpf.CpuV8Proc): what the BPF walk
// needs of one node process.
type walkerProcValue struct {
	FPMarker               int16
	FPFunction             int16
	FPBytecodeArray        int16
	FPBytecodeOffset       int16
	FunctionShared         uint16
	MapInstanceType        uint16
	BytecodeHeader         uint16
	TypeSharedFunctionInfo uint16
	TypeBytecodeArray      uint16
	Reserved               uint16
}

// errNoFrameLayout says a build's metadata lacks what the walk reads.
var errNoFrameLayout = errors.New("v8: no frame layout in the node binary's metadata")

// walkerProc is the v8_procs value of a process that maps the node binary
// of layout l. Everything the walk needs is in the file (no address: V8 12
// on runs its builtins from a second mapping of the binary), so a node
// process is walkable from its first sample.
func walkerProc(l *Layout, _ uint64) ([]byte, error) {
	if l.FPFunction == 0 || l.FPMarker == 0 || l.TypeSharedFunctionInfo == 0 {
		return nil, errNoFrameLayout
	}
	p := walkerProcValue{
		FPMarker:               l.FPMarker,
		FPFunction:             l.FPFunction,
		FPBytecodeArray:        l.FPBytecodeArray,
		FPBytecodeOffset:       l.FPBytecodeOffset,
		FunctionShared:         l.FunctionShared,
		MapInstanceType:        l.MapInstanceType,
		BytecodeHeader:         l.BytecodeArrayHeader,
		TypeSharedFunctionInfo: l.TypeSharedFunctionInfo,
		TypeBytecodeArray:      l.TypeBytecodeArray,
	}
	return binary.Append(nil, binary.NativeEndian, &p)
}
