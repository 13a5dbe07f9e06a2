//go:build linux

package readbench

// setThreadPointer sets the calling thread's TPIDR_EL0, which a Go program
// without cgo leaves zero and never reads (it keeps g in x28).
//
//go:noescape
func setThreadPointer(tp uint64)

// canSetThreadPointer: this architecture's thread pointer is the test's to
// set where the runtime leaves it unused.
const canSetThreadPointer = true
