package usdt

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Debian's binaries with probes, by how many sites their notes declare
// (readelf -n) and one site each, as readelf shows it.
func TestProbesOfDebianBinaries(t *testing.T) {
	for _, c := range []struct {
		path  string
		sites int
		want  Probe
		args  []Arg
		// refused are the sites whose arguments the fetch cannot read:
		// a global variable's, by symbol (-4@NBuffers(%rip)).
		refused []string
	}{
		{"/usr/bin/python3.11", 8, Probe{Provider: "python", Name: "gc__done", PC: 0x42873b, Offset: 0x2873b,
			Semaphore: 0xa84270, SemaphoreOffset: 0x683270, ArgSpecs: "-8@%r12"},
			[]Arg{{Kind: ArgRegister, Size: 8, Signed: true, Reg: "r12", RegOffset: 24}}, nil},
		{"/usr/lib/postgresql/15/bin/postgres", 71, Probe{Provider: "postgresql", Name: "query__done", PC: 0x4726a1,
			Semaphore: 0x88595c, ArgSpecs: "8@-144(%rbp)"},
			[]Arg{{Kind: ArgMemory, Size: 8, Reg: "rbp", RegOffset: 32, Offset: -144}},
			[]string{"postgresql:checkpoint__done", "postgresql:buffer__sync__done"}},
		{"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so", 531, Probe{Provider: "hotspot", Name: "method__entry",
			PC: 0xce548f, ArgSpecs: "-8@%rax 8@%rdx -4@%ecx 8@%rsi -4@%edi 8@%r8 -4@%r9d"}, nil, nil},
	} {
		t.Run(c.path, func(t *testing.T) {
			f, err := elf.Open(c.path)
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("no %s here", c.path)
			}
			require.NoError(t, err)
			defer f.Close()
			probes, err := Probes(f)
			require.NoError(t, err)
			assert.Len(t, probes, c.sites)
			var got *Probe
			for i := range probes {
				if probes[i].FullName() == c.want.FullName() {
					got = &probes[i]
					break
				}
			}
			require.NotNil(t, got, "no %s", c.want.FullName())
			if c.want.Offset == 0 { // checked against the segments instead
				off, err := fileOffset(f, c.want.PC)
				require.NoError(t, err)
				c.want.Offset = off
			}
			if c.want.Semaphore != 0 && c.want.SemaphoreOffset == 0 {
				off, err := fileOffset(f, c.want.Semaphore)
				require.NoError(t, err)
				c.want.SemaphoreOffset = off
			}
			assert.Equal(t, c.want, *got)
			args, err := ParseArgs(f.Machine, got.ArgSpecs)
			require.NoError(t, err)
			if c.args != nil {
				assert.Equal(t, c.args, args)
			}
			var refused []string
			for _, p := range probes {
				if _, err := ParseArgs(f.Machine, p.ArgSpecs); err != nil {
					assert.Contains(t, err.Error(), "not a number (a symbol?)")
					refused = append(refused, p.FullName())
				}
			}
			assert.Equal(t, c.refused, refused)
		})
	}
}

// note builds one 64-bit little-endian stapsdt note.
func note(owner string, typ uint32, pc, base, sem uint64, strs ...string) []byte {
	desc := binary.LittleEndian.AppendUint64(nil, pc)
	desc = binary.LittleEndian.AppendUint64(desc, base)
	desc = binary.LittleEndian.AppendUint64(desc, sem)
	for _, s := range strs {
		desc = append(append(desc, s...), 0)
	}
	name := append([]byte(owner), 0)
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = append(b, name...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestNotes(t *testing.T) {
	good := note("stapsdt", 3, 0x1000, 0x2000, 0x3000, "prov", "name", "8@%rdi")
	for _, c := range []struct {
		name    string
		data    []byte
		base    uint64
		want    []Probe
		wantErr string
	}{
		{"one", good, 0, []Probe{{Provider: "prov", Name: "name", PC: 0x1000, Semaphore: 0x3000, ArgSpecs: "8@%rdi"}}, ""},
		{"moved after linking", good, 0x2100, []Probe{{Provider: "prov", Name: "name", PC: 0x1100, Semaphore: 0x3100, ArgSpecs: "8@%rdi"}}, ""},
		{"other notes skipped", append(note("GNU", 3, 1, 2, 3, "a", "b", ""), good...), 0,
			[]Probe{{Provider: "prov", Name: "name", PC: 0x1000, Semaphore: 0x3000, ArgSpecs: "8@%rdi"}}, ""},
		{"none", note("GNU", 1, 1, 2, 3), 0, nil, "no USDT probes"},
		{"truncated header", good[:8], 0, nil, "header of 8 bytes"},
		{"descriptor past the end", good[:len(good)-8], 0, nil, "past the section's end"},
		{"short descriptor", note("stapsdt", 3, 1, 2, 3)[:12+8+12], 0, nil, "past the section's end"},
		{"strings not terminated", note("stapsdt", 3, 1, 2, 3, "prov"), 0, nil, "not NUL-terminated"},
		{"no name", note("stapsdt", 3, 1, 2, 3, "prov", "", ""), 0, nil, "without a provider or name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := notes(c.data, 8, binary.LittleEndian, c.base)
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

func FuzzNotes(f *testing.F) {
	f.Add(note("stapsdt", 3, 0x1000, 0x2000, 0x3000, "prov", "name", "8@%rdi -4@$5"), uint64(0x2100))
	f.Add(note("stapsdt", 3, 1, 2, 0, "p", "n", "8@[sp, 16]"), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, base uint64) {
		probes, err := notes(data, 8, binary.LittleEndian, base)
		if err != nil {
			return
		}
		for _, p := range probes {
			if p.Provider == "" || p.Name == "" || len(p.ArgSpecs) > maxArgsLen {
				t.Fatalf("accepted %+v", p)
			}
			for _, m := range []elf.Machine{elf.EM_X86_64, elf.EM_AARCH64} {
				if args, err := ParseArgs(m, p.ArgSpecs); err == nil && len(args) > maxArgs {
					t.Fatalf("%d args", len(args))
				}
			}
		}
	})
}
