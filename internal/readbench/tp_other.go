//go:build linux && !arm64

package readbench

// On x86-64 the thread pointer (fs) is the runtime's own: never zero.
func setThreadPointer(uint64) {}

const canSetThreadPointer = false
