// A program that imports runtime/pprof but sets no goroutine labels:
// golabels' tests expect ErrNoLabels of it.
package main

import (
	"os"
	"runtime/pprof"
)

func main() {
	_ = pprof.Lookup("goroutine").WriteTo(os.Stdout, 1)
}
