package golabels

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

func TestReleaseMinor(t *testing.T) {
	tests := []struct {
		version string
		want    int
		err     bool
	}{
		{"go1.23.12", 23, false},
		{"go1.24rc1", 24, false},
		{"go1.27", 27, false},
		{"go1.25.0 X:boringcrypto", 25, false},
		{"devel go1.28-4f2c3a1 Mon Jan 5 2027", 28, false},
		{"go2", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := releaseMinor(tt.version)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("releaseMinor(%q) = %d, %v; want %d, error %v", tt.version, got, err, tt.want, tt.err)
		}
	}
}

// build builds testdata/labels for arch, with cgo or not, and opens it.
func build(t *testing.T, arch string, cgo bool) (*os.File, *elf.File) {
	return buildDir(t, "testdata/labels", arch, cgo, "")
}

// buildDir builds the program in dir for arch, with cgo or not, with
// ldflags and more go build flags, and opens it.
func buildDir(t *testing.T, dir, arch string, cgo bool, ldflags string, flags ...string) (*os.File, *elf.File) {
	t.Helper()
	cc := "gcc"
	if arch == "arm64" {
		cc = "aarch64-linux-gnu-gcc"
	}
	if _, err := exec.LookPath(cc); err != nil && cgo {
		t.Skipf("no %s to build a cgo executable for %s", cc, arch)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(dir))
	cmd := exec.Command("go", append(append([]string{"build", "-ldflags=" + ldflags}, flags...), "-o", out, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CC="+cc, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=1")
	}
	if b, err := testutil.RunWithin(cmd, testutil.Patient(testutil.BuildTimeout)); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ef, err := elf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, ef
}

// TestPrepare reads executables of this toolchain of each kind: their
// offsets are its release's in knownOffsets, the same as their DWARF says,
// and their g is where each kind keeps it.
func TestPrepare(t *testing.T) {
	tests := []struct {
		arch      string
		cgo       bool
		tlsOffset int64
		register  bool
	}{
		{"amd64", false, -8, false}, // the runtime's own TLS: m.tls[0] just below the thread pointer
		{"amd64", true, -8, false},  // runtime.tlsg, the executable's only TLS variable
		{"arm64", false, 0, true},   // x28
		{"arm64", true, 16, false},  // runtime.tls_g, first after the 16-byte thread control block
	}
	for _, tt := range tests {
		name := tt.arch
		if tt.cgo {
			name += "-cgo"
		}
		t.Run(name, func(t *testing.T) {
			f, ef := build(t, tt.arch, tt.cgo)
			b, err := Prepare(f, ef)
			if err != nil {
				t.Fatal(err)
			}
			if b.Release != runtime.Version() {
				t.Errorf("release %q, want %q", b.Release, runtime.Version())
			}
			if b.TLSOffset != tt.tlsOffset || b.GRegister != tt.register {
				t.Errorf("g at %d (register %v), want %d (register %v)", b.TLSOffset, b.GRegister, tt.tlsOffset, tt.register)
			}
			fromDWARF, err := DWARFOffsets(ef)
			if err != nil {
				t.Fatal(err)
			}
			fromDWARF.Layout = b.Offsets.Layout
			if b.Offsets != fromDWARF {
				t.Errorf("known offsets %+v, DWARF says %+v", b.Offsets, fromDWARF)
			}
			if ro := ef.Section(".rodata"); ro == nil || ro.Addr < b.StringsLo || ro.Addr+ro.Size > b.StringsHi {
				t.Errorf("read-only segment %#x-%#x does not hold .rodata", b.StringsLo, b.StringsHi)
			}
		})
	}
}

// A position-independent executable is loaded elsewhere than its
// addresses say: its strings are copied, never referenced.
// TestPreparePIE: a position-independent executable's literals are at
// its file addresses moved by the process's load bias.
func TestPreparePIE(t *testing.T) {
	f, ef := buildDir(t, "testdata/labels", runtime.GOARCH, false, "", "-buildmode=pie")
	b, err := Prepare(f, ef)
	if err != nil {
		t.Fatal(err)
	}
	ro := ef.Section(".rodata")
	if ef.Type != elf.ET_DYN || ro == nil || b.StringsLo != ro.Addr || b.StringsHi != ro.Addr+ro.Size {
		t.Fatalf("%v: read-only segment %#x-%#x, want .rodata's", ef.Type, b.StringsLo, b.StringsHi)
	}
	const bias = 0x55d0_0000_0000
	if lo, hi := b.StringsAt(bias); lo != ro.Addr+bias || hi != ro.Addr+ro.Size+bias {
		t.Errorf("at bias %#x: %#x-%#x, want .rodata's moved by it", uint64(bias), lo, hi)
	}
}

