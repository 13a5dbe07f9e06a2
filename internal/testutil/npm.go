package testutil

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NPMPackage is a package of the npm registry a test runs, pinned to a
// version and its tarball's integrity.
type NPMPackage struct {
	Name, Version, Integrity string
}

// Postject is Node's tool that puts a single executable application's
// blob into a copy of node, with what it requires.
var Postject = []NPMPackage{
	{"postject", "1.0.0-alpha.6", "sha512-b9Eb8h2eVqNE8edvKdwqkrY6O7kAwmI8kcnBv1NScolYJbo59XUF0noFq+lxbC1yN20bmC0WBEbDC5H/7ASb0A=="},
	{"commander", "9.5.0", "sha512-KRs7WVDKg86PWiuAqhDrAQnTXZKraVcCc6vFdL14qrZ/DcWwuRo7VoiYXalXO7S5GKpqYiVEwCbgFDfxNHKJBQ=="},
}

// NPMTree returns a directory whose node_modules holds pkgs, fetched once
// and kept under NodeCacheEnv's parent (default
// /var/cache/bpfprofiler-test/npm/<name>). Without the registry the test
// is skipped, or fails under RequireBPFEnv.
func NPMTree(t testing.TB, name string, pkgs []NPMPackage) string {
	t.Helper()
	nodeMu.Lock()
	defer nodeMu.Unlock()
	dir := filepath.Join(filepath.Dir(cmp.Or(os.Getenv(NodeCacheEnv), "/var/cache/bpfprofiler-test/node")), "npm", name)
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	err := intoPlace(dir, func(tmp string) error {
		for _, p := range pkgs {
			data, err := npmTarball(p.Name, p.Version, p.Integrity)
			if err != nil {
				return err
			}
			if err := extractPackage(bytes.NewReader(data), filepath.Join(tmp, "node_modules", p.Name), func(string) bool { return true }); err != nil {
				return fmt.Errorf("%s %s: %w", p.Name, p.Version, err)
			}
		}
		return nil
	})
	if err != nil {
		if _, serr := os.Stat(dir); serr != nil { // another test process may have put it there
			SkipOrFail(t, "%s from the npm registry: %v", name, err)
		}
	}
	return dir
}

// extractPackage writes the regular files under package/ of the gzipped
// tar r that keep keeps (by their path under package/) into dir,
// executable where the archive says so; other entries, and names that
// would leave dir, are refused.
func extractPackage(r io.Reader, dir string, keep func(rel string) bool) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		rel, ok := strings.CutPrefix(h.Name, "package/")
		switch {
		case h.Typeflag == tar.TypeDir:
			continue
		case !ok || h.Typeflag != tar.TypeReg || !filepath.IsLocal(rel):
			return fmt.Errorf("unexpected entry %q in the package", h.Name)
		case !keep(rel):
			continue
		}
		to := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if h.Mode&0o111 != 0 {
			mode = 0o755
		}
		f, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, io.LimitReader(tr, 1<<30))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// seaFuse is the sentinel official node builds carry for postject.
const seaFuse = "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2"

// NodeSEA builds a Node single executable application of script with
// node (an official build, which has the fuse; Debian's has not): the
// blob from node --experimental-sea-config, put into a copy of node named
// name by postject. Its arguments follow its name, as script's follow the
// script; its frames name the script by its base name.
func NodeSEA(t testing.TB, node, script, name string) string {
	t.Helper()
	tools := NPMTree(t, "postject-"+Postject[0].Version, Postject)
	dir := t.TempDir()
	main, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	// Its frames name the script as the configuration's main does.
	config := fmt.Sprintf(`{"main": %q, "output": "sea-prep.blob", "disableExperimentalSEAWarning": true}`, filepath.Base(script))
	for file, data := range map[string]string{filepath.Base(script): string(main), "sea-config.json": config} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, name)
	b, err := os.ReadFile(node)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{node, "--experimental-sea-config", "sea-config.json"},
		{node, filepath.Join(tools, "node_modules", "postject", "dist", "cli.js"), name, "NODE_SEA_BLOB", "sea-prep.blob", "--sentinel-fuse", seaFuse},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		if out, err := RunWithin(cmd, Patient(2*time.Minute)); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	return bin
}
