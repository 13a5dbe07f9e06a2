// goserver is a net/http server and its clients in one process, for `make
// bench` (suite probes) to measure a Go server's request throughput with
// and without a probe on its handler's method, main.(*server).handle
// (hashing a 16 KiB body, as a handler doing a little work would).
//
// Usage: goserver [requests] [clients] [stdin]. Prints the wall time of
// all requests in nanoseconds on stdout; on stderr "goserver: cpu_ns N",
// the process's CPU time over them.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

type server struct{ body []byte }

//go:noinline
func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	sum := sha256.Sum256(s.body)
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintln(w, hex.EncodeToString(sum[:]), r.URL.Query().Get("n"))
}

func cpuNS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func arg(i, def int) int {
	if len(os.Args) <= i || os.Args[i] == "stdin" {
		return def
	}
	n, err := strconv.Atoi(os.Args[i])
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "goserver: bad argument %q\n", os.Args[i])
		os.Exit(2)
	}
	return n
}

func main() {
	requests, clients := arg(1, 20000), arg(2, 8)
	s := &server{body: make([]byte, 16<<10)}
	for i := range s.body {
		s.body[i] = byte(i)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.handle)
	go func() { _ = http.Serve(ln, mux) }() // returns when the process exits
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	get := func(n int) {
		resp, err := client.Get(fmt.Sprintf("http://%s/?n=%d", ln.Addr(), n))
		if err != nil {
			fmt.Fprintln(os.Stderr, "goserver:", err)
			os.Exit(1)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "goserver:", err)
			os.Exit(1)
		}
	}
	for n := 0; n < clients; n++ { // warm: connections open, code paged in
		get(-1)
	}
	if os.Args[len(os.Args)-1] == "stdin" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "goserver: stdin closed before the start line")
			os.Exit(2)
		}
	}

	cpu0, start := cpuNS(), time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range next {
				get(n)
			}
		}()
	}
	for n := 0; n < requests; n++ {
		next <- n
	}
	close(next)
	wg.Wait()
	wall, cpu := time.Since(start), cpuNS()-cpu0
	fmt.Fprintf(os.Stderr, "goserver: cpu_ns %d\n", max(cpu, 1))
	fmt.Println(wall.Nanoseconds())
}
