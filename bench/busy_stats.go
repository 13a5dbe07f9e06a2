package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// promSample is one sample of the Prometheus text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parsePromText reads the samples of a Prometheus text-format exposition.
// Comments, blank lines and lines it cannot read are skipped (the figures
// are informative; a line we misread must not stop the bench).
func parsePromText(r io.Reader) ([]promSample, error) {
	var out []promSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if s, ok := parsePromLine(line); ok {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// parsePromLine reads `name{k="v",...} value [timestamp]`.
func parsePromLine(line string) (promSample, bool) {
	end := strings.IndexAny(line, "{ \t")
	if end <= 0 {
		return promSample{}, false
	}
	s := promSample{name: line[:end], labels: map[string]string{}}
	rest := line[end:]
	if rest[0] == '{' {
		var ok bool
		if rest, ok = parsePromLabels(rest[1:], s.labels); !ok {
			return promSample{}, false
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return promSample{}, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return promSample{}, false
	}
	s.value = v
	return s, true
}

// parsePromLabels reads `k="v",...}` into labels and returns what follows
// the closing brace.
func parsePromLabels(s string, labels map[string]string) (string, bool) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], true
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", false
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				if s[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return "", false
		}
		labels[key] = val.String()
		s = s[i+1:]
	}
}

// promFamily reports whether sample name belongs to the metric family
// name: the name itself, or with the _total suffix counters get.
func promFamily(sample, name string) bool {
	return sample == name || sample == name+"_total"
}

// promSum sums the samples of family name over every label set.
func promSum(samples []promSample, name string) float64 {
	var sum float64
	for _, s := range samples {
		if promFamily(s.name, name) {
			sum += s.value
		}
	}
	return sum
}

// promByLabel sums the samples of family name by the value of label (other
// labels summed over); samples without the label count under "".
func promByLabel(samples []promSample, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range samples {
		if promFamily(s.name, name) {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

// countsDelta returns after - before per key, without the keys that did not
// change.
func countsDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// fmtCounts formats counts as "a 12, b 3", largest first (ties by name),
// or "-" when there are none.
func fmtCounts(counts map[string]float64) string {
	keys := make([]string, 0, len(counts))
	for k, v := range counts {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "-"
	}
	slices.SortFunc(keys, func(a, b string) int {
		if counts[a] != counts[b] {
			if counts[a] > counts[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts[i] = fmt.Sprintf("%s %.0f", name, counts[k])
	}
	return strings.Join(parts, ", ")
}

// scrapeProm fetches and parses the Prometheus endpoint on 127.0.0.1:port.
func scrapeProm(ctx context.Context, port int) ([]promSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parsePromText(resp.Body)
}

// parseFdinfoMap reads the map_id and memlock (bytes) fields of the fdinfo
// of a BPF map fd; ok is false when either is missing.
func parseFdinfoMap(data []byte) (id, memlock uint64, ok bool) {
	var haveID, haveMem bool
	for line := range strings.Lines(string(data)) {
		key, val, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "map_id":
			id, haveID = n, true
		case "memlock":
			memlock, haveMem = n, true
		}
	}
	return id, memlock, haveID && haveMem
}

// bpfMapMemory sums the memlock of the BPF maps process pid holds an fd of
// (each map once, however many fds point at it).
func bpfMapMemory(pid int) (bytes uint64, maps int, err error) {
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		return 0, 0, err
	}
	if len(fds) == 0 {
		return 0, 0, fmt.Errorf("no fds in /proc/%d/fd (exited?)", pid)
	}
	seen := map[uint64]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil || target != "anon_inode:bpf-map" {
			continue // closed meanwhile, or not a map
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, filepath.Base(fd)))
		if err != nil {
			continue
		}
		if id, mem, ok := parseFdinfoMap(data); ok && !seen[id] {
			seen[id] = true
			bytes += mem
		}
	}
	return bytes, len(seen), nil
}

// hostCPU is the host's CPU time so far, in clock ticks, from the "cpu"
// line of /proc/stat.
type hostCPU struct {
	busy, total uint64
}

// parseHostCPU reads the aggregate "cpu" line of /proc/stat: busy is
// user+nice+system+irq+softirq+steal (guest time is inside user), total adds
// idle and iowait.
func parseHostCPU(data []byte) (hostCPU, error) {
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return hostCPU{}, fmt.Errorf("short cpu line %q", strings.TrimSpace(line))
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return hostCPU{}, fmt.Errorf("cpu field %d: %w", i+1, err)
			}
			v[i] = n
		}
		user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		busy := user + nice + system + irq + softirq + steal
		return hostCPU{busy: busy, total: busy + idle + iowait}, nil
	}
	return hostCPU{}, fmt.Errorf("no cpu line")
}

func readHostCPU() (hostCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}, err
	}
	return parseHostCPU(data)
}

// hostPercent is the host's busy CPU between two samples taken elapsed
// apart, in % of one core.
func hostPercent(before, after hostCPU, elapsed time.Duration) float64 {
	if after.busy < before.busy || elapsed <= 0 {
		return 0
	}
	return 100 * float64(after.busy-before.busy) / clockTicksPerSecond / elapsed.Seconds()
}
