package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// soakSample is one reading of the collector and its load.
type soakSample struct {
	at     time.Duration // since the collector was ready
	rss    uint64        // VmRSS
	goHeap uint64        // otelcol_process_runtime_heap_alloc_bytes (0: not scraped)
	cgroup uint64        // memory charged to its cgroup, BPF maps included
	// cgroupCache is the page cache in cgroup (files the collector read),
	// reclaimable; cgroupPeak the most charged so far.
	cgroupCache, cgroupPeak uint64
	bpf                     bpfMemory
	cpu                     float64 // % of a core since the previous sample (the first: since the start)
	execs                   int64   // pacer runs completed since the collector was ready
	execRate                float64 // per second since the previous sample
	// The collector's own gauges (-1: not scraped).
	unwindTables, unwindTableBytes float64
	pythonProcs, jvmProcs, v8Procs float64
	oomKills                       uint64 // by the kernel, in the cgroup
	buildIDs                       int    // distinct build ids built so far
	metricsOK                      bool
	scrapeErr, bpfErr              string
	cpuTicks                       uint64 // utime+stime so far (for the next sample's cpu)
}

// soakCSVHeader names the columns of the soak's CSV, one sample a row.
var soakCSVHeader = []string{
	"seconds", "rss_bytes", "go_heap_bytes", "cgroup_bytes", "cgroup_page_cache_bytes", "cgroup_peak_bytes", "bpf_bytes", "bpf_map_bytes", "bpf_table_bytes",
	"bpf_maps", "bpf_tables", "cpu_percent", "execs", "execs_per_second",
	"unwind_tables", "unwind_table_bytes", "python_processes", "jvm_processes", "v8_processes",
	"oom_kills", "build_ids",
}

// csvRecord is s as a row of soakCSVHeader's columns.
func (s soakSample) csvRecord() []string {
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	f := func(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	return []string{
		f(s.at.Seconds(), 1), u(s.rss), u(s.goHeap), u(s.cgroup), u(s.cgroupCache), u(s.cgroupPeak), u(s.bpf.total()), u(s.bpf.mapBytes), u(s.bpf.innerByte),
		strconv.Itoa(s.bpf.maps), strconv.Itoa(s.bpf.inner), f(s.cpu, 2), strconv.FormatInt(s.execs, 10), f(s.execRate, 1),
		f(s.unwindTables, 0), f(s.unwindTableBytes, 0), f(s.pythonProcs, 0), f(s.jvmProcs, 0), f(s.v8Procs, 0),
		u(s.oomKills), strconv.Itoa(s.buildIDs),
	}
}

// soakCSV writes the samples as they come, each row flushed: a run cut
// short keeps what it measured.
type soakCSV struct{ w *csv.Writer }

func newSoakCSV(w io.Writer) (*soakCSV, error) {
	c := &soakCSV{w: csv.NewWriter(w)}
	if err := c.w.Write(soakCSVHeader); err != nil {
		return nil, err
	}
	c.w.Flush()
	return c, c.w.Error()
}

func (c *soakCSV) write(s soakSample) error {
	if err := c.w.Write(s.csvRecord()); err != nil {
		return err
	}
	c.w.Flush()
	return c.w.Error()
}

// soakProbe reads one sample of a running soak.
type soakProbe struct {
	pid         int
	metricsPort int
	cgroup      *testutil.MemoryCgroup
	pacer       *execPacer
	churn       *soakChurn
	launched    time.Time // when the collector was started
	start       time.Time // when it was ready: the samples' time 0
	execs0      int64
	prev        *soakSample
}

// read takes a sample; what could not be read is left zero (and said in
// scrapeErr, bpfErr), except the process itself: an error means it is gone.
func (p *soakProbe) read(ctx context.Context) (soakSample, error) {
	s := soakSample{at: time.Since(p.start), unwindTables: -1, unwindTableBytes: -1, pythonProcs: -1, jvmProcs: -1, v8Procs: -1}
	cpu, err := readCPU(p.pid)
	if err != nil {
		return s, fmt.Errorf("collector gone: %w", err)
	}
	s.cpuTicks = cpu.ticks
	if s.rss, err = readVmRSS(p.pid); err != nil {
		return s, fmt.Errorf("collector gone: %w", err)
	}
	s.cgroup, s.cgroupCache, s.cgroupPeak, s.oomKills = p.cgroup.Usage(), p.cgroup.PageCache(), p.cgroup.Peak(), p.cgroup.OOMKills()
	var bpfErr error
	if s.bpf, bpfErr = readBPFMemory(p.pid); bpfErr != nil {
		s.bpfErr = bpfErr.Error()
	}
	s.execs = p.pacer.count() - p.execs0
	s.buildIDs, _ = p.churn.distinctBuildIDs()
	// The first sample's CPU is over the collector's life so far.
	prev := soakSample{at: -p.start.Sub(p.launched)}
	if p.prev != nil {
		prev = *p.prev
	}
	if d := (s.at - prev.at).Seconds(); d > 0 {
		s.cpu = 100 * float64(s.cpuTicks-prev.cpuTicks) / clockTicksPerSecond / d
	}
	if p.prev != nil && s.at > prev.at {
		s.execRate = float64(s.execs-prev.execs) / (s.at - prev.at).Seconds()
	}
	if prom, err := scrapeProm(ctx, p.metricsPort); err != nil {
		s.scrapeErr = err.Error()
	} else {
		s.metricsOK = true
		s.goHeap = uint64(promSum(prom, "otelcol_process_runtime_heap_alloc_bytes"))
		s.unwindTables = promSum(prom, "otelcol_bpfprofiler_unwind_tables")
		s.unwindTableBytes = promSum(prom, "otelcol_bpfprofiler_unwind_table_bytes")
		s.pythonProcs = promSum(prom, "otelcol_bpfprofiler_python_processes")
		s.jvmProcs = promSum(prom, "otelcol_bpfprofiler_jvm_processes")
		s.v8Procs = promSum(prom, "otelcol_bpfprofiler_v8_processes")
	}
	p.prev = &s
	return s, nil
}
