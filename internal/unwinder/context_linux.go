//go:build linux

package unwinder

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
)

// What a process publishes: bpf/threadctx.h enum context_source.
const (
	contextOTEP = 1
	contextGo   = 2
)

// unknownBias is the load bias of an executable whose segments do not
// say it: no literal is found there (golabels.Binary.StringsAt), so the
// samplers copy every label's string.
const unknownBias = ^uint64(0)

// ContextEntry is context_procs' entry for a process whose threads keep
// an OpenTelemetry thread context at loc and run the Go executable b,
// loaded with bias (either nil: not read). The samplers read the context
// first.
func ContextEntry(loc *threadctx.Location, b *golabels.Binary, bias uint64) bpf.CpuContextProc {
	var value bpf.CpuContextProc
	if loc != nil {
		value.Sources |= contextOTEP
		value.Otep = bpf.CpuThreadCtxProc{Offset: loc.Offset, Module: loc.Module}
	}
	if b != nil {
		value.Sources |= contextGo
		value.Go = bpf.CpuGoLabelsProc{
			TlsOffset: b.TLSOffset,
			G_m:       b.Offsets.GM, G_labels: b.Offsets.GLabels, G_goid: b.Offsets.GGoid,
			M_g0: b.Offsets.MG0, M_gsignal: b.Offsets.MGsignal, M_curg: b.Offsets.MCurg,
			Layout: uint8(b.Offsets.Layout),
		}
		value.Go.StringsLo, value.Go.StringsHi = b.StringsAt(bias)
		if b.GRegister {
			value.Go.G_register = 1
		}
	}
	return value
}

// publishes says whether lp has an entry in context_procs.
func (lp *loadedProcess) publishes() bool { return lp.threadCtx != nil || lp.goLabels != nil }

// putContext writes lp's entry in context_procs: one a process, with
// every source loaded, so that a sample looks up one.
func (l *Loader) putContext(lp *loadedProcess) error {
	var loc *threadctx.Location
	if lp.threadCtx != nil {
		loc = &lp.threadCtxLoc
	}
	value := ContextEntry(loc, lp.goLabels, lp.goBias)
	return PutContext(l.maps.Contexts, l.maps.ContextPIDs, lp.pid, &value)
}

// dropContext deletes lp's entry unless kept (the process's entries now,
// written over lp's) has one.
func (l *Loader) dropContext(lp, kept *loadedProcess) {
	if lp.publishes() && (kept == nil || !kept.publishes()) {
		_ = DeleteContext(l.maps.Contexts, l.maps.ContextPIDs, lp.pid) // gone already: nothing to do
	}
}

// PutContext sets pid's bit in pids (context_pids; nil: none kept), for
// the samplers to look it up, then writes its entry in procs
// (context_procs). An error leaves the entry as it was; a bit without a
// new entry costs its samples a lookup, nothing else. Callers serialize
// their writes to pids.
func PutContext(procs, pids *ebpf.Map, pid uint32, value *bpf.CpuContextProc) error {
	if err := setContextPID(pids, pid, true); err != nil {
		return err
	}
	return procs.Put(&pid, value)
}

// DeleteContext clears pid's bit in pids, then deletes its entry in procs.
func DeleteContext(procs, pids *ebpf.Map, pid uint32) error {
	if err := setContextPID(pids, pid, false); err != nil {
		return err
	}
	return procs.Delete(&pid)
}

// setContextPID sets or clears pid's bit in pids: bit pid%64 of word
// pid/64. A pid past the words pids has (pid_max raised since it was
// made) needs none: the samplers look such a pid up.
func setContextPID(pids *ebpf.Map, pid uint32, on bool) error {
	word, bit := pid/64, uint64(1)<<(pid%64)
	if pids == nil || word >= pids.MaxEntries() {
		return nil
	}
	var bits uint64
	if err := pids.Lookup(&word, &bits); err != nil {
		return fmt.Errorf("context pids word %d: %w", word, err)
	}
	if on {
		bits |= bit
	} else {
		bits &^= bit
	}
	return pids.Put(&word, &bits)
}

// contextPIDWords is the words context_pids needs for the system's
// pid_max (file: /proc/sys/kernel/pid_max), within [1, limit]: limit
// when the file cannot be read.
func contextPIDWords(file string, limit uint32) uint32 {
	b, err := os.ReadFile(file)
	if err != nil {
		return limit
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || n == 0 {
		return limit
	}
	return min(uint32((n+63)/64), limit) //nolint:gosec // below 2^26
}
