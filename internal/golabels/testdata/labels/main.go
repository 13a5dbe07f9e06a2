// A program with goroutine labels, built by golabels' tests as a Go
// executable of each kind (cgo and not, amd64 and arm64).
package main

import (
	"context"
	"runtime/pprof"
)

func main() {
	pprof.Do(context.Background(), pprof.Labels("handler", "a"), func(context.Context) {})
}
