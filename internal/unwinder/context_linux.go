//go:build linux

package unwinder

import (
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
	return l.maps.Contexts.Put(&lp.pid, &value)
}

// dropContext deletes lp's entry unless kept (the process's entries now,
// written over lp's) has one.
func (l *Loader) dropContext(lp, kept *loadedProcess) {
	if lp.publishes() && (kept == nil || !kept.publishes()) {
		_ = l.maps.Contexts.Delete(&lp.pid) // gone already: nothing to do
	}
}
