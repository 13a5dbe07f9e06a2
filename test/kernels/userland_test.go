package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// elfLibraries, on the host's own files, finds what ldd lists.
func TestELFLibrariesAsLDD(t *testing.T) {
	const bin = "/usr/bin/python3.11"
	a := arches[runtime.GOARCH]
	if a == nil || !exists(bin) {
		testutil.SkipOrFail(t, "no Debian CPython of a known architecture here (make test-tools installs it)")
	}
	out, err := testutil.OutputWithin(exec.Command("ldd", bin), testutil.Patient(time.Minute))
	if err != nil {
		testutil.SkipOrFail(t, "ldd: %v", err)
	}
	want := parseLDD(out)
	got, err := userland{arch: a, sysroot: "/"}.elfLibraries([]string{bin})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("elfLibraries %v, ldd %v", got, want)
	}
}

// Links in an unpacked package, absolute ones too, resolve inside it.
func TestResolveInSysroot(t *testing.T) {
	root := t.TempDir()
	u := userland{sysroot: root}
	lib := filepath.Join(root, "lib", "aarch64-linux-gnu")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "ld-linux-aarch64.so.1"), []byte("ld"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1", filepath.Join(root, "lib", "ld-linux-aarch64.so.1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ld-linux-aarch64.so.1", filepath.Join(lib, "ld.so")); err != nil {
		t.Fatal(err)
	}
	for _, guest := range []string{"/lib/ld-linux-aarch64.so.1", "/lib/aarch64-linux-gnu/ld.so"} {
		if got := u.resolve(guest); !strings.HasPrefix(got, root) || !strings.HasSuffix(got, "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1") {
			t.Errorf("%s resolved to %s", guest, got)
		}
	}
}
