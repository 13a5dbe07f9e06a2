package gosites

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Go's own builds of the gofuncs workload, amd64 and arm64, by the oldest
// and newest toolchains the probes support and the machine's: the sites
// are where `go tool objdump` shows the function's RET instructions, and
// the entry is after the last branch before the prologue's end as the DWARF
// line table marks it (the stack check's branch; the function's entry when
// it has none).
func TestSitesMatchGoToolchain(t *testing.T) {
	const yes, no, either = "yes", "no", ""
	funcs := []struct {
		name       string
		minReturns int
		stackCheck string // whether the function has one
		err        error
	}{
		{"main.(*Server).handle", 2, yes, nil}, // a return, and one after its defer
		{"main.Sum[go.shape.int]", 1, either, nil},
		{"main.Sum[go.shape.float64]", 1, either, nil},
		{"main.(*Stack[go.shape.int]).Push", 1, yes, nil}, // append may grow the slice: a call
		{"main.fib", 1, yes, nil},
		{"main.big", 1, yes, nil}, // two checks: the frame is larger than a page
		{"main.leaf", 1, no, nil},
		{"main.table", 1, yes, nil},
		{"main.main.func1", 1, either, nil},
		{"main.boom", 0, yes, ErrNoReturn},
	}
	for _, toolchain := range []string{"go1.21.13", "", "go1.27.3"} {
		for _, arch := range []string{"amd64", "arm64"} {
			b := testutil.GoBuild{Toolchain: testutil.GoToolchain(toolchain)}
			t.Run(fmt.Sprintf("%s %s", cmp.Or(b.Toolchain, runtime.Version()), arch), func(t *testing.T) {
				bin := t.TempDir() + "/gofuncs"
				if err := testutil.CrossBuildGo(testutil.Workload(t, "gofuncs"), bin, arch, b); err != nil {
					testutil.SkipOrFail(t, "%v", err)
				}
				f, err := elf.Open(bin)
				require.NoError(t, err)
				defer f.Close()
				syms := functionSymbols(t, f)
				prologueEnds := prologueEnds(t, f)
				for _, fn := range funcs {
					sym, ok := syms[fn.name]
					require.True(t, ok, "%s not in the symbol table", fn.name)
					code := textBytes(t, f, sym.Value, sym.Size)
					got, err := Find(f.Machine, sym.Value, code)
					if fn.err != nil {
						require.ErrorIs(t, err, fn.err, fn.name)
						continue
					}
					require.NoError(t, err, fn.name)
					listing := objdump(t, bin, fn.name)
					require.Equal(t, listing.returns, got.Returns, "%s: RET instructions", fn.name)
					require.GreaterOrEqual(t, len(got.Returns), fn.minReturns, fn.name)
					want := sym.Value // a leaf without a frame has no prologue end
					if end, ok := prologueEnds.in(sym.Value, sym.Value+sym.Size); ok {
						want = listing.afterLastBranchBefore(sym.Value, end)
					}
					require.Equal(t, want, got.Entry, "%s: entry", fn.name)
					if fn.stackCheck != either {
						require.Equal(t, fn.stackCheck == yes, got.Entry != sym.Value, "%s: after a stack check", fn.name)
					}
				}
			})
		}
	}
}

// Code the decoders cannot read, or that is no function, is refused or
// read without a panic.
func TestFindRefuses(t *testing.T) {
	amd64 := []byte{
		0x49, 0x3b, 0x66, 0x10, // CMPQ SP, 0x10(R14)
		0x76, 0x02, // JBE +2
		0x55,                         // PUSHQ BP
		0xc3,                         // RET
		0xe8, 0x00, 0x00, 0x00, 0x00, // CALL
		0xeb, 0xf1, // JMP entry
	}
	for _, c := range []struct {
		name    string
		machine elf.Machine
		code    []byte
		want    Sites
		err     error
	}{
		{"amd64 stack check", elf.EM_X86_64, amd64, Sites{Entry: 0x1006, Returns: []uint64{0x1007}}, nil},
		{"amd64 cut in an instruction", elf.EM_X86_64, []byte{0xc3, 0xe8, 0x00}, Sites{}, ErrUndecodable},
		{"amd64 no return", elf.EM_X86_64, []byte{0x90, 0xcc}, Sites{}, ErrNoReturn},
		{"arm64 zero padding", elf.EM_AARCH64, []byte{0xc0, 0x03, 0x5f, 0xd6, 0, 0, 0, 0}, Sites{Entry: 0x1000, Returns: []uint64{0x1000}}, nil},
		{"arm64 unknown word in the flow", elf.EM_AARCH64, []byte{0, 0, 0, 0, 0xc0, 0x03, 0x5f, 0xd6}, Sites{}, ErrUndecodable},
		{"arm64 pool after a return", elf.EM_AARCH64, []byte{0xc0, 0x03, 0x5f, 0xd6, 1, 0, 0, 0, 0xc0, 0x03, 0x5f, 0xd6}, Sites{Entry: 0x1000, Returns: []uint64{0x1000, 0x1008}}, nil},
		{"another machine", elf.EM_RISCV, amd64, Sites{}, ErrMachine},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Find(c.machine, 0x1000, c.code)
			require.ErrorIs(t, err, c.err)
			require.Equal(t, c.want, got)
		})
	}
}

