// Command golabels burns CPU under runtime/pprof labels, for the tests of
// the Go labels reader: in turn 3 ms of its thread's CPU time in
// burnCheckout under handler=checkout, 1 in burnSearch under
// handler=search and tenant=t-42, and 1 in burnUnlabeled under none; a
// second goroutine, under handler=sleeper, waits in nanosleep system
// calls (off CPU, its goroutine still its thread's). It runs for a number
// of seconds (first argument) and prints its pid first.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

var state uint64 = 88172645463325252

// threadCPU is the calling thread's CPU time (main locks its goroutine to
// its thread): work is measured in it, so that a split holds however the
// CPU is shared or emulated.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// spin does a little work (tens of microseconds).
func spin() {
	for i := 0; i < 1<<12; i++ {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
	}
}

// Each kind of work has a leaf of its own, so a sample tells which it was
// however its callers were walked (a stripped Go executable has no CFI);
// spin is inlined into each.

// burnCheckout burns ms milliseconds of the thread's CPU time.
//
//go:noinline
func burnCheckout(ms int) {
	for end := threadCPU() + time.Duration(ms)*time.Millisecond; threadCPU() < end; {
		spin()
	}
}

//go:noinline
func burnSearch(ms int) {
	for end := threadCPU() + time.Duration(ms)*time.Millisecond; threadCPU() < end; {
		spin()
	}
}

//go:noinline
func burnUnlabeled(ms int) {
	for end := threadCPU() + time.Duration(ms)*time.Millisecond; threadCPU() < end; {
		spin()
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
	runtime.LockOSThread() // threadCPU is this goroutine's
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
