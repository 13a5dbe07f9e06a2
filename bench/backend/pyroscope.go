package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// pyroscope is a Pyroscope single binary on loopback with its data in a
// scratch directory. OTLP over gRPC (h2c) and HTTP both go to its HTTP port.
type pyroscope struct {
	cmd      *exec.Cmd
	httpURL  string
	grpcAddr string
	done     chan struct{}
}

func startPyroscope(ctx context.Context, bin, dir string) (*pyroscope, error) {
	var ports [6]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	data := filepath.Join(dir, "pyroscope")
	addr := "127.0.0.1"
	args := []string{
		"-target=all",
		"-server.http-listen-address=" + addr, "-server.http-listen-port=" + strconv.Itoa(ports[0]),
		"-server.grpc-listen-address=" + addr, "-server.grpc-listen-port=" + strconv.Itoa(ports[1]),
		"-admin-server.http-listen-address=" + addr, "-admin-server.http-listen-port=" + strconv.Itoa(ports[2]),
		"-memberlist.bind-addr=" + addr, "-memberlist.advertise-addr=" + addr, "-memberlist.bind-port=" + strconv.Itoa(ports[3]),
		"-distributor.ring.instance-addr=" + addr, "-ingester.lifecycler.addr=" + addr,
		"-segment-writer.lifecycler.addr=" + addr, "-query-frontend.instance-addr=" + addr,
		"-query-scheduler.ring.instance-addr=" + addr, "-store-gateway.sharding-ring.instance-addr=" + addr,
		"-compactor.ring.instance-addr=" + addr, "-overrides-exporter.ring.instance-addr=" + addr,
		"-metastore.address=" + addr + ":" + strconv.Itoa(ports[1]), "-query-backend.address=" + addr + ":" + strconv.Itoa(ports[1]),
		"-metastore.raft.bind-address=" + addr + ":" + strconv.Itoa(ports[4]),
		"-metastore.raft.advertise-address=" + addr + ":" + strconv.Itoa(ports[4]),
		"-storage.backend=filesystem", "-storage.filesystem.dir=" + filepath.Join(data, "v2", "shared"),
		"-pyroscopedb.data-path=" + data,
		"-metastore.data-dir=" + filepath.Join(data, "v2", "metastore", "data"),
		"-metastore.raft.dir=" + filepath.Join(data, "v2", "metastore", "raft"),
		"-metastore.raft.snapshots-dir=" + filepath.Join(data, "v2", "metastore", "raft"),
		"-blocks-storage.bucket-store.sync-dir=" + filepath.Join(data, "sync"),
		"-compactor.data-dir=" + filepath.Join(data, "compactor"),
		"-usage-stats.enabled=false", "-self-profiling.disable-push=true",
	}
	log, err := os.Create(filepath.Join(dir, "pyroscope.log"))
	if err != nil {
		return nil, err
	}
	p := &pyroscope{
		cmd:      exec.Command(bin, args...),
		httpURL:  fmt.Sprintf("http://%s:%d", addr, ports[0]),
		grpcAddr: fmt.Sprintf("%s:%d", addr, ports[0]),
		done:     make(chan struct{}),
	}
	p.cmd.Dir, p.cmd.Stdout, p.cmd.Stderr = dir, log, log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); log.Close(); close(p.done) }()
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(p.httpURL + "/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("pyroscope exited; see %s", log.Name())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	p.stop()
	return nil, fmt.Errorf("pyroscope not ready in 120 s; see %s", log.Name())
}

func (p *pyroscope) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// query posts a Connect JSON request to the querier API.
func (p *pyroscope) query(ctx context.Context, method string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, p.httpURL+"/querier.v1.QuerierService/"+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	// Without it, dotted label names (thread.name, host.name) are hidden.
	r.Header.Set("Accept", "application/json; allow-utf8-labelnames=true")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 256<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", method, res.Status, b)
	}
	return json.Unmarshal(b, resp)
}

// seen is what Pyroscope shows.
type seen struct {
	profileTypes []string
	services     []string // service_name values
	labelNames   []string
	series       int // distinct label sets of the CPU profile type
	burnCPU      time.Duration
	burnHot      float64 // burn_hot's share of burn_hot + burn_cold
	sleepLong    time.Duration
	sleepShort   time.Duration
	unknown      []string // the labels of unknown_service series
	// resource maps each resource attribute put on the samples to the
	// label Pyroscope shows it as and that label's values.
	resource map[string]labelValues
	podCPU   time.Duration // the CPU profile's total selected by the pod's label
}

type labelValues struct {
	name   string
	values []string
}

// resourceKeys are the resource attributes the ConfigMap puts on samples.
var resourceKeys = strings.Split(strings.ReplaceAll(onSamples, " ", ""), ",")

// read queries Pyroscope until the totals stop growing, at most 5 minutes.
// Ingested data becomes queryable after the metastore compacts its segments
// (those older than 36 s, at the next write), and an empty answer is cached
// for a minute: the first query waits 90 s.
func (p *pyroscope) read(ctx context.Context, start, end time.Time, pod testutil.FakePod) (seen, error) {
	var last seen
	select {
	case <-ctx.Done():
		return last, ctx.Err()
	case <-time.After(90 * time.Second):
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		s, err := p.readOnce(ctx, start, end, pod)
		if err != nil {
			return s, err
		}
		if s.burnCPU > 0 && s.burnCPU == last.burnCPU && s.sleepLong == last.sleepLong {
			return s, nil
		}
		last = s
		time.Sleep(10 * time.Second)
	}
	return last, nil
}

