package pdata

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

func TestAddressName(t *testing.T) {
	kernel := &report.Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff82a00000, File: "[kernel.kallsyms]"}
	module := &report.Mapping{Start: 0xffffffffc0a00000, Limit: 0xffffffffc0a40000, File: "[nf_tables]"}
	tests := []struct {
		name  string
		frame report.Frame
		want  string
	}{
		{
			name:  "shared library: base name and file offset",
			frame: report.Frame{Address: 0x7f12345a11b3, Type: report.FrameNative, Mapping: &report.Mapping{Start: 0x7f1234580000, Limit: 0x7f1234600000, Offset: 0x28000, File: "/usr/lib/x86_64-linux-gnu/libfoo.so"}},
			want:  "libfoo.so+0x491b3",
		},
		{
			name:  "executable mapped from offset 0",
			frame: report.Frame{Address: 0x401234, Type: report.FrameNative, Mapping: &report.Mapping{Start: 0x400000, Limit: 0x500000, File: "/app/server"}},
			want:  "server+0x1234",
		},
		{
			name:  "deleted file",
			frame: report.Frame{Address: 0x1010, Type: report.FrameNative, Mapping: &report.Mapping{Start: 0x1000, Limit: 0x2000, Offset: 0x3000, File: "/tmp/a.out (deleted)"}},
			want:  "a.out (deleted)+0x3010",
		},
		{
			name:  "vdso",
			frame: report.Frame{Address: 0x7ffc0000a10, Type: report.FrameNative, Mapping: &report.Mapping{Start: 0x7ffc0000000, Limit: 0x7ffc0002000, File: "[vdso]"}},
			want:  "[vdso]+0xa10",
		},
		{
			name:  "kernel image: offset from its first symbol",
			frame: report.Frame{Address: 0xffffffff814db325, Type: report.FrameKernel, Mapping: kernel},
			want:  "[kernel.kallsyms]+0x4db325",
		},
		{
			name:  "kernel module",
			frame: report.Frame{Address: 0xffffffffc0a01234, Type: report.FrameKernel, Mapping: module},
			want:  "[nf_tables]+0x1234",
		},
		{
			name:  "kernel address outside the image and modules",
			frame: report.Frame{Address: 0xffffffffc0001a20, Type: report.FrameKernel},
			want:  "0xffffffffc0001a20",
		},
		{
			name:  "anonymous JIT code",
			frame: report.Frame{Address: 0x7f0000001010, Type: report.FrameV8JS, Mapping: &report.Mapping{Start: 0x7f0000000000, Limit: 0x7f0000100000}},
			want:  "0x7f0000001010",
		},
		{
			name:  "no mapping",
			frame: report.Frame{Address: 0x1234, Type: report.FrameNative},
			want:  "0x1234",
		},
		{
			name:  "address below its mapping (inconsistent input)",
			frame: report.Frame{Address: 0x10, Type: report.FrameNative, Mapping: &report.Mapping{Start: 0x1000, Limit: 0x2000, File: "/lib/x.so"}},
			want:  "0x10",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, addressName(tt.frame))
		})
	}
}

// An unsymbolized frame's location has one line whose function carries
// the address name and no system name; its address and mapping (with the
// build id) are those of the frame. A symbol of the same text stays a
// distinct function.
func TestUnsymbolizedLocation(t *testing.T) {
	frames := []report.Frame{
		{Address: 0x7f0000031234, Type: report.FrameNative, Mapping: libcMap},
		{Address: 0x7f0000031300, Function: "libc.so.6+0x59234", Type: report.FrameNative, Mapping: libcMap},
	}
	p, err := BuildProfiles(Scope{}, cpu(process(1, nil, report.Sample{TID: 1, Frames: frames, Value: 1})))
	require.NoError(t, err)
	dict := p.Dictionary()
	stack := dict.StackTable().At(int(p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).StackIndex()))
	require.Equal(t, 2, stack.LocationIndices().Len())
	var systemNames []string
	for i, li := range stack.LocationIndices().All() {
		loc := dict.LocationTable().At(int(li))
		assert.Equal(t, frames[i].Address, loc.Address())
		m := dict.MappingTable().At(int(loc.MappingIndex()))
		assert.Equal(t, "/usr/lib/libc.so.6", dict.StringTable().At(int(m.FilenameStrindex())))
		require.Equal(t, 1, loc.Lines().Len())
		fn := dict.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex()))
		assert.Equal(t, "libc.so.6+0x59234", dict.StringTable().At(int(fn.NameStrindex())))
		systemNames = append(systemNames, dict.StringTable().At(int(fn.SystemNameStrindex())))
	}
	assert.Equal(t, []string{"", "libc.so.6+0x59234"}, systemNames)
	assert.Equal(t, map[string]int64{"libc.so.6+0x59234": 1}, FunctionTotals(p), "only the symbol counts")
	assertDictionaryDeduplicated(t, dict)
}
