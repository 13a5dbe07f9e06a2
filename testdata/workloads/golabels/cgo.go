//go:build cgo

package main

// int golabels_cgo(void) { return 1; }
import "C"

// Built with cgo, the program is linked by the C toolchain: a dynamic
// executable whose g the runtime keeps in the executable's TLS block.
var _ = C.golabels_cgo()
