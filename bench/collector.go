package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
)

// readyMessage is what the collector logs once every component has started.
const readyMessage = "Everything is ready"

// collectorConfig says how to start the collector.
type collectorConfig struct {
	binary       string
	dir          string        // scratch directory: config, pprof files, logs
	readyTimeout time.Duration // how long to wait for readyMessage
	settle       time.Duration // wait after ready before measuring
	profile      profileConfig // what the receiver profiles
	// yaml, when set, is the whole configuration, written instead of the
	// one profile makes.
	yaml string
	// wrap, when set, turns the collector's command line into the one
	// started (a memory cgroup's Wrap); env is added to its environment.
	wrap func(argv ...string) []string
	env  []string
}

// profileConfig is what the receiver of a bench collector profiles, always
// host-wide.
type profileConfig struct {
	cpuHz    int           // CPU sampling frequency; 0 disables CPU profiling
	offCPU   bool          // off-CPU profiling
	minBlock time.Duration // off_cpu min_block (with offCPU)
	// mechanism is the off_cpu mechanism (with offCPU); "" is auto.
	mechanism string
	// probes, when not empty, are declared in the receiver and a logs
	// pipeline sends their records to the debug exporter.
	probes []benchProbe
	// unwinding is unwinding::method ("" is the default, auto).
	unwinding string
	// reportInterval is report_interval; 0 is the bench's 2 s.
	reportInterval time.Duration
	// metricsPort, when not 0, serves the collector's own metrics in the
	// Prometheus format on 127.0.0.1:metricsPort (else they are off).
	metricsPort int
	// otlpEndpoint, when not empty, adds an otlp_grpc exporter (default
	// compression, gzip) sending the profiles to that loopback address.
	otlpEndpoint string
	// otlpOnly (with otlpEndpoint) configures the collector as the
	// DaemonSet ships it: the OTLP export alone, no pprof files and no
	// debug exporter.
	otlpOnly bool
	// noContext turns the readers of what processes publish off
	// (trace_context and go_labels); targetPIDs, when not empty, are the
	// only processes sampled ("1, 2").
	noContext  bool
	targetPIDs string
	// memoryGo turns memory::go on (Go heap profiles).
	memoryGo bool
}

// benchProbe is one `probes:` entry of a bench collector: symbol mode, or
// a USDT pair when usdtEntry is set.
type benchProbe struct {
	id, fileMatch, symbol string
	minDuration           time.Duration
	// linkSamples sets link_samples; nil leaves the default.
	linkSamples *bool
	// usdtEntry and usdtExit ("provider:name") replace symbol; attributes
	// is the probe's attributes map as YAML flow ("{query: str(arg0)}"),
	// "" for none.
	usdtEntry, usdtExit, attributes string
	// maxPerSecond is max_per_second; 0 writes 0 (no limit).
	maxPerSecond int
}

// collectorYAMLTemplate is the configuration of every collector the bench
// starts: a report every report interval (the first %s), written as pprof
// files and summarized by the debug exporter. The second %s is the
// receiver's profiling section, %q the pprof directory, the last two %s the
// service's metrics and more telemetry settings.
const collectorYAMLTemplate = `receivers:
  bpfprofiler:
    report_interval: %s
%s    pprof:
      directory: %q
processors:
  memory_limiter:
    check_interval: 1s
    limit_mib: 256
exporters:
  debug:
    verbosity: basic
service:
  telemetry:
%s%s  pipelines:
    profiles:
      receivers: [bpfprofiler]
      processors: [memory_limiter]
      exporters: [debug]
`

