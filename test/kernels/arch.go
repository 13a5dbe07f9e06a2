package main

import (
	"fmt"
	"runtime"
	"strings"
)

// arch is an architecture of the matrix's guests.
type arch struct {
	name    string   // GOARCH and Debian's name: amd64, arm64
	triplet string   // Debian's multiarch directory of its libraries
	qemu    []string // qemu and its machine, before the matrix's own arguments
	console string   // the kernel's serial console
	// patience stretches the tests' waits and their workloads' run times
	// in its guests (testutil.PatienceEnv), and the time each test is
	// allowed: arm64's emulation runs the collector several times slower.
	patience int
}

// arches are the architectures the matrix boots. Both are emulated (TCG).
//
// arm64's -cpu max has the RNDR instruction, which seeds the guest's random
// pool at once (cortex-a72 has none, and no virtio-rng module is in the
// initramfs), and pointer authentication, emulated with qemu's own cheap
// algorithm (pauth-impdef): QARMA's costs a pointer-signing kernel dearly.
// cortex-a72 was 10-20% quicker in one comparison (6.1: boot 4.4 s against
// 7.4 s, two checks 75 s against 81 s).
var arches = map[string]*arch{
	"amd64": {
		name: "amd64", triplet: "x86_64-linux-gnu", console: "ttyS0", patience: 1,
		qemu: []string{"qemu-system-x86_64", "-cpu", "max"},
	},
	"arm64": {
		name: "arm64", triplet: "aarch64-linux-gnu", console: "ttyAMA0", patience: 3,
		qemu: []string{"qemu-system-aarch64", "-M", "virt", "-cpu", "max,pauth-impdef=on"},
	},
}

// host reports whether a is the architecture of the machine running the
// matrix: its guests get the machine's own busybox, CPython and OpenJDK;
// the others get Debian bookworm's (userland.go).
func (a *arch) host() bool { return a.name == runtime.GOARCH }

// kernelSpec is one entry of -kernels: "host", a Debian series of the host's
// architecture ("6.1") or of a named one ("arm64/6.1").
type kernelSpec struct {
	arch   *arch
	series string // "host" for the running kernel
}

func (k kernelSpec) String() string {
	if k.series == "host" || k.arch.host() {
		return k.series
	}
	return k.arch.name + "/" + k.series
}

// parseKernel reads one entry of -kernels.
func parseKernel(s string) (kernelSpec, error) {
	name, series, ok := strings.Cut(s, "/")
	if !ok {
		name, series = runtime.GOARCH, s
	}
	a := arches[name]
	switch {
	case a == nil:
		return kernelSpec{}, fmt.Errorf("-kernels %q: no architecture %q (amd64, arm64)", s, name)
	case series == "":
		return kernelSpec{}, fmt.Errorf("-kernels %q: no series", s)
	case series == "host" && !a.host():
		return kernelSpec{}, fmt.Errorf("-kernels %q: the host is %s", s, runtime.GOARCH)
	}
	return kernelSpec{arch: a, series: series}, nil
}
