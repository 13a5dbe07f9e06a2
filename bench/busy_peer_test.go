package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPeerArgs(t *testing.T) {
	tests := []struct {
		command, addr string
		want          []string
		wantErr       bool
	}{
		{"/tmp/peer/ebpf-profiler -collection-agent {otlp} -disable-tls", "127.0.0.1:4317",
			[]string{"/tmp/peer/ebpf-profiler", "-collection-agent", "127.0.0.1:4317", "-disable-tls"}, false},
		{"p -endpoint=http://{otlp}/v1  -x", "h:1", []string{"p", "-endpoint=http://h:1/v1", "-x"}, false},
		{"  ", "h:1", nil, true},
	}
	for _, tt := range tests {
		got, err := peerArgs(tt.command, tt.addr)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("peerArgs(%q) = %q, %v; want %q", tt.command, got, err, tt.want)
		}
	}
}

func TestMeasureBusyPeer(t *testing.T) {
	defer func(w time.Duration) { peerStartupWindow = w }(peerStartupWindow)
	peerStartupWindow = 100 * time.Millisecond
	e := env{dir: t.TempDir(), o: options{busySettle: 200 * time.Millisecond, busyPhase: 300 * time.Millisecond}}
	for _, tt := range []struct {
		command        string
		minCPU, maxCPU float64 // % of a core over the phase
	}{
		{"sleep 60", 0, 5},
		// One thread hashing without end: 100%, give or take a 10 ms
		// clock tick at each end of the 300 ms phase (102.7% was seen).
		{"sha256sum /dev/zero", 10, 107},
	} {
		t.Run(tt.command, func(t *testing.T) {
			e.o.busyPeer = tt.command
			f, err := measureBusyPeer(context.Background(), e, nil)
			if err != nil {
				t.Fatal(err)
			}
			if f.cpuTicks < tt.minCPU || f.cpuTicks > tt.maxCPU || f.peakRSS == 0 || f.peakRSS > 64<<20 || f.endRSS > f.peakRSS {
				t.Fatalf("CPU %.1f%% (want %v to %v), peak RSS %d, at end %d", f.cpuTicks, tt.minCPU, tt.maxCPU, f.peakRSS, f.endRSS)
			}
		})
	}
	t.Run("a peer that exits", func(t *testing.T) {
		e.o.busyPeer = "/bin/false"
		_, err := measureBusyPeer(context.Background(), e, nil)
		if err == nil || !strings.Contains(err.Error(), "exited") {
			t.Fatalf("err %v", err)
		}
	})
}

// With -busy-peer-ready the runtimes are renewed once the peer prints it,
// and the settle counts from then; a peer that never prints it fails.
func TestMeasureBusyPeerReady(t *testing.T) {
	defer func(w, r time.Duration) { peerStartupWindow, peerReadyTimeout = w, r }(peerStartupWindow, peerReadyTimeout)
	peerStartupWindow, peerReadyTimeout = 100*time.Millisecond, 2*time.Second
	e := env{dir: t.TempDir(), o: options{busySettle: 200 * time.Millisecond, busyPhase: 300 * time.Millisecond,
		busyPeerReady: "profiling now"}}
	// peerArgs splits at spaces: the script goes through a file.
	script := filepath.Join(e.dir, "peer.sh")
	if err := os.WriteFile(script, []byte("sleep 0.5; echo profiling now; exec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.o.busyPeer = "sh " + script
	start := time.Now()
	var renewedAfter time.Duration
	if _, err := measureBusyPeer(context.Background(), e, func() error { renewedAfter = time.Since(start); return nil }); err != nil {
		t.Fatal(err)
	}
	if renewedAfter < 500*time.Millisecond || renewedAfter > 5*time.Second {
		t.Fatalf("renewed %v after the start, want after the peer printed its line (0.5 s)", renewedAfter)
	}
	e.o.busyPeer = "sleep 60"
	_, err := measureBusyPeer(context.Background(), e, func() error { return nil })
	if err == nil || !strings.Contains(err.Error(), "not printed") {
		t.Fatalf("err %v, want the line not printed", err)
	}
}

func TestPrintPeerTable(t *testing.T) {
	rows := []busyRow{
		{name: "1 idle host", col: &busyFigures{cpuTicks: 0.1, peakRSS: 61 << 20},
			peer: &peerFigures{cpuTicks: 0.4, cpuSched: 0.38, startup: 12.5, peakRSS: 77 << 20, endRSS: 70 << 20, requests: 3}},
		{name: "4 a burst", col: &busyFigures{cpuTicks: 2, sinceRenew: 6.25, peakRSS: 75 << 20},
			peer: &peerFigures{cpuTicks: 1, sinceRenew: 4.5, peakRSS: 80 << 20, endRSS: 60 << 20}},
		{name: "2 without a peer", col: &busyFigures{cpuTicks: 0.1}},
	}
	var b bytes.Buffer
	printPeerTable(&b, rows, nil)
	for _, want := range []string{
		"| 1 idle host | 0.10 | 0.40 (0.38) | 0.25 | 61.0 | 77.0 | 70.0 | 12.50 | 3 | - |",
		"| 4 a burst | 2.00 | 1.00 (0.00) | 2.00 | 75.0 | 80.0 | 60.0 | 0.00 | 0 | 6.25 / 4.50 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("table:\n%s\nwant the row %s", b.String(), want)
		}
	}
	if strings.Contains(b.String(), "without a peer") {
		t.Fatalf("table:\n%s\nwant no row of a phase without a peer", b.String())
	}
}
