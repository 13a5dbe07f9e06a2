package ruby

import (
	"debug/elf"
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// walkerProc is bpf.RubywalkRubyProc field by field (name, offset, size),
// so its bytes are the C struct's.
func TestWalkerProcLayout(t *testing.T) {
	ours, theirs := reflect.TypeOf(walkerProc{}), reflect.TypeOf(bpf.RubywalkRubyProc{})
	require.Equal(t, theirs.Size(), ours.Size())
	n := 0
	for i := range theirs.NumField() {
		if f := theirs.Field(i); f.Name != "_" {
			n++
			g, ok := ours.FieldByName(f.Name)
			require.True(t, ok, f.Name)
			require.Equal(t, f.Offset, g.Offset, f.Name)
			require.Equal(t, f.Type.Size(), g.Type.Size(), f.Name)
		}
	}
	require.Equal(t, n, ours.NumField())
	require.Equal(t, Runtime.ProcMap, bpf.RubywalkMapRubyProcs)
}

// slotAt is where the fake processes of TestWalkerProc have libruby's GOT
// slot (bias 0x7f00_0000_0000 + ECTLS.Slot 0x1000).
const slotAt = 0x7f00_0000_1000

func words(w ...uint64) []byte {
	var b []byte
	for _, v := range w {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// WalkerProc reads the process's relocated slot: x86-64's tls_index, or
// arm64's TLS descriptor (static: the tp offset; dynamic: a pointer to a
// tls_index), and refuses what is not relocated or disagrees with the file.
func TestWalkerProc(t *testing.T) {
	tests := []struct {
		name    string
		machine elf.Machine
		mem     fakeMem
		want    bpf.RubywalkRubyProc // its TLS fields
		err     string
	}{
		{name: "x86-64 dynamic", machine: elf.EM_X86_64, mem: fakeMem{slotAt: words(1, 16)},
			want: bpf.RubywalkRubyProc{TlsModule: 1, TlsOffset: 16}},
		{name: "arm64 static", machine: elf.EM_AARCH64, mem: fakeMem{slotAt: words(0xffff_1234, 0x50)},
			want: bpf.RubywalkRubyProc{TlsOffset: 0x50, TlsStatic: 1}},
		{name: "arm64 dynamic", machine: elf.EM_AARCH64, mem: fakeMem{slotAt: words(0xffff_1234, 0x5555_0000), 0x5555_0000: words(3, 16)},
			want: bpf.RubywalkRubyProc{TlsModule: 3, TlsOffset: 16}},
		{name: "not relocated", machine: elf.EM_X86_64, mem: fakeMem{slotAt: words(0, 16)}, err: ErrTLSNotRelocated.Error()},
		{name: "arm64 not relocated", machine: elf.EM_AARCH64, mem: fakeMem{slotAt: words(0, 16)}, err: ErrTLSNotRelocated.Error()},
		{name: "unmapped slot", machine: elf.EM_X86_64, mem: fakeMem{}, err: "read ruby_current_ec's TLS slot"},
		{name: "other offset", machine: elf.EM_X86_64, mem: fakeMem{slotAt: words(1, 8)}, err: "tls_index offset 0x8, the file's is 0x10"},
		{name: "huge module", machine: elf.EM_X86_64, mem: fakeMem{slotAt: words(1<<40, 16)}, err: "tls_index module"},
		{name: "arm64 static below the variable", machine: elf.EM_AARCH64, mem: fakeMem{slotAt: words(0xffff_1234, 8)}, err: "below libruby's variable"},
		{name: "arm64 bad pointer", machine: elf.EM_AARCH64, mem: fakeMem{slotAt: words(0xffff_1234, 0x5555_0000)}, err: "read the TLS descriptor's tls_index"},
		{name: "arm64 dynamic other offset", machine: elf.EM_AARCH64, mem: fakeMem{slotAt: words(0xffff_1234, 0x5555_0000), 0x5555_0000: words(3, 24)},
			err: "tls_index offset 0x18"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &Interpreter{Version: "3.3.8", Machine: tc.machine, Layout: layouts["3.3"], ECTLS: ECTLS{Offset: 16, Slot: 0x1000}}
			b, err := in.WalkerProc(tc.mem, 0x7f00_0000_0000)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			var got bpf.RubywalkRubyProc
			_, err = binary.Decode(b, binary.NativeEndian, &got)
			require.NoError(t, err)
			want := tc.want
			want.EcVmStack, want.EcVmStackSize, want.EcCfp = 0, 8, 16
			want.CfpPc, want.CfpIseq, want.CfpEp, want.CfpSize = 0, 16, 32, 56
			want.IseqBody, want.BodyIseqEncoded = 16, 8
			require.Equal(t, want, got)
		})
	}

	_, err := (&Interpreter{Version: "3.3.8"}).WalkerProc(fakeMem{}, 0)
	require.ErrorIs(t, err, ErrNoECTLS)
}

// A word splits into object, position and entry flag as bpf/ruby.h joins them.
func TestDecodeWord(t *testing.T) {
	tests := []struct {
		word     uint64
		object   uint64
		position uint32
		entry    bool
	}{
		{0x7f12_3456_7890, 0x7f12_3456_7890, 0, false},
		{0x7fff<<48 | 0x1000, 0x1000, 0x7fff, false},
		{1<<63 | 5<<48 | 0xffff_ffff_ffff, 0xffff_ffff_ffff, 5, true},
	}
	for _, tc := range tests {
		o, p, e := DecodeWord(tc.word)
		require.Equal(t, []any{tc.object, tc.position, tc.entry}, []any{o, p, e}, "%#x", tc.word)
	}
}

// imemo returns the RBasic.flags of an imemo of type typ.
func imemo(typ uint64) []byte { return words(tImemo | typ<<imemoShift) }

// FrameObject tells iseqs from method entries by their own flags, and
// refuses anything else.
func TestFrameObject(t *testing.T) {
	l := layouts["3.1"]
	mem := fakeMem{0x1000: imemo(imemoIseq), 0x2000: imemo(imemoMent), 0x3000: imemo(5), 0x4000: words(tString), 0x5000: {1, 2}}
	tests := []struct {
		object uint64
		want   FrameKind
		err    string
	}{
		{0x1000, FrameIseq, ""},
		{0x2000, FrameMethodEntry, ""},
		{0x3000, 0, "no iseq or method entry"}, // imemo_cref
		{0x4000, 0, "no iseq or method entry"}, // a String
		{0x5000, 0, "read the flags"},          // cut short
		{0, 0, "read the flags"},
		{0xdead_0000, 0, "read the flags"},
	}
	for _, tc := range tests {
		got, err := l.FrameObject(mem, tc.object)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%#x", tc.object)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%#x", tc.object)
	}
}

// MethodIseq follows a Ruby method's entry to its iseq, and refuses C
// functions, missing definitions and what is no iseq.
func TestMethodIseq(t *testing.T) {
	l := layouts["3.3"]
	me := func(def uint64) []byte { return words(tImemo|imemoMent<<imemoShift, 0, def, 0, 0) }
	mem := fakeMem{
		0x1000: imemo(imemoIseq),
		0x2000: me(0x3000), 0x3000: words(methodTypeIseq, 0x1000), // a Ruby method
		0x2100: me(0x3100), 0x3100: words(1, 0x1000), // VM_METHOD_TYPE_CFUNC
		0x2200: me(0x3200), 0x3200: words(methodTypeIseq, 0x3000), // its "iseq" a definition
		0x2300: me(0xdead_0000),                           // its definition unmapped
		0x2400: me(0x3400), 0x3400: words(methodTypeIseq), // cut short
	}
	tests := []struct {
		me   uint64
		want uint64
		err  string
	}{
		{0x2000, 0x1000, ""},
		{0x2100, 0, "method type 1"},
		{0x2200, 0, "is no iseq"},
		{0x2300, 0, "read method definition"},
		{0x2400, 0, "read method definition"},
		{0xdead_0000, 0, "read the definition"},
	}
	for _, tc := range tests {
		got, err := l.MethodIseq(mem, tc.me)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%#x", tc.me)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

// A frame word's object may be a method entry (bpf/ruby.h): a Ruby
// method's is named by its owner's path and its iseq's label and line, a C
// function's by its owner alone; a method of a class without a path by
// its label.
func TestProcessNamesMethodEntries(t *testing.T) {
	m := fakeMem{}
	fakeIseq(m, "spin", 0x9000) // the iseq at 0x1000, its String "spin"
	l := layouts["3.3"]
	me := func(def, owner uint64) []byte { return words(tImemo|imemoMent<<imemoShift, 0, def, 0, owner) }
	class := func(typ, path uint64) []byte {
		c := make([]byte, l.ClassPathAt+8)
		binary.LittleEndian.PutUint64(c, typ)
		binary.LittleEndian.PutUint64(c[l.ClassPathAt:], path)
		return c
	}
	m[0x7000] = me(0x7100, 0x7200)
	m[0x7100] = words(methodTypeIseq, 0x1000)
	m[0x7200] = class(tClass, 0x3100) // its path: the String "spin" fakeIseq made
	m[0x7400] = me(0x7500, 0x7200)
	m[0x7500] = words(1) // VM_METHOD_TYPE_CFUNC
	m[0x7600] = me(0x7100, 0x7700)
	m[0x7700] = class(tClass, 8) // nil: no path
	require.EqualValues(t, 32, l.MethodEntryOwner)

	p := (&Interpreter{Layout: l}).Process(m, 0)
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		object uint64
		want   runtimes.Frame
	}{
		{0x7000, runtimes.Frame{Function: "spin#spin", File: "/app/work.rb", Line: 8}},
		{0x7400, runtimes.Frame{Function: "spin#(C function)"}},
		{0x7600, runtimes.Frame{Function: "spin", File: "/app/work.rb", Line: 8}},
		{0x1000, runtimes.Frame{Function: "spin", File: "/app/work.rb", Line: 8}},
	} {
		got, err := p.Read(tc.object, 3, now)
		require.NoError(t, err, "%#x", tc.object)
		require.Equal(t, tc.want, got, "%#x", tc.object)
		cached, ok := p.Cached(tc.object, 3, now)
		require.True(t, ok)
		require.Equal(t, tc.want, cached)
	}
	_, err := p.Read(0x7100, 3, now) // a definition: no frame object
	require.ErrorIs(t, err, ErrNotIseq)
}
