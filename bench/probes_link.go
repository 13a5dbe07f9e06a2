package main

// The probes suite's linking scenarios: the probe (min_duration 1s, so no
// records) with the CPU sampler on, link_samples false and true. Their
// ns/call ratio is what linking costs a probed call (the entry writes the
// thread's open scope, the exit removes it); the CPU sampler's BPF run time
// per sample (kernel BPF statistics) is what it costs a sample (a lookup of
// the open scope, a larger key).

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

const (
	scLinkOff  = "bpfprofiler probe, min_duration 1s, cpu 99 Hz, link_samples false"
	scLinkOn   = "bpfprofiler probe, min_duration 1s, cpu 99 Hz, link_samples true"
	linkCPUHz  = 99
	linkTarget = 1.05 // link on / link off, ns per call
)

// samplerPrograms are the CPU sampler's programs: a sample runs the first
// and, when its user stack is walked with unwind tables, the second.
var samplerPrograms = []string{"sample_cpu", "walk_user_stack"}

// linkConfigs returns the collector configurations of the linking
// scenarios, by scenario name.
func linkConfigs(e env, bin string) map[string]collectorConfig {
	out := map[string]collectorConfig{}
	for _, link := range []bool{false, true} {
		name := scLinkOff
		if link {
			name = scLinkOn
		}
		out[name] = e.collector(profileConfig{cpuHz: linkCPUHz, probes: []benchProbe{{
			id: benchProbeID, fileMatch: "^" + regexp.QuoteMeta(bin) + "$", symbol: probedSymbol,
			minDuration: filterMinDur, linkSamples: &link,
		}}})
	}
	return out
}

// samplerStats sums the kernel's run time and run count of the CPU
// sampler's programs loaded now (one collector runs at a time).
func samplerStats() (runtime time.Duration, runs uint64, err error) {
	runtime, runs = samplerStatsOf(nil)
	return runtime, runs, nil
}

// samplerStatsOf is samplerStats of the programs in ids alone (nil: all).
func samplerStatsOf(ids map[ebpf.ProgramID]bool) (runtime time.Duration, runs uint64) {
	eachSamplerProgram(func(id ebpf.ProgramID, p *ebpf.Program, first bool) {
		if ids != nil && !ids[id] {
			return
		}
		if st, err := p.Stats(); err == nil {
			runtime += st.Runtime
			if first {
				runs += st.RunCount
			}
		}
	})
	return runtime, runs
}

// samplerProgramIDs are the CPU sampler's programs loaded now.
func samplerProgramIDs() map[ebpf.ProgramID]bool {
	ids := map[ebpf.ProgramID]bool{}
	eachSamplerProgram(func(id ebpf.ProgramID, _ *ebpf.Program, _ bool) { ids[id] = true })
	return ids
}

// eachSamplerProgram calls f with each loaded program named in
// samplerPrograms (first: named by the first, which counts samples).
func eachSamplerProgram(f func(id ebpf.ProgramID, p *ebpf.Program, first bool)) {
	var id ebpf.ProgramID
	for {
		var err error
		id, err = ebpf.ProgramGetNextID(id)
		if err != nil {
			return // no more programs
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		if info, err := p.Info(); err == nil {
			if i := slices.Index(samplerPrograms, info.Name); i >= 0 {
				f(id, p, i == 0)
			}
		}
		_ = p.Close()
	}
}

// enableBPFStats turns on the kernel's BPF run time statistics until the
// returned closer is closed.
func enableBPFStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF statistics: %w", err)
	}
	return c, nil
}
