// goscopes serves HTTP requests whose handler calls (*server).checkout, a
// method that sleeps a known time and blocks on a channel in between (so
// its goroutine is parked and often resumed on another thread), grows its
// stack past a copy on the first call of each goroutine, and panics on
// every 50th request (recovered by the handler, so checkout never returns
// from those). It measures each call itself, and runs it under the pprof
// labels {request: <n>}. refuse, never called, has no
// return instruction; built with cgo, the handler also calls a C function
// once a request.
//
// Usage: goscopes <out> <requests> <clients>. It prints "READY", waits for
// a line on stdin, sends the requests from that many concurrent clients,
// writes one line per call that returned, "checkout <tid> <start> <end>"
// (CLOCK_MONOTONIC ns around the call, the thread it ended on), then
// "migrated <calls that ended on another thread than they started on>",
// "moved <calls whose stack moved while inside them>", "panicked <n>" and
// "done", and exits.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

func monotonic() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

type server struct {
	work     chan chan int
	mu       sync.Mutex
	lines    []string
	migrated int
	moved    int
	panicked int
}

//go:noinline
func grow(n int) int {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return grow(n-1) + int(pad[n%len(pad)])
}

//go:noinline
func (s *server) checkout(request int) int {
	if request%50 == 49 {
		panic("checkout failed")
	}
	first := syscall.Gettid()
	var mark byte
	at := uintptr(unsafe.Pointer(&mark)) // changes when the stack moves (grown, or shrunk by the GC)
	ms := 1 + request%7
	time.Sleep(time.Duration(ms) * time.Millisecond / 2)
	reply := make(chan int)
	s.work <- reply
	v := <-reply + grow(64)
	time.Sleep(time.Duration(ms) * time.Millisecond / 2)
	if uintptr(unsafe.Pointer(&mark)) != at {
		v += 1 << 21
	}
	if syscall.Gettid() != first {
		return v + 1<<20 // a second return instruction
	}
	return v
}

// refuse only panics: it has no return instruction.
//
//go:noinline
func (s *server) refuse(request int) { panic(fmt.Sprintf("request %d refused", request)) }

func (s *server) handleCheckout(w http.ResponseWriter, r *http.Request) {
	request, _ := strconv.Atoi(r.URL.Query().Get("n"))
	if request < 0 {
		s.refuse(request)
	}
	if cWork(request) < 0 { // a C function (cgo builds)
		return
	}
	defer func() {
		if recover() != nil {
			s.mu.Lock()
			s.panicked++
			s.mu.Unlock()
			http.Error(w, "failed", http.StatusInternalServerError)
		}
	}()
	var start, end int64
	var v int
	pprof.Do(r.Context(), pprof.Labels("request", strconv.Itoa(request)), func(context.Context) {
		start = monotonic()
		v = s.checkout(request)
		end = monotonic()
	})
	s.mu.Lock()
	s.lines = append(s.lines, fmt.Sprintf("checkout %d %d %d", syscall.Gettid(), start, end))
	if v&(1<<20) != 0 {
		s.migrated++
	}
	if v&(1<<21) != 0 {
		s.moved++
	}
	s.mu.Unlock()
	fmt.Fprintln(w, v)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: goscopes <out> <requests> <clients>")
		os.Exit(2)
	}
	requests, _ := strconv.Atoi(os.Args[2])
	clients, _ := strconv.Atoi(os.Args[3])
	s := &server{work: make(chan chan int)}
	go func() {
		for reply := range s.work {
			time.Sleep(200 * time.Microsecond)
			reply <- 1
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/checkout", s.handleCheckout)
	go http.Serve(ln, mux)
	fmt.Println("READY")
	bufio.NewReader(os.Stdin).ReadString('\n')

	var wg sync.WaitGroup
	next := make(chan int)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range next {
				resp, err := http.Get(fmt.Sprintf("http://%s/checkout?n=%d", ln.Addr(), n))
				if err != nil {
					panic(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	for n := 0; n < requests; n++ {
		next <- n
	}
	close(next)
	wg.Wait()
	f, err := os.Create(os.Args[1])
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	for _, l := range s.lines {
		fmt.Fprintln(f, l)
	}
	fmt.Fprintf(f, "migrated %d\nmoved %d\npanicked %d\ndone\n", s.migrated, s.moved, s.panicked)
	s.mu.Unlock()
	f.Close()
	fmt.Println("DONE")
}
