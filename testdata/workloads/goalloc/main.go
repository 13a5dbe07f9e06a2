// Command goalloc allocates three bytes in allocBig for each one in
// allocSmall, at a steady pace, and keeps every other object of each live
// in a ring of its own (the others are garbage at once), under the pprof
// labels {fn: big} and {fn: small}. Every 500 ms it prints what its own
// heap profile (runtime.MemProfile, scaled as runtime/pprof scales it)
// says each function allocated and holds live, and the runtime's live
// heap bytes:
//
//	profile big_alloc=N small_alloc=N big_inuse=N small_inuse=N heap_alloc=N rate=N
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

const small = 16 << 10

var (
	bigRing, smallRing [512][]byte
	sink               []byte
)

//go:noinline
func allocBig() []byte { return make([]byte, 3*small) }

//go:noinline
func allocSmall() []byte { return make([]byte, small) }

func main() {
	duration := flag.Duration("duration", 10*time.Second, "how long to allocate")
	rate := flag.Int("rate", 0, "runtime.MemProfileRate (0: the runtime's default)")
	perSecond := flag.Int("per-second", 1000, "rounds per second (each allocates 2 big and 2 small objects)")
	flag.Parse()
	if *rate > 0 {
		runtime.MemProfileRate = *rate
	}
	ctx := context.Background()
	bigLabels := pprof.WithLabels(ctx, pprof.Labels("fn", "big"))
	smallLabels := pprof.WithLabels(ctx, pprof.Labels("fn", "small"))
	end := time.Now().Add(*duration)
	report := time.Now().Add(500 * time.Millisecond)
	tick := time.NewTicker(time.Second / time.Duration(*perSecond))
	defer tick.Stop()
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		pprof.SetGoroutineLabels(bigLabels)
		bigRing[i%len(bigRing)] = allocBig()
		sink = allocBig()
		pprof.SetGoroutineLabels(smallLabels)
		smallRing[i%len(smallRing)] = allocSmall()
		sink = allocSmall()
		pprof.SetGoroutineLabels(ctx)
		if time.Now().After(report) {
			printProfile(os.Stdout)
			report = report.Add(500 * time.Millisecond)
		}
	}
	printProfile(os.Stdout)
}

// printProfile writes the line of the heap profile's sums for the two functions.
func printProfile(out *os.File) {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	sums := map[string][2]int64{}
	for _, r := range recs {
		fn := function(r.Stack())
		if fn == "" {
			continue
		}
		_, alloc := scale(r.AllocObjects, r.AllocBytes)
		_, inuse := scale(r.InUseObjects(), r.InUseBytes())
		s := sums[fn]
		sums[fn] = [2]int64{s[0] + alloc, s[1] + inuse}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(out, "profile big_alloc=%d small_alloc=%d big_inuse=%d small_inuse=%d heap_alloc=%d rate=%d\n",
		sums["big"][0], sums["small"][0], sums["big"][1], sums["small"][1], ms.HeapAlloc, runtime.MemProfileRate)
}

// function names which of the two allocated a record's stack.
func function(stk []uintptr) string {
	frames := runtime.CallersFrames(stk)
	for {
		f, more := frames.Next()
		switch {
		case strings.HasSuffix(f.Function, "main.allocBig"):
			return "big"
		case strings.HasSuffix(f.Function, "main.allocSmall"):
			return "small"
		}
		if !more {
			return ""
		}
	}
}

// scale is runtime/pprof's scaling of heap samples (scaleHeapSample).
func scale(count, bytes int64) (int64, int64) {
	if count == 0 || bytes == 0 {
		return 0, 0
	}
	rate := int64(runtime.MemProfileRate)
	if rate <= 1 {
		return count, bytes
	}
	avg := bytes / count
	s := 1 / (1 - math.Exp(-float64(avg)/float64(rate)))
	return int64(float64(count) * s), int64(float64(bytes) * s)
}
