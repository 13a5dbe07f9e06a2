package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseTPS(t *testing.T) {
	// pgbench 15's summary, abridged.
	out := `transaction type: <builtin: select only>
scaling factor: 1
number of clients: 2
latency average = 0.152 ms
initial connection time = 4.117 ms
tps = 13121.540313 (without initial connection time)
`
	got, err := parseTPS(out)
	if err != nil || got != 13121.540313 {
		t.Fatalf("parseTPS = %v, %v; want 13121.540313", got, err)
	}
	if _, err := parseTPS("pgbench: error: connection refused\n"); err == nil {
		t.Fatal("parseTPS without a tps line: no error")
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
