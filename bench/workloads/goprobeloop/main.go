// goprobeloop is probeloop.c in Go: it calls one tiny function,
// main.probedCall, a fixed number of times in a tight loop, for `make
// bench` (suite probes) to measure what a Go probe (an uprobe after the
// stack check and one on the return instruction, keyed by goroutine) costs
// per call beside a C probe's uprobe pair.
//
// Usage: goprobeloop [calls] [stdin]. Prints the loop's wall time in
// nanoseconds on stdout; on stderr a checksum and "goprobeloop: cpu_ns N",
// the process's CPU time.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

//go:noinline
func probedCall(x uint64) uint64 { return x*0x9e3779b97f4a7c15 + 1 }

func cpuNS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	calls := uint64(200000)
	if len(os.Args) > 1 {
		n, err := strconv.ParseUint(os.Args[1], 10, 64)
		if err != nil || n == 0 {
			fmt.Fprintf(os.Stderr, "goprobeloop: bad call count %s\n", os.Args[1])
			os.Exit(2)
		}
		calls = n
	}
	if len(os.Args) > 2 && os.Args[2] == "stdin" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "goprobeloop: stdin closed before the start line")
			os.Exit(2)
		}
	}
	cpu0, start := cpuNS(), time.Now()
	acc := uint64(1)
	for i := uint64(0); i < calls; i++ {
		acc = probedCall(acc)
	}
	wall, cpu := time.Since(start), cpuNS()-cpu0
	fmt.Fprintf(os.Stderr, "goprobeloop: checksum %d\ngoprobeloop: cpu_ns %d\n", acc, max(cpu, 1))
	fmt.Println(wall.Nanoseconds())
}
