package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// The collector of a variant: host-wide, 99 Hz, off-CPU on, 10 s reports,
// the fake pod's runtime files under its host root, and the resource
// attributes the variant puts on the samples.
const collectorYAML = `receivers:
  bpfprofiler:
    report_interval: 10s
    cpu: {samples_per_second: 99}
    off_cpu: {enabled: true, min_block: 1ms}
    kubernetes: {host_root: %s}
    resource_attributes_on_samples: [%s]
exporters:
%s
service:
  telemetry:
    metrics:
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [%s]}
`

// onSamples are the resource attributes deploy/kubernetes/configmap.yaml
// puts on the samples for Pyroscope.
const onSamples = "k8s.namespace.name, k8s.pod.name, k8s.container.name, container.id, host.name"

// exporterYAML is the exporter of a variant, sending to addr (Pyroscope's
// HTTP port, or a proxy in front of it): the exporter's defaults, or the
// timeout, queue and retry deploy/kubernetes/configmap.yaml ships.
func exporterYAML(transport, settings, addr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n", transport)
	if transport == "otlp_grpc" {
		fmt.Fprintf(&b, "    endpoint: %s\n    tls: {insecure: true}\n", addr)
	} else {
		fmt.Fprintf(&b, "    endpoint: http://%s\n", addr)
	}
	if settings == "shipped" {
		b.WriteString("    timeout: 30s\n    sending_queue: {num_consumers: 4, queue_size: 30}\n    retry_on_failure: {max_elapsed_time: 5m}\n")
	}
	return b.String()
}

type collector struct {
	cmd         *exec.Cmd
	metricsPort int
	mu          sync.Mutex
	log         strings.Builder
	done        chan struct{}
	once        sync.Once
	stopErr     error
}

func startCollector(ctx context.Context, bin, dir, hostRoot, attrsOnSamples, exporter string) (*collector, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	transport := strings.TrimSuffix(strings.Fields(exporter)[0], ":")
	conf := filepath.Join(dir, "collector.yaml")
	yaml := fmt.Sprintf(collectorYAML, hostRoot, attrsOnSamples, exporter, port, transport)
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	c := &collector{metricsPort: port, done: make(chan struct{})}
	c.cmd = exec.Command(bin, "--config", conf, "--feature-gates=service.profilesSupport")
	out, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	c.cmd.Stdout = c.cmd.Stderr
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go c.readLog(out, ready)
	select {
	case <-ready:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("the collector exited: %s", c.tail())
	case <-time.After(60 * time.Second):
		_ = c.stop()
		return nil, fmt.Errorf("the collector was not ready in 60 s: %s", c.tail())
	case <-ctx.Done():
		_ = c.stop()
		return nil, ctx.Err()
	}
}

func (c *collector) readLog(r io.Reader, ready chan struct{}) {
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	signalled := false
	for lines.Scan() {
		c.mu.Lock()
		c.log.WriteString(lines.Text() + "\n")
		c.mu.Unlock()
		if !signalled && strings.Contains(lines.Text(), "Everything is ready") {
			close(ready)
			signalled = true
		}
	}
	_ = c.cmd.Wait()
	close(c.done)
}

// stop sends SIGTERM (the exporter drains its queue) and waits up to 60 s.
func (c *collector) stop() error {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(60 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
			c.stopErr = fmt.Errorf("the collector did not stop within 60 s")
		}
	})
	return c.stopErr
}

// cpuTime is the collector's user and system time so far.
func (c *collector) cpuTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	utime, stime, err := procfs.ParseStatTimes(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", c.cmd.Process.Pid, err)
	}
	ticks := utime + stime
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times on Linux.
const clockTicks = 100

func (c *collector) count(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Count(c.log.String(), s)
}

func (c *collector) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.log.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// exporterMetrics reads the exporter's sent and failed sample counts from
// the collector's own metrics.
func (c *collector) exporterMetrics() map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", c.metricsPort))
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		for _, name := range []string{"otelcol_exporter_sent_profile_samples", "otelcol_exporter_send_failed_profile_samples", "otelcol_exporter_enqueue_failed_profile_samples"} {
			if strings.HasPrefix(line, name) {
				var v float64
				if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
					out[name] += v
				}
			}
		}
	}
	return out
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
