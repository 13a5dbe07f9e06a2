//go:build cgo

package main

// int bpfprofiler_c_work(int n) { return n * 2 + 1; }
import "C"

// cWork is C code linked in with cgo: a probe on it is a thread's, as in
// any other file.
func cWork(n int) int { return int(C.bpfprofiler_c_work(C.int(n))) }
