package usdt

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseArgs(t *testing.T) {
	x86, arm := elf.EM_X86_64, elf.EM_AARCH64
	for _, c := range []struct {
		m       elf.Machine
		specs   string
		want    []Arg
		wantErr string
	}{
		{x86, "", []Arg{}, ""},
		{x86, "-4@%edi 8@%rsi", []Arg{
			{Kind: ArgRegister, Size: 4, Signed: true, Reg: "edi", RegOffset: 112},
			{Kind: ArgRegister, Size: 8, Reg: "rsi", RegOffset: 104}}, ""},
		{x86, "8@-144(%rbp) 4@(%rax) 2@0x10(%r15)", []Arg{
			{Kind: ArgMemory, Size: 8, Reg: "rbp", RegOffset: 32, Offset: -144},
			{Kind: ArgMemory, Size: 4, Reg: "rax", RegOffset: 80},
			{Kind: ArgMemory, Size: 2, Reg: "r15", RegOffset: 0, Offset: 16}}, ""},
		{x86, "-4@$-5 1@%al 8@%rsp", []Arg{
			{Kind: ArgConst, Size: 4, Signed: true, Value: -5},
			{Kind: ArgRegister, Size: 1, Reg: "al", RegOffset: 80},
			{Kind: ArgRegister, Size: 8, Reg: "rsp", RegOffset: 152}}, ""},
		{x86, "8@(%rax,%rbx,8)", nil, "not a register"},
		{x86, "8@foo(%rip)", nil, "not a number"},
		{x86, "1@%ah", nil, `register "ah"`},
		{x86, "3@%eax", nil, "a size of 3 bytes"},
		{x86, "%eax", nil, "no size@location"},
		{x86, "8@%xmm0", nil, `register "xmm0"`},
		{arm, "-4@x0 8@[sp, 16] 8@[x19] 4@5 8@sp 4@w3 8@[x29, -8]", []Arg{
			{Kind: ArgRegister, Size: 4, Signed: true, Reg: "x0", RegOffset: 0},
			{Kind: ArgMemory, Size: 8, Reg: "sp", RegOffset: 248, Offset: 16},
			{Kind: ArgMemory, Size: 8, Reg: "x19", RegOffset: 152},
			{Kind: ArgConst, Size: 4, Value: 5},
			{Kind: ArgRegister, Size: 8, Reg: "sp", RegOffset: 248},
			{Kind: ArgRegister, Size: 4, Reg: "w3", RegOffset: 24},
			{Kind: ArgMemory, Size: 8, Reg: "x29", RegOffset: 232, Offset: -8}}, ""},
		{arm, "8@[x1, x2]", nil, "offset"},
		{arm, "8@[x1", nil, "unclosed"},
		{arm, "8@v0", nil, `register "v0"`},
		{elf.EM_386, "4@%eax", nil, "no argument fetch"},
		{x86, "1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al", nil, "more than 12"},
	} {
		t.Run(c.m.String()+" "+c.specs, func(t *testing.T) {
			got, err := ParseArgs(c.m, c.specs)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"-4@%edi 8@-144(%rbp) 4@$5", "-4@x0 8@[sp, 16] 4@5", "8@[x1"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, specs string, arm bool) {
		m := elf.EM_X86_64
		if arm {
			m = elf.EM_AARCH64
		}
		args, err := ParseArgs(m, specs)
		if err != nil {
			return
		}
		for _, a := range args {
			if a.Size != 1 && a.Size != 2 && a.Size != 4 && a.Size != 8 || a.Kind < ArgConst || a.Kind > ArgMemory {
				t.Fatalf("accepted %+v from %q", a, specs)
			}
			if a.Kind != ArgConst && a.RegOffset > 256 {
				t.Fatalf("register offset %d from %q", a.RegOffset, specs)
			}
		}
	})
}
