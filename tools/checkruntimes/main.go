// Command checkruntimes (make check-runtimes) runs the runtime tests on the
// newest release of each runtime the tests download at a pinned version
// (testutil.NodeReleases, testutil.GoLabelBuilds' toolchains) and reports
// what changed: each pin beside the newest release its registry serves,
// then each test package's result on the newest releases. Moving a pin is
// a commit of its own that says what was measured.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// goProxy lists the Go toolchains the go command fetches for GOTOOLCHAIN.
const goProxy = "https://proxy.golang.org/golang.org/toolchain/@v/list"

// suites are the tests each runtime's releases change: package and -run.
var suites = map[string][][2]string{
	"node": {
		{"./internal/runtimes/v8", ""},
		{"./internal/sampler", "Node"},
		{"./test/e2e", "Node"},
	},
	"go": {
		{"./internal/golabels", ""},
		{"./test/e2e", "GoLabels"},
	},
}

// release is one pinned runtime beside the newest the registry serves.
type release struct {
	runtime, line, pinned, newest string
}

func main() {
	always := flag.Bool("always", false, "run the tests even where every pin is the newest release")
	timeout := flag.Duration("timeout", 60*time.Minute, "go test -timeout of each package")
	flag.Parse()
	releases, err := newest()
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkruntimes:", err)
		os.Exit(1)
	}
	var nodeEnv, goEnv []string
	changed := map[string]bool{}
	fmt.Printf("%-6s %-8s %-10s %-10s\n", "", "line", "pinned", "newest")
	for _, r := range releases {
		mark := ""
		if r.newest != r.pinned {
			mark = "  newer release"
			changed[r.runtime] = true
			if r.runtime == "node" {
				nodeEnv = append(nodeEnv, r.line+"="+r.newest)
			} else {
				goEnv = append(goEnv, r.pinned+"="+r.newest)
			}
		}
		fmt.Printf("%-6s %-8s %-10s %-10s%s\n", r.runtime, r.line, r.pinned, r.newest, mark)
	}
	env := append(os.Environ(),
		testutil.NodeReleasesEnv+"="+strings.Join(nodeEnv, ","),
		testutil.GoToolchainsEnv+"="+strings.Join(goEnv, ","))
	failed := 0
	for _, rt := range []string{"node", "go"} {
		if !changed[rt] && !*always {
			fmt.Printf("%s: every pin is the newest release; -always runs its tests anyway\n", rt)
			continue
		}
		for _, s := range suites[rt] {
			args := []string{"test", "-count=1", "-p", "1", "-timeout", timeout.String(), s[0]}
			if s[1] != "" {
				args = append(args, "-run", s[1])
			}
			fmt.Printf("== %s: go %s\n", rt, strings.Join(args, " "))
			cmd := exec.Command("go", args...)
			cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Printf("FAIL %s on the newest releases: %v\n", s[0], err)
				failed++
			}
		}
	}
	if failed > 0 {
		fmt.Printf("%d package(s) fail on the newest releases: keep the pins, and look at what changed\n", failed)
		os.Exit(1)
	}
	fmt.Println("every runtime test passes on the newest releases")
}

// newest lists every pin beside the newest release of its line: node's
// majors from the npm registry, Go's minors from the module proxy.
func newest() ([]release, error) {
	var out []release
	majors := make([]int, 0, len(testutil.NodeReleases))
	for m := range testutil.NodeReleases {
		majors = append(majors, m)
	}
	slices.Sort(majors)
	for _, m := range majors {
		v, err := testutil.NewestNode(m)
		if err != nil {
			return nil, err
		}
		out = append(out, release{"node", strconv.Itoa(m), testutil.NodeReleases[m].Version, v})
	}
	toolchains, err := goToolchains()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, b := range testutil.GoLabelBuilds {
		if b.Toolchain == "" || seen[b.Toolchain] {
			continue
		}
		seen[b.Toolchain] = true
		line := goMinor(b.Toolchain)
		best := b.Toolchain
		for _, v := range toolchains {
			if goMinor(v) == line && goPatch(v) > goPatch(best) {
				best = v
			}
		}
		out = append(out, release{"go", line, b.Toolchain, best})
	}
	return out, nil
}

// goToolchains are the released toolchains ("go1.27.4") the proxy serves.
func goToolchains() ([]string, error) {
	resp, err := (&http.Client{Timeout: time.Minute}).Get(goProxy)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", goProxy, resp.Status)
	}
	var out []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	for sc.Scan() {
		// v0.0.1-go1.27.4.linux-amd64
		v, ok := strings.CutPrefix(sc.Text(), "v0.0.1-")
		v, arch, found := strings.Cut(v, ".linux-")
		if ok && found && arch == "amd64" && goPatch(v) >= 0 {
			out = append(out, v)
		}
	}
	return out, sc.Err()
}

// goMinor is "go1.27" of "go1.27.4".
func goMinor(v string) string {
	if i := strings.LastIndexByte(v, '.'); i > 0 && strings.Count(v, ".") == 2 {
		return v[:i]
	}
	return v
}

// goPatch is 4 of "go1.27.4"; -1 for anything else (rc, beta, "go1.21").
func goPatch(v string) int {
	if strings.Count(v, ".") != 2 {
		return -1
	}
	n, err := strconv.Atoi(v[strings.LastIndexByte(v, '.')+1:])
	if err != nil {
		return -1
	}
	return n
}
