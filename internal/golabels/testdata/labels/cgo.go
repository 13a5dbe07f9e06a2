//go:build cgo

package main

// int one(void) { return 1; }
import "C"

var _ = C.one()
