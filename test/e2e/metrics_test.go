//go:build linux

package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricValue sums the Prometheus text-format samples of the metric family
// name (counters carry a _total suffix), over all label sets, or those
// holding every one of labels (`version="3.14t"`).
func metricValue(text, name string, labels ...string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		metric, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		base, set, _ := strings.Cut(metric, "{")
		if base != name && base != name+"_total" || !containsAll(set, labels) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
