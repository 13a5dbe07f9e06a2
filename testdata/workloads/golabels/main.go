// Command golabels burns CPU under runtime/pprof labels, for the tests of
// the Go labels reader: in turn 3 units of work in burnCheckout under
// handler=checkout, 1 in burnSearch under handler=search and tenant=t-42,
// and 1 in burnUnlabeled under none; a second goroutine, under
// handler=sleeper, waits in nanosleep system calls (off CPU, its goroutine
// still its thread's). It runs for a number of seconds (first argument)
// and prints its pid first.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
)

var state uint64 = 88172645463325252

// Each kind of work has a leaf of its own, so a sample tells which it was
// however its callers were walked (a stripped Go executable has no CFI).

// burnCheckout does n units of work (about a millisecond each here).
//
//go:noinline
func burnCheckout(n int) {
	for i := 0; i < n<<18; i++ { // go1.21: no range over an int
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
	}
}

//go:noinline
func burnSearch(n int) {
	for i := 0; i < n<<18; i++ {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
	}
}

//go:noinline
func burnUnlabeled(n int) {
	for i := 0; i < n<<18; i++ {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
	}
}

//go:noinline
func sleepInSyscall() {
	ts := syscall.NsecToTimespec(int64(5 * time.Millisecond))
	_ = syscall.Nanosleep(&ts, nil)
}

func main() {
	seconds := 60.0
	if len(os.Args) > 1 {
		var err error
		if seconds, err = strconv.ParseFloat(os.Args[1], 64); err != nil {
			fmt.Fprintln(os.Stderr, "usage: golabels [seconds]")
			os.Exit(2)
		}
	}
	fmt.Println(os.Getpid())
	until := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	ctx := context.Background()
	go pprof.Do(ctx, pprof.Labels("handler", "sleeper"), func(context.Context) {
		for time.Now().Before(until) {
			sleepInSyscall()
		}
	})
	for time.Now().Before(until) {
		pprof.Do(ctx, pprof.Labels("handler", "checkout"), func(context.Context) { burnCheckout(3) })
		pprof.Do(ctx, pprof.Labels("handler", "search", "tenant", "t-42"), func(context.Context) { burnSearch(1) })
		burnUnlabeled(1)
	}
}
