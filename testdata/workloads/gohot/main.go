// Command gohot burns CPU in main.(*Cruncher).hotLoop for a number of
// seconds (first argument, default 5), for profiler tests of Go binaries.
// Build: go build -o gohot ./testdata/workloads/gohot/main.go
// It prints its pid first.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Cruncher holds the state the hot loop mutates.
type Cruncher struct {
	state uint64
}

//go:noinline
func (c *Cruncher) hotLoop(until time.Time) {
	for time.Now().Before(until) {
		for range 1 << 16 {
			c.state ^= c.state << 13
			c.state ^= c.state >> 7
			c.state ^= c.state << 17
		}
	}
}

func main() {
	seconds := 5.0
	if len(os.Args) > 1 {
		v, err := strconv.ParseFloat(os.Args[1], 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "usage: gohot [seconds]")
			os.Exit(2)
		}
		seconds = v
	}
	fmt.Println(os.Getpid())
	c := &Cruncher{state: 0x9e3779b97f4a7c15}
	c.hotLoop(time.Now().Add(time.Duration(seconds * float64(time.Second))))
	fmt.Fprintln(os.Stderr, "state", c.state)
}
