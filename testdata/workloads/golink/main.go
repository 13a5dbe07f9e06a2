// golink runs goroutines that each call (*server).handle a number of
// times, burning CPU in outside between calls. handle burns in burnBefore,
// blocks on a channel that a dispatcher goroutine answers after a short
// sleep (so the goroutine is parked and often resumes on another thread),
// then burns in burnAfter. With "labels" each call runs under the pprof
// labels {request: <n>}.
//
// Usage: golink <goroutines> <calls> <burn ms> <delay ms> [labels]. It
// burns in outside for delay ms first (for probes to attach, and a
// profiler to learn the process from its first samples), then prints
// "migrated <calls that ended on another thread than they started on> of
// <calls>".
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var sink atomic.Uint64

// burn spins for d, in its caller's name (inlined away is fine: each
// caller is noinline and shows in the stack).
func burn(d time.Duration) {
	x := sink.Load()
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := 0; i < 1000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink.Store(x)
}

//go:noinline
func burnBefore(d time.Duration) { burn(d) }

//go:noinline
func burnAfter(d time.Duration) { burn(d) }

//go:noinline
func outside(d time.Duration) { burn(d) }

type server struct {
	work chan chan struct{}
	d    time.Duration
}

// handle reports whether it ended on another thread than it started on.
//
//go:noinline
func (s *server) handle() bool {
	first := syscall.Gettid()
	burnBefore(s.d)
	reply := make(chan struct{})
	s.work <- reply
	<-reply
	burnAfter(s.d)
	return syscall.Gettid() != first
}

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: golink <goroutines> <calls> <burn ms> <delay ms> [labels]")
		os.Exit(2)
	}
	arg := func(i int) int {
		n, err := strconv.Atoi(os.Args[i])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return n
	}
	goroutines, calls, ms, delay := arg(1), arg(2), arg(3), arg(4)
	labels := len(os.Args) > 5 && os.Args[5] == "labels"
	s := &server{work: make(chan chan struct{}), d: time.Duration(ms) * time.Millisecond}
	go func() {
		for reply := range s.work {
			time.Sleep(200 * time.Microsecond)
			close(reply)
		}
	}()
	outside(time.Duration(delay) * time.Millisecond)

	var migrated atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < calls; c++ {
				call := func(context.Context) {
					if s.handle() {
						migrated.Add(1)
					}
				}
				if labels {
					pprof.Do(context.Background(), pprof.Labels("request", strconv.Itoa(g*calls+c)), call)
				} else {
					call(context.Background())
				}
				outside(s.d / 2)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("migrated %d of %d\n", migrated.Load(), goroutines*calls)
}
