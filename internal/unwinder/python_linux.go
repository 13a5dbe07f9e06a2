//go:build linux

package unwinder

import (
	"debug/elf"
	"errors"

	"github.com/bpfprofiler/bpfprofiler/internal/python"
)

// detectPython returns the CPython interpreter in ef, mapped from path, or
// nil; an interpreter of a version the walk does not know is counted.
func (l *Loader) detectPython(path string, ef *elf.File) *python.Interpreter {
	if !python.LooksLikePython(path) {
		return nil
	}
	var in *python.Interpreter
	err := noPanic(func() (err error) { in, err = python.Detect(ef); return err })
	switch {
	case err == nil:
		return in
	case !errors.Is(err, python.ErrNotPython):
		l.stats.PythonUnsupported++
	}
	return nil
}

// addPython tells the BPF walk where pid's interpreter is; bias is the
// load bias of the file holding it. It reports whether the entry was added.
func (l *Loader) addPython(pid uint32, in *python.Interpreter, bias uint64) bool {
	if l.maps.Python == nil {
		return false
	}
	value := pythonProc(in, in.RuntimeAddr+bias)
	if err := l.maps.Python.Put(&pid, &value); err != nil {
		l.stats.PythonMapFull++
		return false
	}
	return true
}

func (l *Loader) dropPython(pid uint32) {
	_ = l.maps.Python.Delete(&pid) // gone already: nothing to do
}