func (p *pyroscope) readOnce(ctx context.Context, start, end time.Time, pod testutil.FakePod) (seen, error) {
	s := seen{resource: map[string]labelValues{}}
	window := map[string]any{"start": start.UnixMilli(), "end": end.UnixMilli()}
	var types struct {
		ProfileTypes []struct{ ID string } `json:"profileTypes"`
	}
	if err := p.query(ctx, "ProfileTypes", window, &types); err != nil {
		return s, err
	}
	cpuType, offType := "", ""
	for _, t := range types.ProfileTypes {
		s.profileTypes = append(s.profileTypes, t.ID)
		switch {
		case strings.HasPrefix(t.ID, "off_cpu:"):
			offType = t.ID
		case strings.Contains(t.ID, ":cpu:nanoseconds:"):
			cpuType = t.ID
		}
	}
	var names struct{ Names []string }
	if err := p.query(ctx, "LabelNames", window, &names); err != nil {
		return s, err
	}
	s.labelNames = names.Names
	var values struct{ Names []string }
	if err := p.query(ctx, "LabelValues", merge(window, map[string]any{"name": "service_name"}), &values); err != nil {
		return s, err
	}
	s.services = values.Names
	for _, key := range resourceKeys {
		// As sent, or with dots made underscores.
		for _, name := range []string{key, strings.ReplaceAll(key, ".", "_")} {
			if !slices.Contains(s.labelNames, name) {
				continue
			}
			var v struct{ Names []string }
			if err := p.query(ctx, "LabelValues", merge(window, map[string]any{"name": name}), &v); err != nil {
				return s, err
			}
			s.resource[key] = labelValues{name, v.Names}
			break
		}
	}
	if cpuType != "" {
		var series struct {
			LabelsSet []struct{} `json:"labelsSet"`
		}
		matcher := fmt.Sprintf(`{__profile_type__=%q}`, cpuType)
		if err := p.query(ctx, "Series", merge(window, map[string]any{"matchers": []string{matcher}}), &series); err != nil {
			return s, err
		}
		s.series = len(series.LabelsSet)
		// cpuburn runs in the pod: its series is the container's name.
		fn, err := p.functionTotals(ctx, window, cpuType, fmt.Sprintf(`{service_name=%q}`, pod.ContainerName))
		if err != nil {
			return s, err
		}
		s.burnCPU = time.Duration(fn[""])
		if hot, cold := fn["burn_hot"], fn["burn_cold"]; hot+cold > 0 {
			s.burnHot = float64(hot) / float64(hot+cold)
		}
		if l, ok := s.resource["k8s.pod.name"]; ok {
			fn, err := p.functionTotals(ctx, window, cpuType, fmt.Sprintf(`{%s=%q}`, selectorName(l.name), pod.Name))
			if err != nil {
				return s, err
			}
			s.podCPU = time.Duration(fn[""])
		}
	}
	if offType != "" {
		fn, err := p.functionTotals(ctx, window, offType, `{service_name="sleepers"}`)
		if err != nil {
			return s, err
		}
		s.sleepLong, s.sleepShort = time.Duration(fn["sleep_long"]), time.Duration(fn["sleep_short"])
	}
	sort.Strings(s.services)
	if slices.Contains(s.services, "unknown_service") {
		var unknown struct {
			LabelsSet []struct {
				Labels []struct{ Name, Value string } `json:"labels"`
			} `json:"labelsSet"`
		}
		if err := p.query(ctx, "Series", merge(window, map[string]any{"matchers": []string{`{service_name="unknown_service"}`}}), &unknown); err != nil {
			return s, err
		}
		for _, set := range unknown.LabelsSet {
			var kv []string
			for _, l := range set.Labels {
				if !strings.HasPrefix(l.Name, "__") {
					kv = append(kv, l.Name+"="+l.Value)
				}
			}
			s.unknown = append(s.unknown, strings.Join(kv, " "))
		}
	}
	return s, nil
}

// functionTotals merges the selected profiles (SelectMergeProfile, a pprof
// profile as JSON) and sums the values of the samples naming each function
// once; "" is every sample.
func (p *pyroscope) functionTotals(ctx context.Context, window map[string]any, profileType, selector string) (map[string]int64, error) {
	var prof struct {
		Sample []struct {
			LocationID []string `json:"locationId"`
			Value      []string `json:"value"`
		} `json:"sample"`
		Location []struct {
			ID   string `json:"id"`
			Line []struct {
				FunctionID string `json:"functionId"`
			} `json:"line"`
		} `json:"location"`
		Function []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"function"`
		StringTable []string `json:"stringTable"`
	}
	req := merge(window, map[string]any{"profileTypeID": profileType, "labelSelector": selector})
	if err := p.query(ctx, "SelectMergeProfile", req, &prof); err != nil {
		return nil, err
	}
	fnName := map[string]string{}
	for _, f := range prof.Function {
		if i, err := strconv.Atoi(f.Name); err == nil && i >= 0 && i < len(prof.StringTable) {
			fnName[f.ID] = prof.StringTable[i]
		}
	}
	locFns := map[string][]string{}
	for _, l := range prof.Location {
		for _, line := range l.Line {
			locFns[l.ID] = append(locFns[l.ID], fnName[line.FunctionID])
		}
	}
	out := map[string]int64{}
	for _, smp := range prof.Sample {
		if len(smp.Value) == 0 {
			continue
		}
		v, _ := strconv.ParseInt(smp.Value[0], 10, 64)
		out[""] += v
		named := map[string]bool{}
		for _, id := range smp.LocationID {
			for _, f := range locFns[id] {
				if !named[f] {
					named[f] = true
					out[f] += v
				}
			}
		}
	}
	return out, nil
}

// selectorName writes a label name in a selector: quoted when it is not a
// classic label name (k8s.pod.name).
func selectorName(name string) string {
	if strings.ContainsAny(name, ".-/") {
		return strconv.Quote(name)
	}
	return name
}

func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
