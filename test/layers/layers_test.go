// Package layers checks the direction the data flows in (DESIGN.md): the
// kernel-facing packages hand capture values to assemble, assemble hands
// report values to pdata and pproffile, and only the receiver sees them all.
package layers

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/bpfprofiler/bpfprofiler/"

// kernelSide are the packages that load BPF and read its maps.
var kernelSide = []string{
	"bpf", "internal/stackdrain", "internal/sampler", "internal/offcpu", "internal/probes", "internal/unwinder", "internal/scopemap",
	"internal/readbench", "internal/allocs",
}

// forbidden lists, for each package, the packages it must not import
// (directly); "kernel" stands for every package of kernelSide.
var forbidden = map[string][]string{
	"internal/capture":   {"kernel", "internal/assemble", "internal/report", "internal/pdata", "internal/pproffile"},
	"internal/report":    {"kernel", "internal/capture", "internal/assemble", "internal/pdata", "internal/pproffile"},
	"internal/assemble":  {"kernel", "internal/pdata", "internal/pproffile", "internal/symbolize", "internal/identity"},
	"internal/scopejoin": {"kernel", "internal/assemble", "internal/pdata", "internal/pproffile", "internal/symbolize", "internal/identity"},
	"internal/pdata":     {"kernel", "internal/capture", "internal/assemble", "internal/symbolize", "internal/identity"},
	"internal/pproffile": {"kernel", "internal/capture", "internal/assemble", "internal/pdata", "internal/symbolize", "internal/identity"},
	"internal/symbolize": {"kernel", "internal/capture", "internal/assemble", "internal/pdata", "internal/pproffile"},
	"internal/identity":  {"kernel", "internal/capture", "internal/assemble", "internal/pdata", "internal/pproffile"},
	// What processes publish about themselves is read for identity, from /proc alone.
	"internal/processctx": {"kernel", "internal/capture", "internal/assemble", "internal/report", "internal/pdata",
		"internal/pproffile", "internal/symbolize", "internal/identity"},
	// Thread contexts: where a file's variable is and what a record holds,
	// for the loader and for assembly alike.
	"internal/threadctx": {"kernel", "internal/capture", "internal/assemble", "internal/report", "internal/pdata",
		"internal/pproffile", "internal/symbolize", "internal/identity"},
	// The runtimes serve both sides (the unwinder loads what their walkers
	// need, the symbolizer names their frames) and see neither.
	"internal/runtimes":         runtimeForbidden,
	"internal/runtimes/all":     runtimeForbidden,
	"internal/runtimes/cpython": runtimeForbidden,
	"internal/runtimes/hotspot": runtimeForbidden,
	"internal/runtimes/php":     runtimeForbidden,
	"internal/runtimes/ruby":    runtimeForbidden,
	"internal/runtimes/v8":      runtimeForbidden,
}

var runtimeForbidden = []string{"kernel", "internal/capture", "internal/assemble", "internal/report", "internal/pdata",
	"internal/pproffile", "internal/symbolize", "internal/identity"}

func init() {
	for _, k := range kernelSide {
		forbidden[k] = []string{"internal/assemble", "internal/report", "internal/pdata", "internal/pproffile", "internal/identity"}
	}
}

// imports returns the module packages pkg imports in its non-test Go files
// for linux.
func imports(t *testing.T, root, pkg string) []string {
	t.Helper()
	ctx := build.Default
	ctx.GOOS = "linux"
	p, err := ctx.ImportDir(filepath.Join(root, pkg), 0)
	if err != nil {
		t.Fatalf("read package %s: %v", pkg, err)
	}
	var out []string
	for _, imp := range p.Imports {
		if rel, ok := strings.CutPrefix(imp, module); ok {
			out = append(out, rel)
		}
	}
	return out
}

func TestDataFlowsOneWay(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for pkg, not := range forbidden {
		for _, imp := range imports(t, root, pkg) {
			if slices.Contains(not, imp) || (slices.Contains(not, "kernel") && slices.Contains(kernelSide, imp)) {
				t.Errorf("%s imports %s, against the data flow", pkg, imp)
			}
		}
	}
	// Only the receiver assembles the pipeline; nothing below imports it,
	// and only kernel-side packages load BPF objects.
	for _, dir := range packageDirs(t, filepath.Join(root, "internal")) {
		pkg, _ := filepath.Rel(root, dir)
		if pkg == "internal/testutil" {
			continue
		}
		for _, imp := range imports(t, root, pkg) {
			if strings.HasPrefix(imp, "receiver/") {
				t.Errorf("%s imports the receiver %s", pkg, imp)
			}
			if imp == "bpf" && !slices.Contains(kernelSide, pkg) {
				t.Errorf("%s imports bpf but is not a kernel-side package", pkg)
			}
		}
	}
}

// packageDirs lists the directories under dir holding Go files (nested
// packages, as internal/runtimes/*, included; testdata left out).
func packageDirs(t *testing.T, dir string) []string {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if goFiles, _ := filepath.Glob(filepath.Join(path, "*.go")); len(goFiles) > 0 {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}