func TestStringsAt(t *testing.T) {
	tests := []struct {
		name           string
		lo, hi, bias   uint64
		wantLo, wantHi uint64
	}{
		{"not position independent", 0x4a0000, 0x4c0000, 0, 0x4a0000, 0x4c0000},
		{"moved", 0x1000, 0x3000, 0x5600_0000_0000, 0x5600_0000_1000, 0x5600_0000_3000},
		{"none", 0, 0, 0x5600_0000_0000, 0, 0},
		{"past a reference's 6 bytes", 0x1000, 0x3000, 1<<48 - 0x2000, 0, 0},
		{"wrapping", 0x1000, 0x3000, ^uint64(0) - 0x1800, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Binary{StringsLo: tt.lo, StringsHi: tt.hi}
			if lo, hi := b.StringsAt(tt.bias); lo != tt.wantLo || hi != tt.wantHi {
				t.Errorf("%#x-%#x, want %#x-%#x", lo, hi, tt.wantLo, tt.wantHi)
			}
		})
	}
}

func TestPrepareNotGo(t *testing.T) {
	for _, path := range []string{"/bin/sh", "/usr/bin/gzip"} {
		f, err := os.Open(path)
		if err != nil {
			t.Skip(err)
		}
		defer f.Close()
		ef, err := elf.NewFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(f, ef); !errors.Is(err, ErrNotGo) {
			t.Errorf("%s: %v, want ErrNotGo", path, err)
		}
	}
}

// TestPrepareLabelSetter tells the executables that may set labels, by
// their function name table, stripped or not: one importing runtime/pprof
// without setting labels has none to read, but its goroutines.
func TestPrepareLabelSetter(t *testing.T) {
	tests := []struct {
		dir     string
		cgo     bool
		ldflags string
		want    error
	}{
		{"testdata/labels", false, "-s -w", nil},
		{"testdata/labels", true, "", nil},
		{"testdata/nolabels", false, "-s -w", ErrNoLabels},
		{"testdata/nolabels", true, "", ErrNoLabels},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s cgo=%v %q", filepath.Base(tt.dir), tt.cgo, tt.ldflags), func(t *testing.T) {
			f, ef := buildDir(t, tt.dir, runtime.GOARCH, tt.cgo, tt.ldflags)
			if _, err := Prepare(f, ef); !errors.Is(err, tt.want) {
				t.Errorf("Prepare: %v, want %v", err, tt.want)
			}
			// Its goroutines are found either way.
			b, err := PrepareGoroutines(f, ef)
			if err != nil || b.SetsLabels != (tt.want == nil) {
				t.Errorf("PrepareGoroutines: %+v, %v; want SetsLabels %v", b, err, tt.want == nil)
			}
		})
	}
}

func TestContains(t *testing.T) {
	needle := []byte("runtime/pprof.runtime_setProfLabel\x00")
	at := func(size, off int) []byte {
		b := bytes.Repeat([]byte{'x'}, size)
		if off >= 0 {
			copy(b[off:], needle)
		}
		return b
	}
	const mib = 1 << 20
	tests := []struct {
		name string
		data []byte
		want bool
	}{
		{"absent", at(3*mib, -1), false},
		{"first chunk", at(3*mib, 10), true},
		{"across the first boundary", at(3*mib, mib-5), true},
		{"ending the last chunk", at(2*mib, 2*mib-len(needle)), true},
		{"cut off by the end", at(mib, mib-3)[:mib], false},
		{"shorter than the needle", needle[:5], false},
	}
	for _, tt := range tests {
		got, err := contains(bytes.NewReader(tt.data), needle)
		if got != tt.want || err != nil {
			t.Errorf("%s: %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

func TestOffsetsCheck(t *testing.T) {
	for r, o := range knownOffsets {
		if err := o.check(); err != nil {
			t.Errorf("go1.%d: %v", r.minor, err)
		}
	}
	for _, o := range []Offsets{{GM: 48, GLabels: 600, GGoid: 152}, {GM: 48, GLabels: 349, GGoid: 152}, {GM: 700, GLabels: 48, GGoid: 152}, {GM: 48, GLabels: 352, GGoid: 504}, {GM: 8, GLabels: 352, GGoid: 152}} {
		if err := o.check(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
