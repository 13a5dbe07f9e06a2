package main

// The probes suite's Go scenarios: what a probe on a Go function costs per
// call (an uprobe after its stack check, one on its return instruction,
// the scope keyed by goroutine) beside the C probe's uprobe+uretprobe.
// workloads/goprobeloop is probeloop.c in Go, built by the machine's go.

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

// Scenario names of the Go part of the probes suite.
const (
	scGoNoProbe = "Go: no probe"
	scGoOurs    = "Go: bpfprofiler probe, min_duration 0"
	goProbed    = "main.probedCall"
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
// the collector's probe on main.probedCall, every call a record.
func goProbeScenarios(ctx context.Context, e env, calls uint64) ([]probeScenario, error) {
	bin, err := buildGoWorkload(e.dir, "goprobeloop", goprobeloopSource)
	if err != nil {
		return nil, err
	}
	w := workload{name: "goprobeloop", bin: bin, args: []string{strconv.FormatUint(calls, 10)}}
	scs := []probeScenario{{scGoNoProbe, func(ctx context.Context) (probeRun, error) {
		res, err := runBaseline(ctx, w)
		return probeRun{wall: res.wall}, err
	}}}
	if !e.o.skipCollector {
		cfg := e.collector(profileConfig{probes: []benchProbe{{
			id: benchProbeID, fileMatch: "^" + regexp.QuoteMeta(bin) + "$", symbol: goProbed,
		}}})
		scs = append(scs, probeScenario{scGoOurs, func(ctx context.Context) (probeRun, error) {
			return runProbedByCollector(ctx, cfg, w, calls, true, false)
		}})
	}
	return scs, nil
}

// printGo reports the Go probe's overhead per call against the C probe's,
// each over its own workload's no-probe run of the same round.
func (r *probeReport) printGo(w io.Writer) {
	if x, ok := r.ratio(r.overhead, scGoOurs, scOurs); ok {
		fmt.Fprintf(w, "Go probe / C probe (overhead per call, every call a record): %.3f (%.0f ns vs %.0f ns)\n",
			x, median(r.overhead[scGoOurs]), median(r.overhead[scOurs]))
	}
}

// goBase is the scenario whose run a Go scenario's overhead is taken
// against.
func goBase(sc string) (string, bool) {
	switch sc {
	case scGoNoProbe, scGoOurs:
		return scGoNoProbe, true
	}
	return "", false
}
