package v8

import (
	"debug/elf"
	"fmt"
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The layouts of the four node majors, as measured (gaps.go) and as their
// v8dbg symbols say (/tmp/v8dump-style dumps of each binary).
func TestReadLayout(t *testing.T) {
	type numbers struct {
		version                                  [2]int
		functionShared, bytecodeHeader           uint16
		sfiFunctionData, sfiName, sfiScript      uint16
		positions, codeBytecode, debugInfoScript uint16
		typeSFI, typeBytecode, typeScopeInfo     uint16
		typeScript, typeFixedArray, typeCode     uint16
		typeInterpreterData, typeDebugInfo       uint16
		typePositionTables, typeUncompiled       []uint16
		scopeFlags                               uint16
		scopeFunction                            uint32
		positionFirst                            bool
	}
	want := map[int]numbers{
		18: {version: [2]int{10, 2}, functionShared: 24, bytecodeHeader: 56,
			sfiFunctionData: 8, sfiName: 16, sfiScript: 32, positions: 32, codeBytecode: 16, debugInfoScript: 24,
			typeSFI: 257, typeBytecode: 195, typeScopeInfo: 256, typeScript: 170, typeFixedArray: 179, typeCode: 240,
			typeInterpreterData: 162, typeDebugInfo: 156, typePositionTables: []uint16{194}, typeUncompiled: []uint16{217, 218, 219, 220},
			scopeFlags: 12, scopeFunction: 2},
		20: {version: [2]int{11, 3}, functionShared: 24, bytecodeHeader: 54,
			sfiFunctionData: 8, sfiName: 16, sfiScript: 32, positions: 32, codeBytecode: 16, debugInfoScript: 24,
			typeSFI: 262, typeBytecode: 191, typeScopeInfo: 261, typeScript: 167, typeFixedArray: 175, typeCode: 245,
			typeInterpreterData: 159, typeDebugInfo: 153, typePositionTables: []uint16{190}, typeUncompiled: []uint16{220, 221, 222, 223},
			scopeFlags: 12, scopeFunction: 2},
		22: {version: [2]int{12, 4}, functionShared: 32, bytecodeHeader: 64,
			sfiFunctionData: 8, sfiName: 16, sfiScript: 32, positions: 24, codeBytecode: 8,
			typeSFI: 274, typeBytecode: 205, typeScopeInfo: 272, typeScript: 167, typeFixedArray: 174, typeCode: 206,
			typeInterpreterData: 207, typePositionTables: []uint16{186, 212}, typeUncompiled: []uint16{200, 201, 202, 203},
			scopeFlags: 12, scopeFunction: 2},
		24: {version: [2]int{13, 6}, functionShared: 32, bytecodeHeader: 64,
			sfiFunctionData: 8, sfiName: 24, sfiScript: 40, positions: 24, codeBytecode: 8,
			typeSFI: 282, typeBytecode: 186, typeScopeInfo: 280, typeScript: 167, typeFixedArray: 205, typeCode: 187,
			typeInterpreterData: 188, typePositionTables: []uint16{196, 217}, typeUncompiled: []uint16{175, 176, 177, 178},
			scopeFlags: 8, scopeFunction: 4, positionFirst: true},
	}
	for _, major := range testutil.NodeMajors {
		t.Run(fmt.Sprintf("node%d", major), func(t *testing.T) {
			f, err := elf.Open(testutil.Node(t, major))
			require.NoError(t, err)
			defer f.Close()
			l, err := ReadLayout(f)
			require.NoError(t, err)
			w := want[major]
			got := numbers{
				version: [2]int{l.Major, l.Minor}, functionShared: l.FunctionShared, bytecodeHeader: l.BytecodeArrayHeader,
				sfiFunctionData: l.SFIFunctionData, sfiName: l.SFINameOrScopeInfo, sfiScript: l.SFIScript,
				positions: l.BytecodeSourcePositions, codeBytecode: l.CodeBytecode, debugInfoScript: l.DebugInfoScript,
				typeSFI: l.TypeSharedFunctionInfo, typeBytecode: l.TypeBytecodeArray, typeScopeInfo: l.TypeScopeInfo,
				typeScript: l.TypeScript, typeFixedArray: l.TypeFixedArray, typeCode: l.TypeCode,
				typeInterpreterData: l.TypeInterpreterData, typeDebugInfo: l.TypeDebugInfo,
				typePositionTables: l.TypePositionTables, typeUncompiled: l.TypeUncompiled,
				scopeFlags: l.Scope.FlagsOffset, scopeFunction: l.Scope.FunctionScope, positionFirst: l.Scope.PositionFirst,
			}
			assert.Equal(t, w, got)
			// The same on every version.
			assert.Equal(t, [4]int16{-8, -16, -32, -40}, [4]int16{l.FPMarker, l.FPFunction, l.FPBytecodeArray, l.FPBytecodeOffset})
			assert.Equal(t, uint16(12), l.MapInstanceType)
			assert.Equal(t, [3]uint16{8, 16, 56}, [3]uint16{l.ScriptSource, l.ScriptName, l.ScriptLineEnds})
			assert.Equal(t, [2]uint16{8, 16}, [2]uint16{l.ArrayLength, l.ArrayData})
			assert.Equal(t, [4]uint16{12, 16, 16, 24}, [4]uint16{l.StringLength, l.SeqChars, l.ConsFirst, l.ConsSecond})
			assert.Equal(t, [4]uint16{128, 7, 8, 8}, [4]uint16{l.FirstNonstringType, l.StringRepresentationMask, l.StringEncMask, l.OneByteTag})
			assert.Equal(t, [5]uint16{0, 1, 2, 3, 5}, [5]uint16{l.SeqTag, l.ConsTag, l.ExternalTag, l.SlicedTag, l.ThinTag})

			in, err := Runtime.Detect(f)
			require.NoError(t, err)
			assert.NotNil(t, in)
		})
	}
}

// A file without V8 is none; V8s of other versions or without numbers
// the namer needs are errors that name them.
func TestReadLayoutErrors(t *testing.T) {
	f, err := elf.Open("/bin/true")
	require.NoError(t, err)
	defer f.Close()
	_, err = ReadLayout(f)
	assert.ErrorIs(t, err, ErrNoV8)
	in, err := Runtime.Detect(f)
	assert.NoError(t, err)
	assert.Nil(t, in)

	node, err := elf.Open(testutil.Node(t, 20))
	require.NoError(t, err)
	defer node.Close()
	d := dbgSymbols{}
	syms, err := node.DynamicSymbols()
	require.NoError(t, err)
	for _, s := range syms {
		if v, ok := readInt32(node, s); ok {
			d[trimDbg(s.Name)] = v
		}
	}
	_, err = layoutFrom(d)
	require.NoError(t, err)

	for _, c := range []struct {
		edit func(dbgSymbols)
		want string
	}{
		{func(d dbgSymbols) { d[symMajor] = 14 }, "V8 14.3: only V8 10 to 13"},
		{func(d dbgSymbols) { d[symMajor] = 9 }, "V8 9.3: only V8 10 to 13"},
		{func(d dbgSymbols) { d[symMinor] = 4 }, "V8 11.4: no layout known for this version (known: 10.2, 11.3, 12.4, 13.6)"},
		{func(d dbgSymbols) { delete(d, symMinor) }, "without its version"},
		{func(d dbgSymbols) { delete(d, "class_JSFunction__shared__SharedFunctionInfo") }, "JSFunction::shared"},
		{func(d dbgSymbols) { d["class_Script__name__Object"] = 1 << 20 }, "Script::name=1048576"},
		{func(d dbgSymbols) { d["off_fp_function"] = 12 }, "off_fp_function"},
		{func(d dbgSymbols) { delete(d, "type_ScopeInfo__SCOPE_INFO_TYPE") }, "type ScopeInfo"},
	} {
		e := maps.Clone(d)
		c.edit(e)
		_, err := layoutFrom(e)
		assert.ErrorContains(t, err, c.want)
	}
}
