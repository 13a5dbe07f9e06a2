// Command goallocloop is the memory suite's workload: a fixed amount of
// allocation-heavy work (arg 1 allocations of 64 B to 32 KiB, one in eight
// kept live in a ring), as a Go service's request handling allocates. It
// links runtime/pprof, as servers exposing net/http/pprof do, so the
// runtime samples its allocations (runtime.MemProfileRate's default): the
// hooks memory::go probes fire. It prints its wall time in nanoseconds on
// stdout and "goallocloop: cpu_ns N" (the process's CPU time) on stderr.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
)

var ring [4096][]byte

func cpuNS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	rounds, err := strconv.ParseUint(os.Args[1], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: goallocloop allocations")
		os.Exit(2)
	}
	start, cpu0 := time.Now(), cpuNS()
	sum := 0
	for i := uint64(0); i < rounds; i++ {
		b := make([]byte, 64<<(i%10)) // 64 B .. 32 KiB
		b[0] = byte(i)
		sum += int(b[len(b)-1])
		if i%8 == 0 {
			ring[(i/8)%uint64(len(ring))] = b
		}
	}
	if sum < 0 { // never: links runtime/pprof
		_ = pprof.WriteHeapProfile(io.Discard)
	}
	wall, cpu := time.Since(start), cpuNS()-cpu0
	fmt.Fprintf(os.Stderr, "goallocloop: cpu_ns %d\n", max(cpu, 1))
	fmt.Println(wall.Nanoseconds())
}
