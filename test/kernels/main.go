// Command kernels is the kernel matrix (make test-kernels): it boots Debian's
// kernels under qemu (software emulation) with an initramfs holding the
// ocb-built collector, the end-to-end test binaries and their workloads, runs
// the checks inside each, and prints one table: kernel x check -> ✔/✗ with the
// figure each check measured. The machine's own kernel runs the same checks
// without qemu. arm64/<series> boots Debian's arm64 kernel of the series
// (qemu-system-aarch64 -M virt) with an arm64 payload. It exits non-zero
// when a check fails on any kernel.
//
//	go run ./test/kernels -kernels 5.10,6.1,6.12,arm64/6.1,host -collector _build/otelcol-bpfprofiler
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	var (
		kernels   = flag.String("kernels", "5.10,6.1,6.12,host", "kernel series to boot (Debian packages; arm64/6.1 for arm64's), or host for the running kernel")
		collector = flag.String("collector", "_build/otelcol-bpfprofiler", "the ocb-built collector")
		collArm64 = flag.String("collector-arm64", "_build/otelcol-bpfprofiler-arm64", "the collector for arm64 guests (GOARCH=arm64 make collector)")
		cache     = flag.String("cache", "/var/cache/bpfprofiler/kernels", "where kernel packages and apt lists are kept (outside the repository)")
		timeout   = flag.Duration("timeout", 14*time.Minute, "time allowed for one kernel: boot and every check (7 to 9 minutes under emulation, go labels 3 to 5 of them)")
		tArm64    = flag.Duration("timeout-arm64", 20*time.Minute, "-timeout for arm64 guests (emulated on another architecture: slower)")
		readme    = flag.String("readme", "", "when set, rewrite the kernel table between the matrix markers of this file")
		keep      = flag.Bool("keep", false, "keep the work directory (initramfs, serial logs)")
		only      = flag.String("checks", "", "run only these checks (column or test names, comma-separated); stress checks run only when named")
		boots     = flag.Int("boots", 1, "boot (or run, for host) each kernel this many times, one row each")
		tcgThread = flag.String("tcg-thread", "multi", "qemu TCG threading, single or multi (see runGuest)")
		cpus      = flag.Int("cpus", 1, "virtual CPUs of each guest (see runGuest)")
		env       = flag.String("env", "", "KEY=VALUE pairs (comma-separated) added to the tests' environment")
	)
	flag.Parse()
	// Column names have spaces ("programs load"): -checks splits at commas.
	var names []string
	for _, n := range strings.Split(*only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if err := selectChecks(names); err != nil {
		fmt.Fprintln(os.Stderr, "kernels:", err)
		os.Exit(2)
	}
	if *readme != "" && (*only != "" || *boots != 1) {
		fmt.Fprintln(os.Stderr, "kernels: -readme writes the whole table: it takes neither -checks nor -boots")
		os.Exit(2)
	}
	var specs []kernelSpec
	for _, k := range splitList(*kernels) {
		spec, err := parseKernel(k)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kernels:", err)
			os.Exit(2)
		}
		specs = append(specs, spec)
	}
	// -collector and -timeout are the host architecture's.
	collectors := map[string]string{"arm64": *collArm64}
	collectors[runtime.GOARCH] = *collector
	timeouts := map[string]time.Duration{"arm64": *tArm64}
	timeouts[runtime.GOARCH] = *timeout
	extraEnv = splitList(*env)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, options{
		kernels:    specs,
		collectors: collectors,
		cache:      *cache,
		timeouts:   timeouts,
		readme:     *readme,
		keep:       *keep,
		boots:      max(*boots, 1),
		tcgThread:  *tcgThread,
		cpus:       max(*cpus, 1),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "kernels:", err)
		os.Exit(1)
	}
}

type options struct {
	kernels    []kernelSpec
	collectors map[string]string // by architecture
	cache      string
	timeouts   map[string]time.Duration // by architecture
	readme     string
	keep       bool
	boots      int
	tcgThread  string
	cpus       int
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func run(ctx context.Context, opts options) error {
	if os.Geteuid() != 0 {
		return errors.New("the kernel matrix needs root (BPF in the host run, apt for kernel packages)")
	}
	work, err := os.MkdirTemp("", "kernel-matrix-")
	if err != nil {
		return err
	}
	if opts.keep {
		fmt.Println("work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}
	payloads := map[*arch]*payload{}
	for _, k := range opts.kernels {
		if payloads[k.arch] != nil {
			continue
		}
		start := time.Now()
		p, err := buildPayload(ctx, filepath.Join(work, "payload-"+k.arch.name), opts.collectors[k.arch.name], opts.cache, k.arch)
		if err != nil {
			return fmt.Errorf("build the %s guest payload: %w", k.arch.name, err)
		}
		fmt.Printf("%s payload built in %v\n", k.arch.name, time.Since(start).Round(time.Second))
		payloads[k.arch] = p
	}
	var results []kernelResult
	for _, k := range opts.kernels {
		for boot := range opts.boots {
			start := time.Now()
			var res kernelResult
			if k.series == "host" {
				res = runHost(ctx, payloads[k.arch], opts.timeouts[k.arch.name])
			} else {
				dir := filepath.Join(work, fmt.Sprintf("%s-%s-%d", k.arch.name, k.series, boot))
				res = runGuest(ctx, k, payloads[k.arch], dir, opts)
			}
			res.took = time.Since(start)
			fmt.Printf("%s: %s in %v (%s)\n", res.label(), res.summary(), res.took.Round(time.Second), res.timing())
			if res.err != nil || res.failed() {
				fmt.Print(indent(res.log))
			}
			results = append(results, res)
		}
	}
	table := renderTable(results)
	fmt.Println()
	fmt.Print(table)
	if opts.readme != "" {
		if err := updateReadme(opts.readme, table); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.err != nil || r.failed() {
			return errors.New("a check failed (see above)")
		}
	}
	return nil
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    | " + l)
		}
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	return b.String()
}
