//go:build linux

package unwinder

import (
	"debug/elf"
	"errors"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
)

// ThreadContextStats count the processes whose OpenTelemetry thread
// context (OTEP 4947) the samplers read.
type ThreadContextStats struct {
	Processes  uint64 // processes with their variable's location loaded
	Unresolved uint64 // processes whose location was never written (given up after maxRuntimeTries sweeps)
	Failed     uint64 // files or processes whose variable could not be located
}

// detectThreadCtx returns what locating otel_thread_ctx_v1 in processes
// needs when ef defines it, nil otherwise.
func (l *Loader) detectThreadCtx(ef *elf.File) *threadctx.Module {
	if l.maps.Contexts == nil || l.noThreadCtx {
		return nil
	}
	var m *threadctx.Module
	err := noPanic(func() (err error) { m, err = threadctx.Prepare(ef); return err })
	switch {
	case errors.Is(err, threadctx.ErrNoSymbol):
		return nil
	case err != nil:
		l.stats.ThreadContexts.Failed++
		return nil
	}
	return m
}

// addThreadCtx loads where pid's threads keep their context, defined in a
// file mapped with bias; a location not written yet is asked again at the
// next sweeps.
func (l *Loader) addThreadCtx(lp *loadedProcess, m *threadctx.Module, bias uint64) {
	if lp.threadCtx != nil || lp.threadCtxWaiting != nil {
		return // one module defines it per process
	}
	loc, err := l.locateThreadCtx(lp.pid, m, bias)
	if err != nil {
		if errors.Is(err, threadctx.ErrUnresolved) {
			lp.threadCtxWaiting = &waitingThreadCtx{module: m, bias: bias}
		} else {
			l.stats.ThreadContexts.Failed++
		}
		return
	}
	l.putThreadCtx(lp, m, loc)
}

func (l *Loader) locateThreadCtx(pid uint32, m *threadctx.Module, bias uint64) (threadctx.Location, error) {
	name := l.proc.Path(pid, "mem")
	return procfs.Within(l.deadline, name, func() (threadctx.Location, error) {
		mem := &lazyMem{path: name}
		defer mem.close()
		var loc threadctx.Location
		err := noPanic(func() (err error) { loc, err = m.Locate(io.ReaderAt(mem), bias); return err })
		return loc, err
	}, nil)
}

func (l *Loader) putThreadCtx(lp *loadedProcess, m *threadctx.Module, loc threadctx.Location) {
	lp.threadCtx, lp.threadCtxLoc = m, loc
	if err := l.putContext(lp); err != nil {
		lp.threadCtx = nil
		l.stats.ThreadContexts.Failed++
	}
}

// waitingThreadCtx is a process whose variable's location is not written yet.
type waitingThreadCtx struct {
	module *threadctx.Module
	bias   uint64
	tries  int
}

// maxThreadCtxTries bounds the sweeps that ask a process's thread context
// location again (a minute at sweepInterval).
const maxThreadCtxTries = 12

// retryThreadCtx asks the processes whose location was not written again,
// reading their memory outside the lock.
func (l *Loader) retryThreadCtx() {
	type ask struct {
		lp *loadedProcess
		w  waitingThreadCtx
	}
	var asks []ask
	l.mu.Lock()
	for _, lp := range l.procs {
		if w := lp.threadCtxWaiting; w != nil {
			if w.tries++; w.tries <= maxThreadCtxTries {
				asks = append(asks, ask{lp, *w})
			} else {
				l.stats.ThreadContexts.Unresolved++
				lp.threadCtxWaiting = nil
			}
		}
	}
	l.mu.Unlock()
	for _, a := range asks {
		loc, err := l.locateThreadCtx(a.lp.pid, a.w.module, a.w.bias)
		l.mu.Lock()
		if l.procs[a.lp.pid] == a.lp && err == nil {
			a.lp.threadCtxWaiting = nil
			l.putThreadCtx(a.lp, a.w.module, loc)
		}
		l.mu.Unlock()
	}
}

func (l *Loader) ignoreThreadCtx() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noThreadCtx = true
}

// threadCtxProcesses counts the processes with a location loaded.
func (l *Loader) threadCtxProcesses() uint64 {
	var n uint64
	for _, lp := range l.procs {
		if lp.threadCtx != nil {
			n++
		}
	}
	return n
}