// collectorYAML returns the configuration of a collector profiling p and
// writing pprof files into profiles.
func collectorYAML(p profileConfig, profiles string) string {
	var b strings.Builder
	if p.cpuHz > 0 {
		fmt.Fprintf(&b, "    cpu:\n      enabled: true\n      samples_per_second: %d\n", p.cpuHz)
	} else {
		b.WriteString("    cpu:\n      enabled: false\n")
	}
	if p.offCPU {
		fmt.Fprintf(&b, "    off_cpu:\n      enabled: true\n      min_block: %s\n", p.minBlock)
		if p.mechanism != "" {
			fmt.Fprintf(&b, "      mechanism: %s\n", p.mechanism)
		}
	} else {
		b.WriteString("    off_cpu:\n      enabled: false\n")
	}
	if p.unwinding != "" {
		fmt.Fprintf(&b, "    unwinding:\n      method: %s\n", p.unwinding)
	}
	if p.memoryGo {
		b.WriteString("    memory:\n      go: true\n")
	}
	if p.noContext {
		b.WriteString("    trace_context:\n      enabled: false\n    go_labels:\n      enabled: false\n")
	}
	if p.targetPIDs != "" {
		fmt.Fprintf(&b, "    targets:\n      pids: [%s]\n", p.targetPIDs)
	}
	if len(p.probes) > 0 {
		b.WriteString("    probes:\n")
		for _, pr := range p.probes {
			// max_per_second 0: the bench measures every call becoming a
			// record, which the default rate limit would cut short.
			fmt.Fprintf(&b, "      - id: %s\n        file_match: %s\n", yamlQuote(pr.id), yamlQuote(pr.fileMatch))
			if pr.usdtEntry != "" {
				fmt.Fprintf(&b, "        usdt_entry: %s\n        usdt_exit: %s\n", yamlQuote(pr.usdtEntry), yamlQuote(pr.usdtExit))
			} else {
				fmt.Fprintf(&b, "        symbol: %s\n", yamlQuote(pr.symbol))
			}
			if pr.attributes != "" {
				fmt.Fprintf(&b, "        attributes: %s\n", pr.attributes)
			}
			fmt.Fprintf(&b, "        min_duration: %s\n        max_per_second: %d\n", pr.minDuration, pr.maxPerSecond)
			if pr.linkSamples != nil {
				fmt.Fprintf(&b, "        link_samples: %t\n", *pr.linkSamples)
			}
		}
	}
	telemetry := ""
	if len(p.probes) > 0 {
		// The bench counts the debug exporter's lines: no log sampling.
		telemetry = "    logs:\n      sampling:\n        enabled: false\n"
	}
	interval := p.reportInterval
	if interval == 0 {
		interval = 2 * time.Second
	}
	metrics := "    metrics:\n      level: none\n"
	if p.metricsPort != 0 {
		metrics = fmt.Sprintf("    metrics:\n      level: normal\n      readers:\n"+
			"        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}\n", p.metricsPort)
	}
	conf := fmt.Sprintf(collectorYAMLTemplate, interval, b.String(), profiles, metrics, telemetry)
	if p.otlpEndpoint != "" {
		conf = withOTLPExporter(conf, p.otlpEndpoint)
		if p.otlpOnly {
			conf = replaceOnce(conf, fmt.Sprintf("    pprof:\n      directory: %q\n", profiles), "")
			conf = replaceOnce(conf, "  debug:\n    verbosity: basic\n", "")
			conf = replaceOnce(conf, "exporters: [debug, otlp_grpc]", "exporters: [otlp_grpc]")
		}
	}
	if len(p.probes) > 0 {
		conf += "    logs:\n      receivers: [bpfprofiler]\n      exporters: [debug]\n"
	}
	return conf
}

// yamlQuote returns s as a single-quoted YAML scalar: no escapes apply
// inside but a doubled quote, so regular expressions pass unchanged.
func yamlQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// writeCollectorConfig writes the config file of collector run n into dir
// (cfg.yaml, else the one cfg.profile makes) and returns its path and the
// run's pprof directory.
func writeCollectorConfig(dir string, n int, cfg collectorConfig) (conf, profiles string, err error) {
	profiles = filepath.Join(dir, fmt.Sprintf("profiles-%d", n))
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		return "", "", err
	}
	text := cfg.yaml
	if text == "" {
		text = collectorYAML(cfg.profile, profiles)
	}
	conf = filepath.Join(dir, fmt.Sprintf("collector-%d.yaml", n))
	return conf, profiles, os.WriteFile(conf, []byte(text), 0o644)
}

// collector is a running collector process.
type collector struct {
	cmd      *exec.Cmd
	out      *lineLog
	logPath  string
	profiles string        // its pprof directory
	started  time.Time     // right before the process was started
	exited   chan struct{} // closed when the process has exited
	waitErr  error         // valid after exited is closed
	once     sync.Once
	stopErr  error
}

var collectorRuns int

