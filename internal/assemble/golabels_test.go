package assemble

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// executableStrings is fakeSymbols with an executable whose .rodata, at
// 0x4a0000, holds "handlercheckout" in every live process; it counts the
// reads.
type executableStrings struct {
	fakeSymbols
	reads int
}

func (e *executableStrings) ReadExecutableString(_ uint32, addr uint64, n int, exited bool) ([]byte, bool) {
	const base, text = 0x4a0000, "handlercheckout"
	e.reads++
	if exited || addr < base || addr+uint64(n) > base+uint64(len(text)) { //nolint:gosec // small
		return nil, false
	}
	return []byte(text[addr-base : addr-base+uint64(n)]), true //nolint:gosec // small
}

// stringRef is a string stored by reference (golabels.Decode's format).
func stringRef(addr uint64, n byte) []byte {
	b := []byte{0xff}
	for i := range 6 {
		b = append(b, byte(addr>>(8*i)))
	}
	return append(b, n)
}

// Go labels stored by reference are read from the process's executable,
// once per set and process; what cannot be read is dropped and counted
// per sample; each sample gets a map of its own.
func TestAssembleGoLabelsByReference(t *testing.T) {
	literal := append(stringRef(0x4a0000, 7), stringRef(0x4a0007, 8)...)                              // handler=checkout
	mixed := append(append(stringRef(0x4a0000, 7), 4, 't', '-', '4', '2'), stringRef(0x4b0000, 3)...) // handler=t-42, then a key not read
	labelled := func(pid uint32, addr uint64, id uint32, data []byte) capture.RawStack {
		return capture.RawStack{PID: pid, TID: pid, Frames: capture.StackFrames(nil, []uint64{addr}), Value: 1,
			GoLabels: &capture.GoLabels{ID: id, Data: data}}
	}
	stacks := []capture.RawStack{
		labelled(20, 0x10, 7, literal),
		labelled(20, 0x11, 7, literal),
		labelled(20, 0x12, 9, mixed),
		labelled(40, 0x13, 7, literal), // exited: nothing more is read of it
	}
	syms := &executableStrings{}
	a := &Assembler{Symbols: syms, Identities: fakeIdentities{20: "/srv/api"}}
	start := time.Unix(100, 0)
	prof, st := a.Assemble(report.KindCPU, start, start.Add(time.Second), 1e7, stacks)

	got := map[uint64]map[string]string{}
	for _, p := range prof.Processes {
		for _, s := range p.Samples {
			got[s.Frames[0].Address] = s.Attributes
		}
	}
	assert.Equal(t, map[string]string{"handler": "checkout"}, got[0x10])
	assert.Equal(t, map[string]string{"handler": "checkout"}, got[0x11])
	assert.Equal(t, map[string]string{"handler": "t-42"}, got[0x12])
	assert.Empty(t, got[0x13])
	got[0x10]["handler"] = "changed"
	assert.Equal(t, "checkout", got[0x11]["handler"], "samples of one set share a map")
	// pid 20: set 7's two strings once, set 9's two references; pid 40: its two
	assert.Equal(t, 2+2+2, syms.reads)
	// set 9's second entry in one sample, pid 40's set in one
	assert.Equal(t, 2, st.GoLabelsDropped)
}
