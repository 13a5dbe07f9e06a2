// Command golabels burns CPU under runtime/pprof labels, for the tests of
// the Go labels reader: in turn 3u of its thread's CPU time in
// burnCheckout under handler=checkout, u in burnSearch under
// handler=search and tenant=t-42, and u in burnUnlabeled under none, with
// u drawn from 1 to 3 ms each round (a fixed round would lock to the
// sampling period: under emulation a run sees only a few of its phases); a
// second goroutine, under handler=sleeper, waits in nanosleep system
// calls (off CPU, its goroutine still its thread's). It runs for a number
// of seconds (first argument) and prints its pid first, then each second
// "cpu <checkout ns> <search ns>": the thread CPU time each labelled burn
// really took so far, overshoot included, the truth a profile's split is
// compared with.
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// spin does a little work (a few microseconds; tens to a hundred under
// emulation): each burn overshoots its end by up to one spin, which would
// tilt the split towards the shorter burns if it were long.
func spin() {
	for i := 0; i < 1<<8; i++ {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
	}
}

// Each kind of work has a leaf of its own, so a sample tells which it was
// however its callers were walked (a stripped Go executable has no CFI);
// spin is inlined into each.

// burnCheckout burns d of the thread's CPU time and returns how much it
// took (a spin more).
//
//go:noinline
func burnCheckout(d time.Duration) time.Duration {
	start := threadCPU()
	now := start
	for end := start + d; now < end; now = threadCPU() {
		spin()
	}
	return now - start
}

//go:noinline
func burnSearch(d time.Duration) time.Duration {
	start := threadCPU()
	now := start
	for end := start + d; now < end; now = threadCPU() {
		spin()
	}
	return now - start
}

//go:noinline
func burnUnlabeled(d time.Duration) time.Duration {
	start := threadCPU()
	now := start
	for end := start + d; now < end; now = threadCPU() {
		spin()
	}
	return now - start
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
	// The literals are referenced by the reader; tenant's value, made at
	// run time (on the heap), is copied.
	tenant := "t-" + strconv.Itoa(42)
	var checkout, search time.Duration
	next := time.Now().Add(time.Second)
	for now := time.Now(); now.Before(until); now = time.Now() {
		if now.After(next) {
			fmt.Printf("cpu %d %d\n", checkout, search)
			next = now.Add(time.Second)
		}
		u := time.Millisecond + rand.N(2*time.Millisecond)
		pprof.Do(ctx, pprof.Labels("handler", "checkout"), func(context.Context) { checkout += burnCheckout(3 * u) })
		pprof.Do(ctx, pprof.Labels("handler", "search", "tenant", tenant), func(context.Context) { search += burnSearch(u) })
		burnUnlabeled(u)
	}
}
