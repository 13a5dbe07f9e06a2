package ruby

import (
	"debug/elf"
	"encoding/binary"
	"io"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// liveEntry is vm_exec_core's range in a process (EntryRange plus the
// load bias) and how many instruction words the walks found in it.
type liveEntry struct {
	start, end    uint64
	inside, iseqs int
}

func entryOf(t *testing.T, f *elf.File, bias uint64) *liveEntry {
	start, end, err := EntryRange(f)
	require.NoError(t, err)
	e := &liveEntry{start: bias + start, end: bias + end}
	t.Cleanup(func() {
		t.Logf("vm_exec_core [%#x, %#x): the first instruction and the one at pc of %d iseq frames, %d words, all inside", e.start, e.end, e.iseqs, e.inside)
	})
	return e
}

// checkFrames checks that the words of iseq_encoded that are
// instructions (the first, and the one at pc where pc is inside the
// iseq) are addresses in vm_exec_core: direct threading's handlers.
func (e *liveEntry) checkFrames(t *testing.T, mem io.ReaderAt, l *Layout, frames []WalkedFrame) {
	for _, w := range frames {
		if w.Iseq == 0 {
			continue
		}
		body, err := runtimes.ReadMem(mem, w.Iseq+uint64(l.IseqBody), 8)
		if err != nil {
			continue // freed under the walk
		}
		b, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(body), int(l.BodyIseqEncoded)+8)
		if err != nil {
			continue
		}
		size := binary.LittleEndian.Uint32(b[l.BodyIseqSize:])
		encoded := binary.LittleEndian.Uint64(b[l.BodyIseqEncoded:])
		words := []uint64{encoded}
		if w.Position < size {
			words = append(words, encoded+uint64(w.Position)*8)
		}
		e.iseqs++
		for _, at := range words {
			v, err := runtimes.ReadMem(mem, at, 8)
			require.NoError(t, err)
			insn := binary.LittleEndian.Uint64(v)
			require.True(t, insn >= e.start && insn < e.end, "instruction %#x at %#x of iseq %#x outside vm_exec_core [%#x, %#x)", insn, at, w.Iseq, e.start, e.end)
			e.inside++
		}
	}
}

// checkEntryStack checks that the stopped main thread's native stack
// holds vm_exec_core: its pc, or a word of the stack above sp (its return
// addresses: <main>'s run is the outermost, under the runs of blocks and
// methods the C code calls).
func checkEntryStack(t *testing.T, mem io.ReaderAt, f *elf.File, bias uint64, regs syscall.PtraceRegs) {
	start, end, err := EntryRange(f)
	require.NoError(t, err)
	start, end = start+bias, end+bias
	in := func(v uint64) bool { return v >= start && v < end }
	hits := 0
	if in(regs.Rip) {
		hits++
	}
	buf := make([]byte, 4096)
	for at := regs.Rsp; at < regs.Rsp+1<<20; at += uint64(len(buf)) {
		n, _ := mem.ReadAt(buf, int64(at))
		for i := 0; i+8 <= n; i += 8 {
			if in(binary.LittleEndian.Uint64(buf[i:])) {
				hits++
			}
		}
		if n < len(buf) {
			break // the stack's top
		}
	}
	t.Logf("main thread: pc %#x (in vm_exec_core: %v), %d words of pc and stack in vm_exec_core [%#x, %#x)", regs.Rip, in(regs.Rip), hits, start, end)
	require.NotZero(t, hits, "no return address into vm_exec_core on the main thread's stack")
}

// checkTLS checks ECTLSOffset against the process: the tls_index ld.so
// relocated holds the file's offset, and ruby_current_ec is at the
// module's TLS block (dtv[module]) plus it; it logs where the block is
// from the thread pointer (libruby, loaded with the program, is in the
// static TLS below tp: x86-64's variant II).
func checkTLS(t *testing.T, mem io.ReaderAt, in *Interpreter, bias, tp, at uint64) {
	ti, err := runtimes.ReadMem(mem, bias+in.ECTLS.Slot, 16)
	require.NoError(t, err)
	require.Equal(t, in.ECTLS.Offset, binary.LittleEndian.Uint64(ti[8:]), "tls_index.offset in the process")
	block := at - in.ECTLS.Offset
	t.Logf("tls_index {module %d, offset %d}; TLS block %#x = tp %#x - %d; ruby_current_ec at tp - %d",
		binary.LittleEndian.Uint64(ti), in.ECTLS.Offset, block, tp, tp-block, tp-at)
	require.Less(t, block, tp, "libruby's TLS block is static, below tp")
}
