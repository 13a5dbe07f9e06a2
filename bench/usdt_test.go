package main

import (
	"strings"
	"testing"
	"time"
)

func TestParsePgbench(t *testing.T) {
	// pgbench 15's summary, abridged.
	out := `transaction type: <builtin: select only>
scaling factor: 1
number of clients: 2
number of transactions actually processed: 65612
latency average = 0.152 ms
initial connection time = 4.117 ms
tps = 13121.540313 (without initial connection time)
`
	tps, txns, err := parsePgbench(out)
	if err != nil || tps != 13121.540313 || txns != 65612 {
		t.Fatalf("parsePgbench = %v, %v, %v; want 13121.540313, 65612", tps, txns, err)
	}
	if _, _, err := parsePgbench("pgbench: error: connection refused\n"); err == nil {
		t.Fatal("parsePgbench without a tps line: no error")
	}
}

func TestParseReapedCPU(t *testing.T) {
	stat := "17585 (post gres) S 1 17585 17585 0 -1 4194560 1818 541870 0 4 12 7 2311 845 20 0 1 0 4190000 225181696 7163 18446744073709551615\n"
	got, err := parseReapedCPU([]byte(stat))
	if want := (2311 + 845) * 10 * time.Millisecond; err != nil || got != want {
		t.Fatalf("parseReapedCPU = %v, %v; want %v", got, err, want)
	}
	if _, err := parseReapedCPU([]byte("17585 (postgres) S 1")); err == nil {
		t.Fatal("parseReapedCPU of a short line: no error")
	}
}

func TestCollectorYAMLUSDTProbe(t *testing.T) {
	conf := collectorYAML(profileConfig{probes: []benchProbe{{
		id: "pg.query", fileMatch: "/postgres$", usdtEntry: "postgresql:query__start", usdtExit: "postgresql:query__done",
		attributes: "{query: str(arg0)}", maxPerSecond: 1000, minDuration: time.Second,
	}}}, "/tmp/p")
	want := `    probes:
      - id: 'pg.query'
        file_match: '/postgres$'
        usdt_entry: 'postgresql:query__start'
        usdt_exit: 'postgresql:query__done'
        attributes: {query: str(arg0)}
        min_duration: 1s
        max_per_second: 1000
`
	if !strings.Contains(conf, want) {
		t.Fatalf("collectorYAML lacks\n%s\nin\n%s", want, conf)
	}
	if strings.Contains(conf, "symbol:") {
		t.Fatalf("a USDT probe with a symbol:\n%s", conf)
	}
}