// An entry probe alone takes arm64 words the decoder does not know (the
// runtime's LSE atomics) as other instructions; Find refuses them.
func TestFindEntry(t *testing.T) {
	casal := []byte{0x44, 0xfc, 0xfb, 0x88} // casal w27, w4, [x2]
	code := append(append([]byte{}, casal...), 0xc0, 0x03, 0x5f, 0xd6)
	_, err := Find(elf.EM_AARCH64, 0x1000, code)
	require.ErrorIs(t, err, ErrUndecodable)
	entry, err := FindEntry(elf.EM_AARCH64, 0x1000, code)
	require.NoError(t, err)
	require.Equal(t, uint64(0x1000), entry)
	_, err = FindEntry(elf.EM_X86_64, 0x1000, []byte{0xc3, 0xe8, 0x00})
	require.ErrorIs(t, err, ErrUndecodable, "x86-64 cannot skip what it cannot decode")
}

func FuzzFind(f *testing.F) {
	f.Add([]byte{0x49, 0x3b, 0x66, 0x10, 0x76, 0x02, 0x55, 0xc3}, true)
	f.Add([]byte{0xc0, 0x03, 0x5f, 0xd6, 0x1f, 0x20, 0x03, 0xd5}, false)
	f.Fuzz(func(t *testing.T, code []byte, amd64 bool) {
		machine := elf.EM_AARCH64
		if amd64 {
			machine = elf.EM_X86_64
		}
		s, err := Find(machine, 0x400000, code)
		if err != nil {
			return
		}
		end := 0x400000 + uint64(len(code))
		require.True(t, s.Entry >= 0x400000 && s.Entry < end)
		for _, r := range s.Returns {
			require.True(t, r >= 0x400000 && r < end)
		}
	})
}

func functionSymbols(t *testing.T, f *elf.File) map[string]elf.Symbol {
	syms, err := f.Symbols()
	require.NoError(t, err)
	out := map[string]elf.Symbol{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			out[s.Name] = s
		}
	}
	return out
}

func textBytes(t *testing.T, f *elf.File, addr, size uint64) []byte {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && addr >= p.Vaddr && addr+size <= p.Vaddr+p.Filesz {
			b := make([]byte, size)
			_, err := p.ReadAt(b, int64(addr-p.Vaddr))
			require.NoError(t, err)
			return b
		}
	}
	t.Fatalf("%#x is in no executable segment", addr)
	return nil
}

// addresses are the prologue ends of a binary's DWARF line table.
type addresses []uint64

func prologueEnds(t *testing.T, f *elf.File) addresses {
	d, err := f.DWARF()
	require.NoError(t, err)
	var out addresses
	r := d.Reader()
	for {
		e, err := r.Next()
		require.NoError(t, err)
		if e == nil {
			return out
		}
		if e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		lr, err := d.LineReader(e)
		require.NoError(t, err)
		if lr == nil {
			continue
		}
		var le dwarf.LineEntry
		for {
			err := lr.Next(&le)
			if errors.Is(err, dwarf.ErrUnknownPC) || err != nil {
				break
			}
			if le.PrologueEnd {
				out = append(out, le.Address)
			}
		}
	}
}

func (a addresses) in(lo, hi uint64) (uint64, bool) {
	for _, x := range a {
		if x >= lo && x < hi {
			return x, true
		}
	}
	return 0, false
}

// listing is what `go tool objdump` shows of one function.
type listing struct {
	addrs    []uint64
	branches map[uint64]bool // conditional and unconditional jumps
	returns  []uint64
}

// objdumpLine matches "  main.go:34  0x49e280  4989e4  MOVQ SP, R12".
var objdumpLine = regexp.MustCompile(`^\s+\S+:\d+\s+0x([0-9a-f]+)\s+[0-9a-f]+\s+(\S+)`)

func objdump(t *testing.T, bin, name string) listing {
	out, err := testutil.RunWithin(exec.Command("go", "tool", "objdump", "-s", "^"+regexp.QuoteMeta(name)+"$", bin), testutil.BuildTimeout)
	require.NoError(t, err, "%s", out)
	l := listing{branches: map[uint64]bool{}}
	for _, line := range strings.Split(string(out), "\n") {
		m := objdumpLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		addr, err := strconv.ParseUint(m[1], 16, 64)
		require.NoError(t, err)
		l.addrs = append(l.addrs, addr)
		switch op := m[2]; {
		case op == "RET":
			l.returns = append(l.returns, addr)
		case strings.HasPrefix(op, "J"), isARM64Branch(op):
			l.branches[addr] = true
		}
	}
	require.NotEmpty(t, l.addrs, "objdump of %s", name)
	return l
}

// isARM64Branch reports whether op (Go assembler syntax) is a conditional
// branch of arm64.
func isARM64Branch(op string) bool {
	switch op {
	case "BEQ", "BNE", "BCS", "BHS", "BCC", "BLO", "BMI", "BPL", "BVS", "BVC", "BHI", "BLS", "BGE", "BLT", "BGT", "BLE",
		"CBZ", "CBNZ", "CBZW", "CBNZW", "TBZ", "TBNZ":
		return true
	}
	return false
}

// afterLastBranchBefore returns the instruction after the last branch
// before end, or entry when none is.
func (l listing) afterLastBranchBefore(entry, end uint64) uint64 {
	after := entry
	for i, a := range l.addrs {
		if a < end && l.branches[a] && i+1 < len(l.addrs) {
			after = l.addrs[i+1]
		}
	}
	return after
}
