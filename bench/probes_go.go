package main

// The probes suite's Go scenarios: what a probe on a Go function costs per
// call (an uprobe after its stack check, one on its return instruction,
// the scope keyed by goroutine) beside the C probe's uprobe+uretprobe, and
// what it costs a Go HTTP server's throughput. workloads/goprobeloop is
// probeloop.c in Go, workloads/goserver a net/http server with its
// clients, both built by the machine's go.

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

//go:embed workloads/goprobeloop/main.go
var goprobeloopSource []byte

//go:embed workloads/goserver/main.go
var goserverSource []byte

// Scenario names of the Go part of the probes suite.
const (
	scGoNoProbe = "Go: no probe"
	scGoOurs    = "Go: bpfprofiler probe, min_duration 0"
	goProbed    = "main.probedCall"

	// The server's scenarios count requests, not calls.
	scGoServer       = "Go server: no probe (per request)"
	scGoServerProbed = "Go server: bpfprofiler probe on its handler (per request)"
	goServerProbed   = "main.(*server).handle"
	goServerClients  = 8
)

// buildGoWorkload writes the embedded Go source of workload name into its
// own directory under dir and builds it with the machine's go
// (testutil.CrossBuildGo: a module of its own, cgo off).
func buildGoWorkload(dir, name string, source []byte) (string, error) {
	src := filepath.Join(dir, name+"-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), source, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	return bin, testutil.CrossBuildGo(src, bin, runtime.GOARCH, testutil.GoBuild{})
}

// goProbeScenarios returns the Go scenarios: goprobeloop alone and under
// the collector's probe on main.probedCall, every call a record; goserver
// alone and under a probe on its handler's method, every request a record.
func goProbeScenarios(_ context.Context, e env, calls uint64) ([]probeScenario, error) {
	var scs []probeScenario
	for _, g := range []struct {
		name          string
		source        []byte
		args          []string
		symbol        string
		count         uint64 // calls of symbol a run makes
		alone, probed string // the scenarios
	}{
		{"goprobeloop", goprobeloopSource, []string{strconv.FormatUint(calls, 10)}, goProbed, calls, scGoNoProbe, scGoOurs},
		{"goserver", goserverSource, []string{strconv.FormatUint(e.o.goRequests, 10), strconv.Itoa(goServerClients)},
			goServerProbed, e.o.goRequests, scGoServer, scGoServerProbed},
	} {
		bin, err := buildGoWorkload(e.dir, g.name, g.source)
		if err != nil {
			return nil, err
		}
		w := workload{name: g.name, bin: bin, args: g.args}
		scs = append(scs, probeScenario{g.alone, func(ctx context.Context) (probeRun, error) {
			res, err := runBaseline(ctx, w)
			return probeRun{wall: res.wall}, err
		}})
		if e.o.skipCollector {
			continue
		}
		cfg := e.collector(profileConfig{probes: []benchProbe{{
			id: benchProbeID, fileMatch: "^" + regexp.QuoteMeta(bin) + "$", symbol: g.symbol,
		}}})
		count := g.count
		scs = append(scs, probeScenario{g.probed, func(ctx context.Context) (probeRun, error) {
			return runProbedByCollector(ctx, cfg, w, count, true, false)
		}})
	}
	return scs, nil
}

// printGo reports the Go probe's overhead per call against the C probe's,
// each over its own workload's no-probe run of the same round, and the Go
// server's throughput with the probe against without.
func (r *probeReport) printGo(w io.Writer) {
	if x, ok := r.ratio(r.overhead, scGoOurs, scOurs); ok {
		fmt.Fprintf(w, "Go probe / C probe (overhead per call, every call a record): %.3f (%.0f ns vs %.0f ns)\n",
			x, median(r.overhead[scGoOurs]), median(r.overhead[scOurs]))
	}
	// Throughput is requests / wall: its ratio is the inverse of ns/request's.
	if x, ok := r.ratio(r.ns, scGoServer, scGoServerProbed); ok {
		fmt.Fprintf(w, "Go server throughput, probe on its handler / no probe (every request a record): %.3f (%.0f vs %.0f requests/s, %d clients)\n",
			x, 1e9/median(r.ns[scGoServerProbed]), 1e9/median(r.ns[scGoServer]), goServerClients)
	}
}

// goBase is the scenario whose run a Go scenario's overhead is taken
// against.
func goBase(sc string) (string, bool) {
	switch sc {
	case scGoNoProbe, scGoOurs:
		return scGoNoProbe, true
	case scGoServer, scGoServerProbed:
		return scGoServer, true
	}
	return "", false
}

// perRequest says whether scenario sc counts requests (probeReport.requests)
// rather than calls.
func perRequest(sc string) bool { return sc == scGoServer || sc == scGoServerProbed }
