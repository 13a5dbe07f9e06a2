// Command goprog is a fixture for the symbolize tests: it prints program
// counters of known functions (one inside an inlined call) and waits for
// stdin to close.
package main

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
)

type Cruncher struct {
	sum     int
	inlined uintptr
	direct  uintptr
}

// callerPC returns the return address into the function that called it.
//
//go:noinline
func callerPC() uintptr {
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:])
	return pcs[0]
}

// add is small and gets inlined into hotLoop.
func (c *Cruncher) add(x int) {
	if x == 3 {
		c.inlined = callerPC()
	}
	c.sum += x
}

//go:noinline
func (c *Cruncher) hotLoop(n int) {
	for i := 0; i < n; i++ {
		c.add(i)
	}
	c.direct = callerPC()
}

//go:noinline
func crunch(n int) int {
	c := &Cruncher{}
	c.hotLoop(n)
	fmt.Printf("inlined_pc=%#x\n", c.inlined)
	fmt.Printf("direct_pc=%#x\n", c.direct)
	return c.sum
}

func main() {
	s := crunch(10)
	fmt.Printf("crunch=%#x\n", reflect.ValueOf(crunch).Pointer())
	fmt.Printf("ready %d\n", s)
	io.Copy(io.Discard, os.Stdin)
}
