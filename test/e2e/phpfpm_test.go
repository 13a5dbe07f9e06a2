//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// php-fpm (PHP 8.2 and 8.4, without opcache and with its tracing JIT),
// started after a host-wide collector that keeps php-fpm's processes only,
// serving phpwork.php to two local FastCGI clients that ask again as soon
// as answered: every worker's CPU profile through OTLP has the script's
// frames, Spinner::spin <- work <- {main} with their lines, in place of
// the interpreter's native frames, in at least 90% of its samples (of at
// least 200).
//
// A request spins for fpmRequest, 0.1 s: {main}'s op_array lives in the
// request's memory (emalloc'd, opcache or not) and is freed when the
// request ends, before the collector names the stacks (at each report),
// so the walker records {main} by its file name and line instead
// (bpf/php.h, PHP_FRAME_CODE). Before it did, on the 2-CPU VM (30 Nov
// 2026), each worker's whole share was 99.5-100% with 2 s requests,
// 88-100% with 0.5 s ones, 79-99% with 0.1 s ones.
func TestCollectorPHPFPMFrames(t *testing.T) {
	otlp := profileCPU(t, "'/php-fpm[0-9.]+$'")

	chain := phpWorkChain(t)
	script := testutil.Workload(t, "phpwork.php")
	ctx, cancel := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	t.Cleanup(func() { cancel(); clients.Wait() })
	var workers []interpreted
	for _, v := range testutil.PHPVersions {
		p := testutil.DebianPHP(t, v)
		for _, mode := range phpModes {
			sock, master := testutil.StartFPM(t, p, p.Args(mode.opcache, mode.jit))
			t.Cleanup(cancel) // the clients stop asking before php-fpm is killed
			for range 2 {     // one per worker
				clients.Add(1)
				go func() {
					defer clients.Done()
					serve(ctx, t, sock, script)
				}()
			}
			for _, pid := range testutil.FPMWorkers(t, master) {
				workers = append(workers, interpreted{name: fmt.Sprintf("php-fpm %s %s worker %d", v, mode.name, pid),
					pid: pid, typ: "php", script: "phpwork.php", chain: chain, sampleType: "samples"})
			}
		}
	}
	requireWhole(t, otlp, workers, 200)
}

// fpmRequest is how long each request spins (phpwork.php?seconds=).
const fpmRequest = "0.1"

// serve asks php-fpm on sock for script, spinning for fpmRequest, again
// and again until ctx ends; a failed request fails the test unless ctx
// has ended.
func serve(ctx context.Context, t *testing.T, sock, script string) {
	for ctx.Err() == nil {
		body, err := testutil.FastCGIGet(sock, script, "seconds="+fpmRequest, testutil.Patient(30*time.Second))
		if err != nil && ctx.Err() == nil {
			t.Errorf("php-fpm on %s: %v; it said %q", sock, err, body)
			return
		}
	}
}

// Apache's mod_php (Debian bookworm's apache2 and libapache2-mod-php8.2:
// prefork, NTS libphp8.2.so; without opcache and with its tracing JIT),
// started after a host-wide collector that keeps apache2's processes
// only, serving phpwork.php over HTTP to two local clients per server
// that ask again as soon as answered: every worker's CPU profile through
// OTLP has the script's frames, Spinner::spin <- work <- {main} with
// their lines, below the native frames of apache2 down to _start, in at
// least 90% of its samples (of at least 200), as php-fpm's workers have.
func TestCollectorModPHPFrames(t *testing.T) {
	otlp := profileCPU(t, "'/apache2$'")

	chain := phpWorkChain(t)
	script := testutil.Workload(t, "phpwork.php")
	ctx, cancel := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	t.Cleanup(func() { cancel(); clients.Wait() })
	var workers []interpreted
	for _, mode := range phpModes {
		server, parent := testutil.StartApache(t, filepath.Dir(script), testutil.ApachePHPIni(mode.opcache, mode.jit))
		t.Cleanup(cancel) // the clients stop asking before Apache is killed
		url := fmt.Sprintf("http://%s/%s?seconds=%s", server, filepath.Base(script), fpmRequest)
		for range 2 { // one per worker
			clients.Add(1)
			go func() {
				defer clients.Done()
				serveHTTP(ctx, t, url)
			}()
		}
		for _, pid := range testutil.ChildPIDs(t, parent) {
			workers = append(workers, interpreted{name: fmt.Sprintf("mod_php 8.2 %s worker %d", mode.name, pid),
				pid: pid, typ: "php", script: "phpwork.php", chain: chain, sampleType: "samples"})
		}
	}
	requireWhole(t, otlp, workers, 200)
}

// serveHTTP gets url again and again until ctx ends, on a client of its
// own (one kept-alive connection, one worker); a failed request fails the
// test unless ctx has ended.
func serveHTTP(ctx context.Context, t *testing.T, url string) {
	client := &http.Client{Transport: &http.Transport{}, Timeout: testutil.Patient(30 * time.Second)}
	defer client.CloseIdleConnections()
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Error(err)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("GET %s: %v", url, err)
			}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if (err != nil || resp.StatusCode != http.StatusOK) && ctx.Err() == nil {
			t.Errorf("GET %s: %s, %v; it said %q", url, resp.Status, err, body)
			return
		}
	}
}
