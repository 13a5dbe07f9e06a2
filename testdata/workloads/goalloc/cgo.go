//go:build cgo

package main

// The cgo build links with the C toolchain (a dynamic executable, g in
// the thread's TLS block): some C code makes it one.

// int bpfprofiler_goalloc_c(void) { return 0; }
import "C"

var _ = C.bpfprofiler_goalloc_c