// startCollector starts the collector and returns once it has logged
// readyMessage and then cfg.settle has passed, so that its start-up (BPF
// load, the first report symbolizing every process already on the host) is
// not part of what the caller measures next.
func startCollector(ctx context.Context, cfg collectorConfig) (*collector, error) {
	c, err := launchCollector(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.awaitReady(ctx, cfg); err != nil {
		return nil, errors.Join(err, c.stop())
	}
	return c, nil
}

// launchCollector starts the collector process and returns at once.
func launchCollector(cfg collectorConfig) (*collector, error) {
	collectorRuns++
	confPath, profiles, err := writeCollectorConfig(cfg.dir, collectorRuns, cfg)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.dir, fmt.Sprintf("collector-%d.log", collectorRuns))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	out := newLineLog(logFile)
	argv := []string{cfg.binary, "--config", confPath, "--feature-gates=service.profilesSupport"}
	if cfg.wrap != nil {
		argv = cfg.wrap(argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	if len(cfg.env) > 0 {
		cmd.Env = append(os.Environ(), cfg.env...)
	}
	// Killed with the bench, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the collector %s: %w", cfg.binary, err)
	}
	c := &collector{cmd: cmd, out: out, logPath: logPath, profiles: profiles, started: started, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

// awaitReady waits until the collector has logged readyMessage, then
// cfg.settle more.
func (c *collector) awaitReady(ctx context.Context, cfg collectorConfig) error {
	select {
	case <-c.out.ready:
	case <-c.exited:
		return fmt.Errorf("collector exited before it was ready (%v); its last output (%s):\n%s", c.waitErr, c.logPath, c.lastLines(30))
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(cfg.readyTimeout):
		return fmt.Errorf("collector did not log %q within %v; its last output (%s):\n%s", readyMessage, cfg.readyTimeout, c.logPath, c.lastLines(30))
	}
	select {
	case <-c.exited:
		return fmt.Errorf("collector exited right after start (%v); its last output (%s):\n%s", c.waitErr, c.logPath, c.lastLines(30))
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(cfg.settle):
	}
	return nil
}

func (c *collector) pid() int { return c.cmd.Process.Pid }

// stop sends SIGTERM and waits for the exit (SIGKILL after 15 s). It reports
// an error if the collector had already died or did not stop cleanly; later
// calls return the first result.
func (c *collector) stop() error {
	c.once.Do(func() {
		select {
		case <-c.exited:
			c.stopErr = fmt.Errorf("collector exited on its own (%v); its last output (%s):\n%s", c.waitErr, c.logPath, c.lastLines(30))
			return
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
			if c.waitErr != nil {
				c.stopErr = fmt.Errorf("collector stopped with %v; its last output (%s):\n%s", c.waitErr, c.logPath, c.lastLines(30))
			}
		case <-time.After(15 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
			c.stopErr = fmt.Errorf("collector did not stop within 15 s of SIGTERM; killed")
		}
	})
	return c.stopErr
}

func (c *collector) lastLines(n int) string { return c.out.last(n) }

// profilesMention reports whether any pprof file the collector wrote
// mentions name (a function name is stored as plain text in a profile's
// string table once decompressed).
func (c *collector) profilesMention(name string) (bool, error) {
	paths, err := filepath.Glob(filepath.Join(c.profiles, "*.pb.gz"))
	if err != nil {
		return false, err
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return false, err
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return false, fmt.Errorf("%s: %w", p, err)
		}
		data, err := io.ReadAll(zr)
		f.Close()
		if err != nil {
			return false, fmt.Errorf("%s: %w", p, err)
		}
		if bytes.Contains(data, []byte(name)) {
			return true, nil
		}
	}
	return false, nil
}

// lineLog is the collector's stdout and stderr: written to a file, the last
// lines kept for error messages, and ready closed on readyMessage.
type lineLog struct {
	mu       sync.Mutex
	file     *os.File
	partial  []byte
	lines    []string // the last maxKeep lines
	readyMsg string   // the line part that closes ready
	ready    chan struct{}
	isReady  bool
}

const maxKeep = 200

func newLineLog(f *os.File) *lineLog { return newLineLogReady(f, readyMessage) }

// newLineLogReady is a lineLog whose ready closes at the first line with
// msg.
func newLineLogReady(f *os.File, msg string) *lineLog {
	return &lineLog{file: f, readyMsg: msg, ready: make(chan struct{})}
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.file.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := strings.IndexByte(string(l.partial), '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if !l.isReady && strings.Contains(line, l.readyMsg) {
			l.isReady = true
			close(l.ready)
		}
		l.lines = append(l.lines, line)
		if len(l.lines) > maxKeep {
			l.lines = l.lines[len(l.lines)-maxKeep:]
		}
	}
	return len(p), nil
}

func (l *lineLog) last(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s := strings.Join(lines, "\n")
	if len(l.partial) > 0 {
		s += "\n" + string(l.partial)
	}
	return s
}

// meanDepth returns the mean number of frames (lines, inlined ones too) of
// the samples whose stack names function marker, over every pprof file the
// collector wrote, weighted by sample value; 0 when none does.
func (c *collector) meanDepth(marker string) (float64, error) {
	paths, err := filepath.Glob(filepath.Join(c.profiles, "*.pb.gz"))
	if err != nil {
		return 0, err
	}
	var frames, samples int64
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return 0, err
		}
		prof, err := profile.Parse(f)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		for _, s := range prof.Sample {
			n, named := 0, false
			for _, loc := range s.Location {
				n += max(1, len(loc.Line))
				for _, l := range loc.Line {
					named = named || l.Function != nil && l.Function.Name == marker
				}
			}
			if named && len(s.Value) > 0 {
				frames += int64(n) * s.Value[0]
				samples += s.Value[0]
			}
		}
	}
	if samples == 0 {
		return 0, nil
	}
	return float64(frames) / float64(samples), nil
}
